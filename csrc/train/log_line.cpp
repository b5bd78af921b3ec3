#include "train/log_line.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace trident {

std::string format_iteration_log(const IterationLog& l) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, " iteration %8lld/%8lld | consumed samples: %12llu |",
                        static_cast<long long>(l.iteration), static_cast<long long>(l.train_iters),
                        static_cast<unsigned long long>(l.consumed_samples));
  if (l.skipped_samples > 0)  // Megatron's, after the consumed samples
    n += std::snprintf(buf + n, sizeof buf - n, " skipped samples: %12llu |",
                       static_cast<unsigned long long>(l.skipped_samples));
  if (l.consumed_tokens)  // Megatron-DeepSpeed's field
    n += std::snprintf(buf + n, sizeof buf - n, " consumed tokens: %12llu |",
                       static_cast<unsigned long long>(*l.consumed_tokens));
  n += std::snprintf(buf + n, sizeof buf - n, " elapsed time per iteration (ms): %.1f |", l.ms_per_iteration);
  if (l.megatron_tflops_per_gpu)
    n += std::snprintf(buf + n, sizeof buf - n, " throughput per GPU (TFLOP/s/GPU): %.1f |", *l.megatron_tflops_per_gpu);
  if (l.energy_per_gpu && l.power_per_gpu)
    n += std::snprintf(buf + n, sizeof buf - n, " energy per GPU (J/iter/GPU): %.1f | power per GPU (W/GPU): %.1f |",
                       *l.energy_per_gpu, *l.power_per_gpu);
  n += std::snprintf(buf + n, sizeof buf - n, " learning rate: %.3E |", l.learning_rate);
  if (l.decoupled_learning_rate)  // Megatron-core's, after the learning rate
    n += std::snprintf(buf + n, sizeof buf - n, " decoupled learning rate: %.3E |", *l.decoupled_learning_rate);
  n += std::snprintf(buf + n, sizeof buf - n, " global batch size: %5lld |", static_cast<long long>(l.global_batch_size));
  // Megatron's fields, in its order and formats (parsers of its log read them), then ours.
  if (l.lm_loss > 0) n += std::snprintf(buf + n, sizeof buf - n, " lm loss: %.6E |", l.lm_loss);
  n += std::snprintf(buf + n, sizeof buf - n, " loss scale: %.1f |", l.loss_scale);
  if (std::isfinite(l.grad_norm)) n += std::snprintf(buf + n, sizeof buf - n, " grad norm: %.3f |", l.grad_norm);
  if (std::isfinite(l.num_zeros)) n += std::snprintf(buf + n, sizeof buf - n, " num zeros: %.1f |", l.num_zeros);
  if (std::isfinite(l.params_norm)) n += std::snprintf(buf + n, sizeof buf - n, " params norm: %.3f |", l.params_norm);
  n += std::snprintf(buf + n, sizeof buf - n, " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
                     static_cast<long long>(l.skipped_iterations), static_cast<long long>(l.nan_iterations));
  if (l.lm_loss > 0) n += std::snprintf(buf + n, sizeof buf - n, " lm acc: %.4f |", l.lm_acc);
  n += std::snprintf(buf + n, sizeof buf - n, " tokens per second: %.1f | TFLOP/s per rank: %.3f |",
                     l.tokens_per_second, l.tflops_per_rank);
  if (l.mfu > 0) std::snprintf(buf + n, sizeof buf - n, " MFU: %.1f%% |", 100.0 * l.mfu);
  return buf;
}

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  // The shortest round-trip digits, in scientific form: [-]d[.ddd]e[+-]XX.
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  std::string out(negative ? "-" : "");
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out.append(exp);
  }
  if (exponent < 0) return out.append("0.").append(static_cast<size_t>(-exponent - 1), '0').append(digits);
  const size_t point = static_cast<size_t>(exponent) + 1;  // digits before the point
  if (digits.size() <= point) return out.append(digits).append(point - digits.size(), '0').append(".0");
  return out.append(digits, 0, point).append(".").append(digits, point, std::string::npos);
}

}  // namespace trident
