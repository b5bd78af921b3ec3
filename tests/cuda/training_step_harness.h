// One whole training step (forward, backward, AdamW) of a GPT-2 on a backend, captured on
// the host, and the comparison of two such captures with stated tolerances.
//
// Used by test_cuda_training_step.cpp (the CPU backend as reference, the CUDA backend under
// test). Nothing here needs a GPU or CUDA headers: both sides are just `Backend&`, so the
// same code also compares two CPU runs (that is how its logic and tolerances were
// checked on machines without a GPU, see the test's header).
//
// The step mirrors Trainer::train_iteration for one process and one micro-batch:
// zero_grads, forward (loss and logits gradient scaled by loss_scale / (B*T)), backward with
// the layer-gradients-ready hook wired to the optimizer as the trainer does, reduce_gradients,
// the global gradient norm from owned_grad_sum_squares, and AdamWOptimizer::step with
// clipping and the loss-scale unscaling folded into its gradient factor. Then one more
// forward on the updated parameters ("loss after the step").
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "model/gpt2.h"
#include "train/optimizer.h"

namespace trident::step_test {

// Everything that defines the step; both sides of a comparison get the same setup (the
// CPU calibration also compares setups that differ in dtype only).
struct StepSetup {
  ModelConfig cfg;
  int micro_batch = 4;
  bool fp32_grads = false;  // --accumulate-allreduce-grads-in-fp32
  float loss_scale = 1.0f;  // static loss scale (fp16): backward runs on loss_scale x loss
  uint64_t seed = 1234;     // parameter init and dropout masks (the run's --seed)
  uint64_t sample_base = 8; // global sample number of row 0 (keys the dropout masks)
  double lr = 1e-3;
  AdamWConfig adam;  // betas 0.9/0.999, eps 1e-8, clip 1.0; weight decay set below
  std::vector<int32_t> tokens, targets;  // [B, T]; a negative target is ignored
};

// gpt2-tiny's shape (configs/gpt2-tiny.yaml: 2 layers, hidden 64, 4 heads of 16, sequence
// 64, micro-batch 4, lr 1e-3, clip 1.0, init std 0.02) with a vocabulary of 500 padded to
// 512, so padded logits and wte padding rows exist. Weight decay 0.1 (Megatron's usual)
// rather than gpt2-tiny's 0.01: at 0.01 one step moves a weight by lr * wd * |p| ~ 2e-7,
// below what the update comparison resolves, so a lost weight decay would go unseen.
// Random tokens and targets from a fixed seed; every 13th target is ignored (-1).
inline StepSetup tiny_step_setup(DType dtype, float dropout, bool fp32_grads = false, float loss_scale = 1.0f) {
  StepSetup s;
  ModelConfig& c = s.cfg;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 64;
  c.max_position_embeddings = 64;
  c.vocab_size = 500;
  c.make_vocab_size_divisible_by = 128;
  c.init_method_std = 0.02f;
  c.hidden_dropout = dropout;
  c.attention_dropout = dropout;
  c.dtype = dtype;
  s.adam.weight_decay = 0.1f;
  s.fp32_grads = fp32_grads;
  s.loss_scale = loss_scale;
  const size_t n = static_cast<size_t>(s.micro_batch) * c.seq_length;
  std::mt19937 rng(20240607);
  s.tokens.resize(n);
  s.targets.resize(n);
  for (auto& t : s.tokens) t = static_cast<int32_t>(rng() % c.vocab_size);
  for (size_t i = 0; i < n; ++i) s.targets[i] = i % 13 == 5 ? -1 : static_cast<int32_t>(rng() % c.vocab_size);
  return s;
}

// Any tensor of a backend, as host floats (fp16/bf16 widened exactly).
inline std::vector<float> host_floats(Backend& be, const Tensor& t) {
  std::vector<unsigned char> bytes(t.nbytes());
  if (!bytes.empty()) be.copy_to_host(bytes.data(), t);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_float(bytes.data(), t.dtype, i);
  return out;
}

// One parameter tensor's state around the step.
struct TensorSnapshot {
  std::string name;
  std::vector<float> grad;           // reduced gradient (x loss_scale), in the gradient dtype
  std::vector<float> master_before;  // fp32 master weights (the fp32 parameters themselves)
  std::vector<float> master_after;
  std::vector<float> param_after;  // the model's parameter in its dtype
  std::vector<float> m, v;         // Adam moments after the step
};

struct StepSnapshot {
  double loss = 0, tokens = 0;  // mean loss over counted targets, and their count
  double grad_norm = 0;         // global norm of the unscaled gradients
  double grad_factor = 0;       // what the optimizer multiplied the gradients by (unscale x clip)
  double loss_after = 0;        // forward on the updated parameters
  std::vector<TensorSnapshot> tensors;
};

// One model on one backend: built and initialised from the seed at construction, so the
// caller can compare (and equalise) the initial parameters before run().
class StepSide {
 public:
  StepSide(Backend& be, const StepSetup& s) : be_(be), s_(s) {
    StageLayout layout;
    layout.fp32_grads = s.fp32_grads;
    model_ = std::make_unique<Gpt2Model>(s.cfg, be, layout, s.micro_batch);
    model_->set_dropout_seed(s.seed);
    model_->params().init(s.seed);
  }

  ParamStore& params() { return model_->params(); }

  std::vector<unsigned char> param_bytes() {
    const Tensor& flat = params().flat_params();
    std::vector<unsigned char> b(flat.nbytes());
    be_.copy_to_host(b.data(), flat);
    return b;
  }
  void set_param_bytes(const std::vector<unsigned char>& b) {
    const Tensor& flat = params().flat_params();
    ASSERT_EQ(b.size(), flat.nbytes());
    be_.copy_from_host(flat, b.data());
  }

  StepSnapshot run() {
    ParamStore& ps = params();
    AdamWOptimizer opt(be_, ps, s_.adam);  // after any set_param_bytes: masters come from the params
    model_->set_layer_gradients_ready([&opt](int layer) { opt.on_layer_gradients_ready(layer); });
    const int B = s_.micro_batch, T = s_.cfg.seq_length;
    const MicroBatch mb{s_.tokens.data(), s_.targets.data(), s_.sample_base};
    const float grad_scale = static_cast<float>(s_.loss_scale / (static_cast<double>(B) * T));
    StepSnapshot snap;
    auto pieces = [&](const LocalParam& p) {
      auto pcs = opt.plan().owned_pieces(FlatRange{p.offset, p.offset + p.numel()});
      EXPECT_EQ(pcs.size(), 1u) << p.spec.name;  // one process: the whole tensor, one piece
      return pcs.at(0);
    };
    for (const LocalParam& p : ps.list()) {
      TensorSnapshot t;
      t.name = p.spec.name;
      t.master_before = host_floats(be_, opt.state_slice(AdamWOptimizer::kMaster, pieces(p)));
      snap.tensors.push_back(std::move(t));
    }

    opt.zero_grads();
    model_->forward(0, mb, /*training=*/true, grad_scale);
    opt.begin_backward(true);
    model_->backward(0);
    opt.reduce_gradients();
    const LossStats st = model_->loss_stats();
    snap.tokens = st.tokens;
    snap.loss = st.loss_sum / st.tokens;
    snap.grad_norm = std::sqrt(opt.owned_grad_sum_squares([](const ParamSpec&) { return true; })) / s_.loss_scale;
    for (size_t i = 0; i < ps.list().size(); ++i) snap.tensors[i].grad = host_floats(be_, ps.grad(ps.list()[i]));

    const float unscale = 1.0f / s_.loss_scale;
    opt.step(s_.lr, snap.grad_norm, unscale);
    be_.synchronize();
    // The optimizer's gradient factor (Megatron's clip coefficient), as AdamWOptimizer::step.
    float factor = unscale;
    if (s_.adam.clip_grad > 0) {
      const double coeff = s_.adam.clip_grad / (snap.grad_norm + 1e-6);
      if (coeff < 1.0) factor = static_cast<float>(unscale * coeff);
    }
    snap.grad_factor = factor;
    for (size_t i = 0; i < ps.list().size(); ++i) {
      const LocalParam& p = ps.list()[i];
      TensorSnapshot& t = snap.tensors[i];
      t.master_after = host_floats(be_, opt.state_slice(AdamWOptimizer::kMaster, pieces(p)));
      t.param_after = host_floats(be_, ps.param(p));
      t.m = host_floats(be_, opt.state_slice(AdamWOptimizer::kExpAvg, pieces(p)));
      t.v = host_floats(be_, opt.state_slice(AdamWOptimizer::kExpAvgSq, pieces(p)));
    }
    model_->forward(0, mb, true, grad_scale);
    const LossStats after = model_->loss_stats();
    snap.loss_after = after.loss_sum / after.tokens;
    model_->set_layer_gradients_ready(nullptr);
    return snap;
  }

 private:
  Backend& be_;
  StepSetup s_;
  std::unique_ptr<Gpt2Model> model_;
};

// Tolerances of one comparison.
struct Tolerances {
  double loss;    // |loss_test - loss_ref| / loss_ref, before and after the step
  double grad;    // per tensor: max_i |g_test - g_ref| / max_i |g_ref|
  double norm;    // |norm_test - norm_ref| / norm_ref of the global gradient norm
  double update;  // per element, in units of lr: what the updates may differ by beyond what
                  // the two gradients themselves explain (see expect_steps_match)
};

// Units in the last place of |x| in a storage format (normal numbers; floor at the
// smallest normal's ulp).
inline double ulp_of(DType t, double x) {
  const int mant = t == DType::BF16 ? 7 : t == DType::F16 ? 10 : 23;
  const int min_exp = t == DType::F16 ? -14 : -126;
  int e = 0;
  std::frexp(std::max(std::fabs(x), 1e-38), &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mant);
}

// max_i |a_i - b_i| / max_i |b_i| (0 when both are all zero).
inline double rel_max_err(const std::vector<float>& test, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(test[i]) - ref[i]));
    r = std::max(r, std::fabs(static_cast<double>(ref[i])));
  }
  if (std::isnan(d)) return INFINITY;
  return r > 0 ? d / r : (d > 0 ? INFINITY : 0.0);
}

// Compares `test` against `ref`. `report` receives one table line per tensor (printed by
// the caller, so the margins are visible when the test passes too). Failures are gtest
// failures naming the tensor and the worst element.
//
// The AdamW check is per element. At step 1 AdamW's update is, exactly,
//   p1 = p0 - lr * (u(x) + wd * p0),   u(x) = x / (|x| + eps),   x = grad_factor * g
// (bias correction makes m_hat = x and v_hat = x^2), so the update is +-lr for any gradient
// much larger than eps, whatever its size, and flips sign with the gradient. Two correct
// backends whose gradients differ in the last bits can therefore differ by up to 2 lr on
// elements whose gradient is ~0 (a sign flip). The allowed difference per element is what
// the two captured gradients explain, plus tol.update x lr and a few fp32 ulps:
//   |p1_t - p1_r| <= |p0_t - p0_r| (1 + lr wd) + lr (|u(x_t) - u(x_r)| + tol.update) + 4 ulp32(p1_r)
// A kernel that gets lr, the bias correction, weight decay, the clip factor (through m and
// v) or the master/parameter copy wrong breaks this by O(lr) on most elements. The model's
// 16-bit parameters may differ by one more rounding step of their format.
inline void expect_steps_match(const StepSnapshot& ref, const StepSnapshot& test, const StepSetup& setup,
                               DType param_dtype, const Tolerances& tol, std::ostream& report) {
  const double lr = setup.lr, eps = setup.adam.eps, wd = setup.adam.weight_decay;
  char line[320];
  EXPECT_EQ(test.tokens, ref.tokens) << "counted targets";
  const double loss_err = std::fabs(test.loss - ref.loss) / ref.loss;
  const double after_err = std::fabs(test.loss_after - ref.loss_after) / ref.loss_after;
  const double norm_err = std::fabs(test.grad_norm - ref.grad_norm) / ref.grad_norm;
  std::snprintf(line, sizeof line,
                "loss ref %.7f test %.7f rel %.2e | after step ref %.7f test %.7f rel %.2e (tol %.1e) | "
                "grad norm ref %.6e test %.6e rel %.2e (tol %.1e)\n",
                ref.loss, test.loss, loss_err, ref.loss_after, test.loss_after, after_err, tol.loss, ref.grad_norm,
                test.grad_norm, norm_err, tol.norm);
  report << line;
  EXPECT_LE(loss_err, tol.loss) << "loss: ref " << ref.loss << ", test " << test.loss;
  EXPECT_LE(after_err, tol.loss) << "loss after the step: ref " << ref.loss_after << ", test " << test.loss_after;
  EXPECT_LE(norm_err, tol.norm) << "gradient norm: ref " << ref.grad_norm << ", test " << test.grad_norm;
  EXPECT_GT(ref.loss_after, 0.0);
  EXPECT_LT(ref.loss_after, ref.loss) << "one step with lr " << lr << " should lower the loss on its own batch";

  std::snprintf(line, sizeof line, "%-22s %9s %9s %9s %9s %11s %6s %9s\n", "tensor", "max|g|", "grad err", "m err",
                "v err", "upd/allow", "flips", "p16/allow");
  report << line;
  ASSERT_EQ(ref.tensors.size(), test.tensors.size());
  double worst_grad = 0;
  for (size_t k = 0; k < ref.tensors.size(); ++k) {
    const TensorSnapshot &r = ref.tensors[k], &t = test.tensors[k];
    ASSERT_EQ(r.name, t.name);
    ASSERT_EQ(r.grad.size(), t.grad.size()) << r.name;
    double gmax = 0;
    for (float g : r.grad) gmax = std::max(gmax, std::fabs(static_cast<double>(g)));
    EXPECT_GT(gmax, 0.0) << r.name << ": all-zero reference gradient (the comparison would be empty)";
    const double gerr = rel_max_err(t.grad, r.grad);
    // m = (1 - beta1) x and v = (1 - beta2) x^2 with x = grad_factor * g carry the clip
    // factor that u(x) hides: x's error is the gradient's plus the norm's (through the clip
    // factor), and x^2 doubles it.
    const double merr = rel_max_err(t.m, r.m), verr = rel_max_err(t.v, r.v);
    const double xtol = tol.grad + tol.norm;
    worst_grad = std::max(worst_grad, gerr);
    EXPECT_LE(gerr, tol.grad) << r.name << ": gradient, max|diff| / max|ref|";
    EXPECT_LE(merr, xtol) << r.name << ": Adam exp_avg after the step, max|diff| / max|ref|";
    EXPECT_LE(verr, 2 * xtol + xtol * xtol) << r.name << ": Adam exp_avg_sq after the step, max|diff| / max|ref|";

    // Parameters after the step, element by element (see above).
    double worst_ratio = 0, worst16 = 0;
    int64_t bad = 0, bad16 = 0, flips = 0;
    for (size_t i = 0; i < r.grad.size(); ++i) {
      const double xr = ref.grad_factor * r.grad[i], xt = test.grad_factor * t.grad[i];
      const double du = std::fabs(xt / (std::fabs(xt) + eps) - xr / (std::fabs(xr) + eps));
      flips += (xr > 0 && xt < 0) || (xr < 0 && xt > 0);
      const double allowed = std::fabs(static_cast<double>(t.master_before[i]) - r.master_before[i]) * (1 + lr * wd) +
                             lr * (du + tol.update) + 4 * ulp_of(DType::F32, r.master_after[i]);
      const double diff = std::fabs(static_cast<double>(t.master_after[i]) - r.master_after[i]);
      const double ratio = diff / allowed;
      if (!(ratio <= 1.0)) {
        if (bad < 3)
          ADD_FAILURE() << r.name << "[" << i << "] after AdamW: test " << t.master_after[i] << ", ref "
                        << r.master_after[i] << " (before: test " << t.master_before[i] << ", ref " << r.master_before[i]
                        << "; grad test " << t.grad[i] << ", ref " << r.grad[i] << "): |diff| " << diff
                        << " > allowed " << allowed;
        ++bad;
      }
      worst_ratio = std::max(worst_ratio, std::isnan(ratio) ? INFINITY : ratio);
      if (param_dtype != DType::F32) {
        const double a16 = allowed + ulp_of(param_dtype, std::max(std::fabs(r.param_after[i]), std::fabs(t.param_after[i])));
        const double d16 = std::fabs(static_cast<double>(t.param_after[i]) - r.param_after[i]);
        const double ratio16 = d16 / a16;
        if (!(ratio16 <= 1.0)) {
          if (bad16 < 3)
            ADD_FAILURE() << r.name << "[" << i << "] model parameter (" << dtype_name(param_dtype)
                          << ") after AdamW: test " << t.param_after[i] << ", ref " << r.param_after[i] << ": |diff| "
                          << d16 << " > allowed " << a16;
          ++bad16;
        }
        worst16 = std::max(worst16, std::isnan(ratio16) ? INFINITY : ratio16);
      }
    }
    if (r.name == "wte") {  // padding rows: no gradient, no update, on either backend
      const size_t real = static_cast<size_t>(setup.cfg.vocab_size) * setup.cfg.hidden_size;
      int64_t nonzero = 0;
      for (size_t i = real; i < t.grad.size(); ++i) nonzero += t.grad[i] != 0.0f || t.param_after[i] != 0.0f;
      EXPECT_EQ(nonzero, 0) << "wte padding rows: nonzero gradient or parameter after the step";
      EXPECT_LT(real, t.grad.size()) << "the setup should have wte padding rows";
    }
    EXPECT_EQ(bad, 0) << r.name << ": " << bad << " of " << r.grad.size() << " updated master weights out of tolerance";
    EXPECT_EQ(bad16, 0) << r.name << ": " << bad16 << " of " << r.grad.size() << " updated model parameters out of tolerance";
    if (param_dtype == DType::F32) {
      std::snprintf(line, sizeof line, "%-22s %9.2e %9.2e %9.2e %9.2e %11.3f %6lld %9s\n", r.name.c_str(), gmax, gerr,
                    merr, verr, worst_ratio, static_cast<long long>(flips), "-");
    } else {
      std::snprintf(line, sizeof line, "%-22s %9.2e %9.2e %9.2e %9.2e %11.3f %6lld %9.3f\n", r.name.c_str(), gmax, gerr,
                    merr, verr, worst_ratio, static_cast<long long>(flips), worst16);
    }
    report << line;
  }
  std::snprintf(line, sizeof line, "worst gradient error %.2e (tolerance %.1e)\n", worst_grad, tol.grad);
  report << line;
}

}  // namespace trident::step_test
