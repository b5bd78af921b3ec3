// Softmax cross-entropy over a (vocab-parallel) logit shard, in the three phases that
// tensor parallelism all-reduces between (MAX, SUM, SUM); see backend.h. Columns at or
// beyond vocab_valid are padding: they never enter the max or the sum and get gradient 0.
// Rows whose target is negative are ignored: loss 0, correct 0, gradient 0.
// Also a decoding step's draws from rows of logits: the greedy one (logits_argmax) and the
// sampled one (sample_logits: core/token_draw.h's draw_token on each row).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

// glibc's vector math library (libmvec, linked through libm) has SIMD variants of expf:
// declaring expf a `simd` function lets GCC vectorise the `omp simd` loops below over them
// (4 lanes a call with SSE2). Measured on the CI machines' EPYC: 2.2x the scalar expf, at
// most 2.9 ulp from the exact value (glibc's scalar expf: 0.5); the cross-entropy of a
// GPT-2-vocabulary run is a third of its CPU time. Elsewhere (no libmvec) the scalar expf.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
extern "C" float expf(float) noexcept __attribute__((simd("notinbranch")));
#endif

namespace trident::cpu {
namespace {

// Row n of [N, V] logits as fp32: the tensor's own memory when it is fp32 (no copy), else
// converted into `scratch`.
const float* logits_row(const Tensor& logits, int64_t n, int64_t count, float* scratch) {
  if (logits.dtype == DType::F32) return logits.ptr<const float>() + n * logits.cols();
  load_f32(logits, n * logits.cols(), count, scratch);
  return scratch;
}

void check_logits(const char* op, const Tensor& logits, int64_t vocab_valid) {
  check_float(op, logits);
  CPU_CHECK(op, vocab_valid >= 0 && vocab_valid <= logits.cols(), "vocab_valid ", vocab_valid,
            " for logits ", logits.shape.str());
}

void check_rows(const char* op, const Tensor& t, int64_t N) {
  check_f32(op, t);
  CPU_CHECK(op, t.numel() == N, "per-row tensor ", t.shape.str(), " expected [", N, "]");
}

void check_targets(const char* op, const Tensor& t, int64_t N) {
  check_cpu(op, t);
  CPU_CHECK(op, t.dtype == DType::I32 && t.numel() == N, "targets must be int32 [", N, "], got ",
            t.shape.str());
}

// Column of the target in this shard, or -1 when the shard does not own it (or ignored).
inline int64_t local_target(int32_t target, int64_t vocab_start, int64_t vocab_valid) {
  if (target < 0) return -1;
  const int64_t c = static_cast<int64_t>(target) - vocab_start;
  return (c >= 0 && c < vocab_valid) ? c : -1;
}

}  // namespace

void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                const Tensor& row_max, const Tensor& target_logit) {
  const char* op = "xent_stats";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows();
  check_targets(op, targets, N);
  check_rows(op, row_max, N);
  check_rows(op, target_logit, N);
  const int32_t* tg = targets.ptr<const int32_t>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits_row(logits, n, vocab_valid, thread_scratch(0, vocab_valid));
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < vocab_valid; ++c) mx = std::max(mx, row[c]);
    row_max.ptr<float>()[n] = mx;
    const int64_t t = local_target(tg[n], vocab_start, vocab_valid);
    target_logit.ptr<float>()[n] = t >= 0 ? row[t] : 0.0f;
  }
}

void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp) {
  const char* op = "xent_sumexp";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows();
  check_rows(op, row_max, N);
  check_rows(op, sumexp, N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits_row(logits, n, vocab_valid, thread_scratch(0, vocab_valid));
    const float mx = row_max.ptr<const float>()[n];
    // fp32 exponentials (see expf above) summed in double: the sum is stored as a float, so
    // a double exp per logit bought nothing but a third of a small CPU run's time.
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < vocab_valid; ++c) s += expf(row[c] - mx);
    sumexp.ptr<float>()[n] = static_cast<float>(s);
  }
}

void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                    const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit,
                    const Tensor& losses, const Tensor& correct, float grad_scale) {
  const char* op = "xent_loss_grad";
  check_logits(op, logits, vocab_valid);
  const int64_t N = logits.rows(), V = logits.cols();
  check_targets(op, targets, N);
  for (const Tensor* t : {&row_max, &sumexp, &target_logit, &losses, &correct}) check_rows(op, *t, N);
  const int32_t* tg = targets.ptr<const int32_t>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    // fp32 logits become their gradient in place; others through an fp32 row.
    const bool in_place = logits.dtype == DType::F32;
    float* row = in_place ? logits.ptr<float>() + n * V : thread_scratch(0, V);
    const float mx = row_max.ptr<const float>()[n];
    const float se = sumexp.ptr<const float>()[n];
    const float tl = target_logit.ptr<const float>()[n];
    if (tg[n] < 0) {
      losses.ptr<float>()[n] = 0.0f;
      correct.ptr<float>()[n] = 0.0f;
      std::fill(row, row + V, 0.0f);
    } else {
      losses.ptr<float>()[n] = static_cast<float>(std::log(static_cast<double>(se)) + mx - tl);
      correct.ptr<float>()[n] = tl >= mx ? 1.0f : 0.0f;
      if (!in_place) load_f32(logits, n * V, V, row);
      const float inv = 1.0f / se;
#pragma omp simd
      for (int64_t c = 0; c < vocab_valid; ++c) row[c] = grad_scale * (expf(row[c] - mx) * inv);
      std::fill(row + vocab_valid, row + V, 0.0f);
      const int64_t t = local_target(tg[n], vocab_start, vocab_valid);
      if (t >= 0) row[t] -= grad_scale;
    }
    if (!in_place) store_f32(logits, n * V, V, row);
  }
}

void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids) {
  const char* op = "logits_argmax";
  check_logits(op, logits, vocab_valid);
  CPU_CHECK(op, vocab_valid >= 1, "vocab_valid ", vocab_valid, ": no column to draw");
  const int64_t N = logits.rows();
  check_rows(op, values, N);
  check_cpu(op, ids);
  CPU_CHECK(op, ids.dtype == DType::I32 && ids.numel() == N, "ids must be int32 [", N, "], got ", ids.shape.str());
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits_row(logits, n, vocab_valid, thread_scratch(0, vocab_valid));
    int64_t best = -1;  // the first column of the largest so far; NaN is never larger
    for (int64_t c = 0; c < vocab_valid; ++c)
      if (best < 0 ? !std::isnan(row[c]) : row[c] > row[best]) best = c;
    if (best < 0) best = 0;  // every logit NaN
    ids.ptr<int32_t>()[n] = static_cast<int32_t>(best);
    values.ptr<float>()[n] = row[best];
  }
}

void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                   const std::vector<RowDraw>& draws, const Tensor& ids) {
  const char* op = "sample_logits";
  check_float(op, logits);
  const int64_t N = static_cast<int64_t>(draws.size()), Vl = logits.cols();
  CPU_CHECK(op, N >= 1 && logits.rows() % N == 0, "logits ", logits.shape.str(), " are not segments of ", N, " rows");
  const int64_t segments = logits.rows() / N;
  CPU_CHECK(op, vocab_valid >= 1 && vocab_valid <= segments * Vl, "vocab_valid ", vocab_valid, " for logits ",
            logits.shape.str(), " in ", segments, " segment(s)");
  CPU_CHECK(op, temperature > 0 && std::isfinite(temperature), "temperature ", temperature,
            " (greedy draws take logits_argmax)");
  CPU_CHECK(op, top_k >= 0, "top_k ", top_k);
  check_cpu(op, ids);
  CPU_CHECK(op, ids.dtype == DType::I32 && ids.numel() == N, "ids must be int32 [", N, "], got ", ids.shape.str());
  float* row = thread_scratch(0, vocab_valid);
  for (int64_t n = 0; n < N; ++n) {
    const RowDraw& d = draws[static_cast<size_t>(n)];
    CPU_CHECK(op, d.uniform >= 0 && d.uniform < 1 && d.top_p >= 0 && d.top_p <= 1, "row ", n, ": uniform ", d.uniform,
              ", top_p ", d.top_p);
    for (int64_t k = 0; k * Vl < vocab_valid; ++k)  // the row's segments, side by side
      load_f32(logits, (k * N + n) * Vl, std::min(Vl, vocab_valid - k * Vl), row + k * Vl);
    ids.ptr<int32_t>()[n] = draw_token(row, vocab_valid, DrawRule{temperature, top_k, d.top_p}, d.uniform);
  }
}

}  // namespace trident::cpu
