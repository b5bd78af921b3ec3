// The iteration log line in Megatron-LM's form (people's parsers keep working), with
// accuracy, tokens/s and TFLOP/s added, all on one physical line.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct IterationLog {
  int64_t iteration = 0, train_iters = 0;
  uint64_t consumed_samples = 0;
  double ms_per_iteration = 0;
  double learning_rate = 0;
  int64_t global_batch_size = 0;
  double lm_loss = 0, lm_acc = 0;
  double loss_scale = 0;  // printed only when > 0 (fp16)
  double grad_norm = 0;
  int64_t skipped_iterations = 0, nan_iterations = 0;
  double tokens_per_second = 0;
  double tflops_per_rank = 0;
  double mfu = 0;  // model FLOPs utilisation in [0, 1]; printed only when > 0 (peak known)
};

std::string format_iteration_log(const IterationLog& l);

}  // namespace trident
