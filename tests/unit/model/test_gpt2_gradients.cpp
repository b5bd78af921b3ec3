// The model's loss against an independent double-precision GPT-2, and every parameter
// tensor's gradient against central finite differences of that reference; with dropout, and
// with Megatron's --reset-position-ids and --reset-attention-mask on samples of several
// documents; with the tanh GELU and the exact (erf) one, whose losses differ.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "gpt2_reference.h"
#include "data/documents.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/gpt2.h"
#include "model_test_util.h"
#include "tests/scoped_env.h"

namespace trident {
namespace {

struct Case {
  float hidden_dropout, attention_dropout;
  // End-of-document tokens in the samples, with positions and/or attention reset.
  bool reset_positions = false, reset_attention = false;
  // TRIDENT_ATTN_SAVE_MASK=1: the attention backward reads the mask its forward saved. The
  // backward then runs under another dropout seed (no hidden dropout, whose backward draws):
  // only the saved bits give the reference's gradients.
  bool save_mask = false;
  Gelu gelu = Gelu::Tanh;
  bool documents() const { return reset_positions || reset_attention; }
};

class Gpt2GradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(Gpt2GradientTest, LossMatchesReferenceAndGradientsMatchFiniteDifferences) {
  const Case tc = GetParam();
  ModelConfig cfg = test::tiny_config();
  cfg.hidden_dropout = tc.hidden_dropout;
  cfg.attention_dropout = tc.attention_dropout;
  cfg.gelu = tc.gelu;
  // A wide init makes attention far from uniform and GELU far from linear, so the
  // comparison is sensitive to every part of the block (at 0.02 it barely is).
  cfg.init_method_std = 0.3f;
  const int B = 2, T = cfg.seq_length;
  auto be = make_cpu_backend();
  StageLayout layout;
  layout.reset_position_ids = tc.reset_positions;
  layout.reset_attention_mask = tc.reset_attention;
  // The variable as the case asks, whatever the environment says (read when the model is built).
  const test::ScopedEnv save_mask("TRIDENT_ATTN_SAVE_MASK", tc.save_mask ? "1" : "0");
  Gpt2Model model(cfg, *be, layout, B);
  model.set_dropout_seed(77);
  model.params().init(1234);

  std::mt19937 rng(5);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % cfg.vocab_size);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % cfg.vocab_size);
  const int32_t eod = static_cast<int32_t>(cfg.vocab_size) - 1;
  std::vector<int32_t> starts(B * T), positions(B * T);
  const uint64_t sample_base = 40;
  MicroBatch mb{tokens.data(), targets.data(), sample_base};
  if (tc.documents()) {
    // Sample 0: documents [0, 3) [3, 4) [4, 8); sample 1: [0, 1) [1, 7) [7, 8).
    for (auto& t : tokens)
      if (t == eod) t = 0;  // end-of-document tokens only where placed
    for (int t : {2, 3, T + 0, T + 6}) tokens[t] = eod;
    for (int b = 0; b < B; ++b) document_starts(tokens.data() + b * T, T, eod, starts.data() + b * T);
    for (int n = 0; n < B * T; ++n) positions[n] = n % T - starts[n];
    if (tc.reset_positions) mb.positions = positions.data();
    if (tc.reset_attention) mb.document_starts = starts.data();
  }
  model.params().zero_grads();
  model.forward(0, mb, true, 1.0f / (B * T));
  if (tc.save_mask) model.set_dropout_seed(78);
  model.backward(0);
  const LossStats st = model.loss_stats();
  ASSERT_EQ(st.tokens, B * T);

  ref::RefConfig rc{cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, T, B, static_cast<int>(cfg.vocab_size),
                    cfg.hidden_dropout, cfg.attention_dropout, 77, sample_base};
  rc.eod = eod;
  rc.reset_position_ids = tc.reset_positions;
  rc.reset_attention_mask = tc.reset_attention;
  rc.gelu = tc.gelu;
  ref::Params P;
  for (const LocalParam& p : model.params().list()) {
    std::vector<float> h = test::to_host(*be, model.params().param(p));
    P[p.spec.name] = std::vector<double>(h.begin(), h.end());
  }
  std::vector<int> tok(tokens.begin(), tokens.end()), tgt(targets.begin(), targets.end());
  const double ref_loss = ref::gpt2_loss(rc, P, tok, tgt);
  EXPECT_NEAR(st.loss_sum / (B * T), ref_loss, 1e-5 * ref_loss);

  const double eps = 1e-5;
  int checked_tensors = 0;
  for (const LocalParam& p : model.params().list()) {
    const std::vector<float> g = test::to_host(*be, model.params().grad(p));
    double gmax = 0;
    for (float v : g) gmax = std::max(gmax, std::fabs(static_cast<double>(v)));
    ASSERT_GT(gmax, 0.0) << p.spec.name << " has an all-zero gradient";
    // Elements to check: first, last real, and a few random ones (wte: real vocab rows).
    const int64_t n = p.spec.name == "wte" ? cfg.vocab_size * cfg.hidden_size : p.numel();
    std::vector<int64_t> idx = {0, n - 1};
    for (int i = 0; i < 4; ++i) idx.push_back(static_cast<int64_t>(rng() % n));
    std::vector<double>& w = P[p.spec.name];
    for (int64_t i : idx) {
      const double saved = w[i];
      w[i] = saved + eps;
      const double up = ref::gpt2_loss(rc, P, tok, tgt);
      w[i] = saved - eps;
      const double down = ref::gpt2_loss(rc, P, tok, tgt);
      w[i] = saved;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(g[i], fd, 2e-3 * std::fabs(fd) + 2e-4 * gmax + 1e-7) << p.spec.name << "[" << i << "]";
    }
    if (p.spec.name == "wte") {  // padding rows never take part
      for (int64_t i = n; i < p.numel(); ++i) ASSERT_EQ(g[i], 0.0f) << "wte padding gradient at " << i;
    }
    ++checked_tensors;
  }
  EXPECT_EQ(checked_tensors, 4 + 12 * cfg.num_layers);
}

// The GELU's form reaches the model: the same weights and tokens give another loss with the
// erf GELU (each loss is its own reference's, above), as the reference says they should.
TEST(Gpt2Gelu, ErfModelLossDiffersFromTanh) {
  auto be = make_cpu_backend();
  const int B = 2;
  std::map<Gelu, double> loss;
  ref::Params P;
  std::vector<int> tok, tgt;
  for (const Gelu form : {Gelu::Tanh, Gelu::Erf}) {
    ModelConfig cfg = test::tiny_config();
    cfg.init_method_std = 0.3f;
    cfg.gelu = form;
    const int T = cfg.seq_length;
    Gpt2Model model(cfg, *be, StageLayout{}, B);
    model.params().init(1234);  // the same weights for both forms
    std::mt19937 rng(5);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % cfg.vocab_size);
    for (auto& t : targets) t = static_cast<int32_t>(rng() % cfg.vocab_size);
    model.params().zero_grads();
    model.forward(0, MicroBatch{tokens.data(), targets.data(), 0}, false, 1.0f / (B * T));
    loss[form] = model.loss_stats().loss_sum / (B * T);
    if (form == Gelu::Tanh) {
      for (const LocalParam& p : model.params().list()) {
        std::vector<float> h = test::to_host(*be, model.params().param(p));
        P[p.spec.name] = std::vector<double>(h.begin(), h.end());
      }
      tok.assign(tokens.begin(), tokens.end());
      tgt.assign(targets.begin(), targets.end());
    }
  }
  const ModelConfig cfg = test::tiny_config();
  ref::RefConfig rc{cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.seq_length, B,
                    static_cast<int>(cfg.vocab_size)};
  const double ref_tanh = ref::gpt2_loss(rc, P, tok, tgt);
  rc.gelu = Gelu::Erf;
  const double ref_erf = ref::gpt2_loss(rc, P, tok, tgt);
  // Each model's loss is its own reference's, far closer than the two references are to each
  // other (the forms differ by up to 4.7e-4 an activation).
  const double apart = std::fabs(ref_erf - ref_tanh);
  EXPECT_GT(apart, 1e-5 * ref_tanh);
  EXPECT_NEAR(loss[Gelu::Tanh], ref_tanh, apart / 20);
  EXPECT_NEAR(loss[Gelu::Erf], ref_erf, apart / 20);
  std::printf("loss: tanh %.9g (reference %.9g), erf %.9g (reference %.9g)\n", loss[Gelu::Tanh], ref_tanh,
              loss[Gelu::Erf], ref_erf);
}

INSTANTIATE_TEST_SUITE_P(Dropout, Gpt2GradientTest,
                         ::testing::Values(Case{0.0f, 0.0f}, Case{0.1f, 0.1f}, Case{0.0f, 0.0f, true, true},
                                           Case{0.1f, 0.1f, true, true}, Case{0.1f, 0.1f, true, false},
                                           Case{0.1f, 0.1f, false, true}, Case{0.0f, 0.1f, false, false, true},
                                           Case{0.0f, 0.1f, false, true, true},
                                           Case{0.0f, 0.0f, false, false, false, Gelu::Erf},
                                           Case{0.1f, 0.1f, false, false, false, Gelu::Erf}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(c.hidden_dropout > 0      ? "with_dropout"
                                              : c.attention_dropout > 0 ? "attention_dropout"
                                                                        : "no_dropout") +
                                  (c.reset_positions ? "_positions" : "") + (c.reset_attention ? "_attention" : "") +
                                  (c.save_mask ? "_saved_mask" : "") + (c.gelu == Gelu::Erf ? "_erf_gelu" : "");
                         });

}  // namespace
}  // namespace trident
