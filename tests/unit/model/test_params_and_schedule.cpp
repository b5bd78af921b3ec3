// Canonical parameters: layout-independent init across TP slicings, padding, counts;
// the LR schedule against its closed forms; the FLOP formula; the log line's shape.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>

#include "kernels/cpu/cpu_backend.h"
#include "model/param_store.h"
#include "model_test_util.h"
#include "train/log_line.h"
#include "train/lr_schedule.h"

namespace trident {
namespace {

TEST(Params, InitIsIndependentOfTensorParallelSlicing) {
  ModelConfig cfg = test::tiny_config();
  cfg.num_attention_heads = 4;
  auto be = make_cpu_backend();
  auto all = [](const ParamSpec&) { return true; };
  ParamStore full(*be, gpt2_param_specs(cfg, 1), 1, 0, DType::F32, DType::F32, all);
  full.init(42);
  for (int tp : {2, 4}) {
    for (int r = 0; r < tp; ++r) {
      ParamStore part(*be, gpt2_param_specs(cfg, tp), tp, r, DType::F32, DType::F32, all);
      part.init(42);
      for (const LocalParam& p : part.list()) {
        const std::vector<float> local = test::to_host(*be, part.param(p));
        const std::vector<float> whole = test::to_host(*be, full.param(p.spec.name));
        const int64_t real = p.spec.name == "wte" ? cfg.vocab_size * cfg.hidden_size : INT64_MAX;
        for (int64_t i = 0; i < p.numel(); ++i) {
          const int64_t g = canonical_index(p.spec, tp, r, i);
          if (g >= real) {
            ASSERT_EQ(local[i], 0.0f) << "padding of " << p.spec.name;
            continue;
          }
          ASSERT_EQ(local[i], whole[g]) << p.spec.name << " tp" << tp << " rank " << r << " elem " << i;
        }
      }
    }
  }
}

// canonical_run is exactly the length of each run of consecutive canonical indices that
// canonical_index produces (checked element by element for every parameter and TP rank).
TEST(Params, CanonicalRunsMatchCanonicalIndex) {
  ModelConfig cfg = test::tiny_config();
  cfg.num_attention_heads = 4;
  for (int tp : {1, 2, 4}) {
    for (const ParamSpec& s : gpt2_param_specs(cfg, tp)) {
      const int64_t n = local_shape(s, tp).numel();
      for (int r = 0; r < tp; ++r) {
        for (int64_t i = 0; i < n;) {
          const int64_t run = canonical_run(s, tp, i), g = canonical_index(s, tp, r, i);
          ASSERT_GE(run, 1) << s.name;
          ASSERT_LE(i + run, n) << s.name;
          for (int64_t k = 1; k < run; ++k) ASSERT_EQ(canonical_index(s, tp, r, i + k), g + k) << s.name;
          if (i + run < n && tp > 1 && s.shard != ShardRule::Replicated && s.shard != ShardRule::SplitRows) {
            ASSERT_NE(canonical_index(s, tp, r, i + run), g + run) << s.name << " run ends too early";
          }
          i += run;
        }
      }
    }
  }
}

TEST(Params, InitStatisticsFollowGpt2) {
  ModelConfig cfg = test::tiny_config();
  cfg.hidden_size = 64;
  cfg.num_layers = 8;
  auto be = make_cpu_backend();
  ParamStore s(*be, gpt2_param_specs(cfg, 1), 1, 0, DType::F32, DType::F32, [](const ParamSpec&) { return true; });
  s.init(7);
  auto stdev = [&](const std::string& name) {
    const std::vector<float> v = test::to_host(*be, s.param(name));
    double m = 0, q = 0;
    for (float x : v) m += x, q += double(x) * x;
    m /= v.size();
    return std::sqrt(q / v.size() - m * m);
  };
  EXPECT_NEAR(stdev("h.0.mlp.fc.weight"), 0.02, 0.001);
  EXPECT_NEAR(stdev("h.0.mlp.proj.weight"), 0.02 / std::sqrt(16.0), 0.0004);
  for (float x : test::to_host(*be, s.param("h.3.ln_1.weight"))) ASSERT_EQ(x, 1.0f);
  for (float x : test::to_host(*be, s.param("h.3.attn.qkv.bias"))) ASSERT_EQ(x, 0.0f);
}

// --embedding-init-method-std: the word and position embeddings drawn with it and left out
// of weight decay; every other weight as before. Unset, the embeddings follow
// --init-method-std and decay.
TEST(Params, EmbeddingInitStdAndWeightDecay) {
  ModelConfig cfg = test::tiny_config();
  cfg.hidden_size = 64;
  cfg.vocab_size = 1000;
  cfg.max_position_embeddings = 256;
  auto be = make_cpu_backend();
  for (float embedding_std : {0.0f, 1.0f}) {
    SCOPED_TRACE("embedding std " + std::to_string(embedding_std));
    cfg.embedding_init_method_std = embedding_std;
    const float want = embedding_std > 0 ? embedding_std : cfg.init_method_std;
    const std::vector<ParamSpec> specs = gpt2_param_specs(cfg, 1);
    ParamStore s(*be, specs, 1, 0, DType::F32, DType::F32, [](const ParamSpec&) { return true; });
    s.init(11);
    for (const char* name : {"wte", "wpe"}) {
      std::vector<float> v = test::to_host(*be, s.param(name));
      if (std::string(name) == "wte") v.resize(static_cast<size_t>(cfg.vocab_size * cfg.hidden_size));  // no padding
      double q = 0;
      for (float x : v) q += double(x) * x;
      EXPECT_NEAR(std::sqrt(q / v.size()), want, 0.02 * want) << name;
    }
    for (const ParamSpec& p : specs) {
      const bool embedding = p.name == "wte" || p.name == "wpe";
      const bool two_d = p.shape.ndim == 2;
      EXPECT_EQ(p.weight_decay, two_d && !(embedding && embedding_std > 0)) << p.name;
      if (p.name == "h.1.mlp.fc.weight") {
        EXPECT_EQ(p.std, cfg.init_method_std);
      }
    }
  }
}

TEST(Params, CountsMatchGpt2Small) {
  ModelConfig c;  // defaults are GPT-2 small
  EXPECT_EQ(c.padded_vocab_size(1), 50304);
  EXPECT_EQ(c.padded_vocab_size(2), 50432);
  EXPECT_EQ(c.padded_vocab_size(4), 50688);
  // 124,475,904 with the padded vocabulary (124,439,808 unpadded).
  EXPECT_EQ(c.num_parameters(1), 124475904);
}

// The bounds that keep every derived size inside int64 (parameter counts at the largest
// shape, the padded vocabulary): each refused with the flag named.
TEST(Params, ShapeBoundsKeepDerivedSizesInRange) {
  ModelConfig c;
  c.num_layers = kMaxLayers;
  c.hidden_size = kMaxHiddenSize;
  c.num_attention_heads = 1;
  c.max_position_embeddings = kMaxPositions;
  c.vocab_size = kMaxVocabSize;
  c.make_vocab_size_divisible_by = kMaxVocabDivisor;
  EXPECT_NO_THROW(c.validate(1));
  // 12 h^2 + 13 h per layer, the word and position tables and the final LayerNorm, exactly.
  const long double h = kMaxHiddenSize, want = static_cast<long double>(kMaxLayers) * (12 * h * h + 13 * h) +
                                                static_cast<long double>(c.padded_vocab_size(1)) * h +
                                                static_cast<long double>(kMaxPositions) * h + 2 * h;
  EXPECT_EQ(static_cast<long double>(c.num_parameters(1)), want);
  EXPECT_GT(c.padded_vocab_size(1), kMaxVocabSize);
  struct Bad {
    void (*edit)(ModelConfig&);
    const char* message;
  };
  for (const Bad& b : std::vector<Bad>{
           {[](ModelConfig& m) { m.num_layers = kMaxLayers + 1; }, "--num-layers (65537) must be at most 65536"},
           {[](ModelConfig& m) { m.hidden_size = 2 * kMaxHiddenSize; }, "--hidden-size (2097152) must be at most"},
           {[](ModelConfig& m) { m.max_position_embeddings = kMaxPositions + 1; }, "--max-position-embeddings"},
           {[](ModelConfig& m) { m.vocab_size = kMaxVocabSize + 1; }, "(token ids are int32)"},
           {[](ModelConfig& m) { m.make_vocab_size_divisible_by = kMaxVocabDivisor + 1; },
            "--make-vocab-size-divisible-by (65537)"}}) {
    ModelConfig m = c;
    b.edit(m);
    try {
      m.validate(1);
      ADD_FAILURE() << b.message << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
  }
}

TEST(Schedule, MatchesClosedForms) {
  LrSchedule s;
  s.max_lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_samples = 100;
  s.decay_samples = 1100;
  s.style = LrDecayStyle::Cosine;
  EXPECT_DOUBLE_EQ(s.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(50), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr(100), 1e-3);
  EXPECT_NEAR(s.lr(600), 1e-4 + 0.5 * (std::cos(M_PI * 0.5) + 1) * 9e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(1100), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(5000), 1e-4);
  s.style = LrDecayStyle::Linear;
  EXPECT_NEAR(s.lr(350), 1e-4 + 0.75 * 9e-4, 1e-15);
  s.style = LrDecayStyle::Constant;
  EXPECT_DOUBLE_EQ(s.lr(5000), 1e-3);
}

TEST(Flops, MegatronFormula) {
  ModelConfig c;  // 12 layers, 768, seq 1024, V 50304
  const double expect = 72.0 * 8 * 1024 * 12 * 768.0 * 768 * (1 + 1024 / (6.0 * 768) + 50304 / (12.0 * 12 * 768));
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(c, 8), expect);
  // Megatron-LM's num_floating_point_operations of 2025, its terms per token written out: per
  // layer QKV (3 h^2), the causal scores and their product with V (s h / 2 each), the output
  // projection (h^2) and the MLP (8 h^2), and the logits (h V); x 2 (FMA) x 3 (fwd + bwd).
  const double h = 768, s = 1024, V = 50304;
  const double per_token = 6 * (12 * (3 * h * h + s * h / 2 * 2 + h * h + 8 * h * h) + h * V);
  EXPECT_NEAR(megatron_flops_per_iteration(c, 8), 8 * s * per_token, 1e-12 * 8 * s * per_token);
  EXPECT_LT(megatron_flops_per_iteration(c, 8), model_flops_per_iteration(c, 8));
}

// Python's repr of a float, as Megatron's f-string lines print one (checked against CPython).
TEST(LogLine, PythonFloatRepr) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.0, "0.0"}, {-0.0, "-0.0"}, {1.0, "1.0"}, {0.0123, "0.0123"}, {1e-05, "1e-05"}, {0.0001, "0.0001"},
      {123456789.0, "123456789.0"}, {1e16, "1e+16"}, {1.5e-7, "1.5e-07"}, {1234.5678, "1234.5678"},
      {-0.5, "-0.5"}, {0.1 + 0.2, "0.30000000000000004"}, {1e15, "1000000000000000.0"},
      {12345678901234567.0, "1.2345678901234568e+16"}, {2.5e-300, "2.5e-300"}};
  for (const auto& [x, want] : cases) EXPECT_EQ(python_float_repr(x), want) << want;
}

TEST(LogLine, HasMegatronFieldsOnOneLine) {
  IterationLog l;
  l.iteration = 10;
  l.train_iters = 100;
  l.consumed_samples = 640;
  l.ms_per_iteration = 812.34;
  l.learning_rate = 1e-4;
  l.global_batch_size = 64;
  l.lm_loss = 7.123456;
  l.lm_acc = 0.054;
  l.grad_norm = 1.2345;
  l.tokens_per_second = 12345.6;
  l.tflops_per_rank = 0.42;
  const std::string s = format_iteration_log(l);
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s,
            " iteration       10/     100 | consumed samples:          640 | elapsed time per iteration (ms): 812.3 |"
            " learning rate: 1.000E-04 | global batch size:    64 | lm loss: 7.123456E+00 |"
            " loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
            " lm acc: 0.0540 | tokens per second: 12345.6 | TFLOP/s per rank: 0.420 |");
  // --log-throughput's and --log-energy's fields, where Megatron puts them: after the time,
  // before the learning rate.
  l.megatron_tflops_per_gpu = 478.04;
  l.energy_per_gpu = 512.04;
  l.power_per_gpu = 630.31;
  EXPECT_NE(format_iteration_log(l).find(" elapsed time per iteration (ms): 812.3 | throughput per GPU (TFLOP/s/GPU): "
                                         "478.0 | energy per GPU (J/iter/GPU): 512.0 | power per GPU (W/GPU): 630.3 |"
                                         " learning rate: 1.000E-04 |"),
            std::string::npos)
      << format_iteration_log(l);
}

// Megatron: a loss is printed only when its average over the interval's updating
// iterations is > 0 (none updated: no loss field), the loss scale always, the grad norm
// only when the last iteration produced one (a skipped step has none).
TEST(LogLine, IntervalOfSkippedIterationsHasNoLossOrGradNorm) {
  IterationLog l;
  l.iteration = 5;
  l.train_iters = 30;
  l.consumed_samples = 20;
  l.ms_per_iteration = 40.04;
  l.learning_rate = 0;
  l.global_batch_size = 4;
  l.lm_loss = 0;  // no iteration of the interval updated
  l.lm_acc = 0;
  l.loss_scale = 268435456.0;
  l.grad_norm = std::nan("");
  l.skipped_iterations = 5;
  l.nan_iterations = 1;
  l.tokens_per_second = 1600;
  l.tflops_per_rank = 0.001;
  l.mfu = 0.0123;
  EXPECT_EQ(format_iteration_log(l),
            " iteration        5/      30 | consumed samples:           20 | elapsed time per iteration (ms): 40.0 |"
            " learning rate: 0.000E+00 | global batch size:     4 | loss scale: 268435456.0 |"
            " number of skipped iterations:   5 | number of nan iterations:   1 |"
            " tokens per second: 1600.0 | TFLOP/s per rank: 0.001 | MFU: 1.2% |");
  // Megatron's skipped samples (--iterations-to-skip) follow the consumed samples, when any.
  l.skipped_samples = 8;
  EXPECT_NE(format_iteration_log(l).find(" consumed samples:           20 | skipped samples:            8 |"
                                         " elapsed time"),
            std::string::npos);
  l.skipped_samples = 0;
  l.grad_norm = std::numeric_limits<double>::infinity();
  EXPECT_EQ(format_iteration_log(l).find("grad norm"), std::string::npos);
  l.lm_loss = 6.25;  // some iteration updated, the last one skipped
  l.lm_acc = 0.5;
  EXPECT_NE(format_iteration_log(l).find(" global batch size:     4 | lm loss: 6.250000E+00 |"
                                         " loss scale: 268435456.0 | number of skipped"),
            std::string::npos);
  EXPECT_NE(format_iteration_log(l).find(" number of nan iterations:   1 | lm acc: 0.5000 | tokens per second"),
            std::string::npos);
  // --log-params-norm: Megatron's field after the grad norm (or in its place when there is none).
  l.params_norm = 123.4567;
  EXPECT_NE(format_iteration_log(l).find(" loss scale: 268435456.0 | params norm: 123.457 | number of skipped"),
            std::string::npos);
  l.grad_norm = 1.5;
  EXPECT_NE(format_iteration_log(l).find(" grad norm: 1.500 | params norm: 123.457 | number of skipped"),
            std::string::npos);
  // --log-num-zeros-in-grad: Megatron's field and format, between the two norms.
  l.num_zeros = 1234;
  EXPECT_NE(format_iteration_log(l).find(" grad norm: 1.500 | num zeros: 1234.0 | params norm: 123.457 |"),
            std::string::npos);
}

}  // namespace
}  // namespace trident
