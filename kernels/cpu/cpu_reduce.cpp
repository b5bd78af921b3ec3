// Reductions to the host. Sums run over fixed blocks of kBlock elements (each summed in
// double, in order) and the block partials are added in block order, so the result is
// the same bits for any OpenMP thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

constexpr int64_t kBlock = 4096;

template <bool kSquare>
double blocked_sum(const char* op, const Tensor& t) {
  check_float(op, t);
  const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
  thread_local std::vector<double> partial;  // grow-only, owned by the calling thread
  if (static_cast<int64_t>(partial.size()) < blocks) partial.resize(static_cast<size_t>(blocks));
  double* part = partial.data();
#pragma omp parallel for schedule(static)
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t off = bi * kBlock, w = std::min(kBlock, n - off);
    float buf[kBlock];
    load_f32(t, off, w, buf);
    double s = 0;
    for (int64_t i = 0; i < w; ++i) s += kSquare ? static_cast<double>(buf[i]) * buf[i] : buf[i];
    part[bi] = s;
  }
  double s = 0;
  for (int64_t bi = 0; bi < blocks; ++bi) s += part[bi];
  return s;
}

}  // namespace

double sum_squares(const Tensor& t) { return blocked_sum<true>("sum_squares", t); }
double sum(const Tensor& t) { return blocked_sum<false>("sum", t); }

bool has_inf_or_nan(const Tensor& t) {
  check_float("has_inf_or_nan", t);
  const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
  bool found = false;
#pragma omp parallel for schedule(static) reduction(|| : found)
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t off = bi * kBlock, w = std::min(kBlock, n - off);
    float buf[kBlock];
    load_f32(t, off, w, buf);
    for (int64_t i = 0; i < w; ++i) found = found || !std::isfinite(buf[i]);
  }
  return found;
}

int64_t count_zeros_multi(const std::vector<Tensor>& list) {
  int64_t zeros = 0;
  for (const Tensor& t : list) {
    check_float("count_zeros", t);
    const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) reduction(+ : zeros)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t off = bi * kBlock, w = std::min(kBlock, n - off);
      float buf[kBlock];
      load_f32(t, off, w, buf);
      for (int64_t i = 0; i < w; ++i) zeros += buf[i] == 0.0f;
    }
  }
  return zeros;
}

// The larger of two magnitudes; a NaN on either side wins.
static double nan_max(double m, double a) { return std::isnan(m) || a <= m ? m : a; }

// Per block of kBlock elements (in parallel), then the blocks in order: the same bits for
// any thread count.
MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list) {
  MagnitudeStats total;
  std::vector<MagnitudeStats> part;
  for (const Tensor& t : list) {
    check_float("magnitude_stats", t);
    const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
    part.assign(static_cast<size_t>(blocks), MagnitudeStats{});
#pragma omp parallel for schedule(static)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t off = bi * kBlock, w = std::min(kBlock, n - off);
      float buf[kBlock];
      load_f32(t, off, w, buf);
      MagnitudeStats s;
      for (int64_t i = 0; i < w; ++i) {
        const double a = std::fabs(static_cast<double>(buf[i]));
        s.sum_squares += a * a;
        s.sum_abs += a;
        s.sum_sqrt_abs += std::sqrt(a);
        s.max_abs = nan_max(s.max_abs, a);
      }
      part[bi] = s;
    }
    for (const MagnitudeStats& s : part) {
      total.sum_squares += s.sum_squares;
      total.sum_abs += s.sum_abs;
      total.sum_sqrt_abs += s.sum_sqrt_abs;
      total.max_abs = nan_max(total.max_abs, s.max_abs);
    }
  }
  return total;
}

}  // namespace trident::cpu
