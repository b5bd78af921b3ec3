#include "train/log_line.h"

#include <cstdio>

namespace trident {

std::string format_iteration_log(const IterationLog& l) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf,
                        " iteration %8lld/%8lld | consumed samples: %12llu | elapsed time per iteration (ms): %.1f |"
                        " learning rate: %.3E | global batch size: %5lld | lm loss: %.6E | lm acc: %.4f |",
                        static_cast<long long>(l.iteration), static_cast<long long>(l.train_iters),
                        static_cast<unsigned long long>(l.consumed_samples), l.ms_per_iteration, l.learning_rate,
                        static_cast<long long>(l.global_batch_size), l.lm_loss, l.lm_acc);
  if (l.loss_scale > 0) n += std::snprintf(buf + n, sizeof buf - n, " loss scale: %.1f |", l.loss_scale);
  n += std::snprintf(buf + n, sizeof buf - n,
                     " grad norm: %.3f | number of skipped iterations: %3lld | number of nan iterations: %3lld |"
                     " tokens per second: %.1f | TFLOP/s per rank: %.3f |",
                     l.grad_norm, static_cast<long long>(l.skipped_iterations),
                     static_cast<long long>(l.nan_iterations), l.tokens_per_second, l.tflops_per_rank);
  if (l.mfu > 0) std::snprintf(buf + n, sizeof buf - n, " MFU: %.1f%% |", 100.0 * l.mfu);
  return buf;
}

}  // namespace trident
