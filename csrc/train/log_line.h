// The iteration log line in Megatron-LM's form (people's parsers keep working), with
// accuracy, tokens/s and TFLOP/s added, all on one physical line. Fields and their order
// follow Megatron's training_log: learning rate, global batch size, lm loss, loss scale,
// grad norm, skipped and nan iterations; ours come after, except lm acc, which follows
// lm loss as one more loss field would.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace trident {

struct IterationLog {
  int64_t iteration = 0, train_iters = 0;
  uint64_t consumed_samples = 0;
  // Megatron-DeepSpeed's "consumed tokens" field, after consumed samples; runs that count
  // tokens (--train-tokens, --lr-warmup-tokens, --lr-decay-tokens) print it.
  std::optional<uint64_t> consumed_tokens;
  uint64_t skipped_samples = 0;  // Megatron's skipped samples (--iterations-to-skip): shown when > 0
  double ms_per_iteration = 0;
  // --log-throughput: Megatron's TFLOP/s per GPU by its current formula (after the time)
  std::optional<double> megatron_tflops_per_gpu;
  // --log-energy: joules an iteration and watts, per GPU (Megatron's fields, after the time)
  std::optional<double> energy_per_gpu, power_per_gpu;
  double learning_rate = 0;  // the scheduler's rate after this iteration's step
  std::optional<double> decoupled_learning_rate;  // --decoupled-lr: the word embedding's
  int64_t global_batch_size = 0;
  // Averages over the interval's iterations that updated the model. Megatron prints a loss
  // only when its average is > 0, so an interval of skipped iterations only (average 0)
  // has no lm loss field; lm acc is printed with lm loss.
  double lm_loss = 0, lm_acc = 0;
  double loss_scale = 1.0;  // always printed; 1.0 without a loss scaler (fp32, bf16)
  // The last iteration's; printed only when finite: a skipped iteration has none (Megatron's
  // optimizer returns no norm when it skips the step).
  double grad_norm = 0;
  double num_zeros = NAN;    // --log-num-zeros-in-grad: printed after the grad norm when finite
  double params_norm = NAN;  // --log-params-norm: printed after the grad norm (and num zeros) when finite
  // In this log interval (Megatron resets both after every line); the run's totals are in
  // the checkpoint.
  int64_t skipped_iterations = 0, nan_iterations = 0;
  double tokens_per_second = 0;
  double tflops_per_rank = 0;
  double mfu = 0;  // model FLOPs utilisation in [0, 1]; printed only when > 0 (peak known)
};

std::string format_iteration_log(const IterationLog& l);

// A double as Python's repr writes it (the shortest digits that read back to it; fixed
// notation for exponents -4 to 15, "1.5e-05" / "1e+16" otherwise): for lines Megatron prints
// with an f-string's {x}.
std::string python_float_repr(double x);

}  // namespace trident
