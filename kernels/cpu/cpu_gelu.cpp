// GELU, tanh approximation ("gelu_fast" / "gelu_new"):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;
constexpr int64_t kChunk = 1024;

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_float(op, a);
  check_float(op, b);
  CPU_CHECK(op, a.numel() == b.numel(), a.shape.str(), " vs ", b.shape.str());
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out) {
  check_same("gelu_forward", x, out);
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t off = ci * kChunk, w = std::min(kChunk, n - off);
    float buf[kChunk];
    load_f32(x, off, w, buf);
    for (int64_t i = 0; i < w; ++i) {
      const float v = buf[i];
      buf[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kCoeff * v * v * v)));
    }
    store_f32(out, off, w, buf);
  }
}

void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) {
  check_same("gelu_backward", x, dx);
  check_same("gelu_backward", x, dout);
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t off = ci * kChunk, w = std::min(kChunk, n - off);
    float xb[kChunk], db[kChunk];
    load_f32(x, off, w, xb);
    load_f32(dout, off, w, db);
    for (int64_t i = 0; i < w; ++i) {
      const float v = xb[i];
      const float t = std::tanh(kSqrt2OverPi * (v + kCoeff * v * v * v));
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * v * v);
      db[i] *= 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    }
    store_f32(dx, off, w, db);
  }
}

}  // namespace trident::cpu
