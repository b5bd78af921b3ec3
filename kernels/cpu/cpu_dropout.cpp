// Dropout on [B*T, row] activations. Element (n, c) has index (n % T) * row + c within
// sample drop.sample_base + n / T; its mask bit is dropout_keep (philox.h), so the mask
// depends only on (seed, site, global sample, index), never on the layout or threads.
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

// out = in * keep / (1 - p), one row of `row` elements per task.
void apply(const char* op, const Tensor& in, const Tensor& out, int T, const DropoutKey& drop) {
  check_float(op, in);
  check_float(op, out);
  CPU_CHECK(op, in.numel() == out.numel(), in.shape.str(), " vs ", out.shape.str());
  const int64_t N = in.rows(), row = in.cols();
  CPU_CHECK(op, T > 0 && N % T == 0, "rows ", N, " not a multiple of T=", T);
  const float scale = drop.enabled() ? 1.0f / (1.0f - drop.p) : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* buf = thread_scratch(0, row);
    load_f32(in, n * row, row, buf);
    if (drop.enabled()) {
      const uint64_t sample = drop.sample_base + static_cast<uint64_t>(n / T);
      const uint64_t base = static_cast<uint64_t>(n % T) * static_cast<uint64_t>(row);
      for (int64_t c = 0; c < row; ++c)
        buf[c] = dropout_keep(drop, sample, base + static_cast<uint64_t>(c)) ? buf[c] * scale : 0.0f;
    }
    store_f32(out, n * row, row, buf);
  }
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop) {
  apply("dropout_forward", x, out, T, drop);
}

// The mask is recomputed from the key, so nothing is stored between the two passes.
void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop) {
  apply("dropout_backward", dout, dx, T, drop);
}

}  // namespace trident::cpu
