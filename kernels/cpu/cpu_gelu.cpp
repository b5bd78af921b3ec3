// GELU of either form (core/backend.h's Gelu), fp32 math:
//   tanh approximation ("gelu_fast" / "gelu_new"):
//     gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//     gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//   exact (erf):
//     gelu(x)  = x Phi(x),  Phi(x) = 0.5 (1 + erf(x / sqrt 2))
//     gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// The form is a template parameter of the loops, chosen once a call (dispatch_gelu).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;
constexpr float kSqrtHalf = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)
constexpr int64_t kChunk = 1024;

template <Gelu G>
float gelu(float v) {
  if constexpr (G == Gelu::Erf) return 0.5f * v * (1.0f + std::erf(v * kSqrtHalf));
  return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kCoeff * v * v * v)));
}

template <Gelu G>
float gelu_slope(float v) {  // gelu'(v)
  if constexpr (G == Gelu::Erf)
    return 0.5f * (1.0f + std::erf(v * kSqrtHalf)) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
  const float t = std::tanh(kSqrt2OverPi * (v + kCoeff * v * v * v));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_float(op, a);
  check_float(op, b);
  CPU_CHECK(op, a.numel() == b.numel(), a.shape.str(), " vs ", b.shape.str());
}

template <Gelu G>
void forward(const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t off = ci * kChunk, w = std::min(kChunk, n - off);
    float buf[kChunk];
    load_f32(x, off, w, buf);
    for (int64_t i = 0; i < w; ++i) buf[i] = gelu<G>(buf[i]);
    store_f32(out, off, w, buf);
  }
}

template <Gelu G>
void backward(const Tensor& dout, const Tensor& x, const Tensor& dx) {
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t off = ci * kChunk, w = std::min(kChunk, n - off);
    float xb[kChunk], db[kChunk];
    load_f32(x, off, w, xb);
    load_f32(dout, off, w, db);
    for (int64_t i = 0; i < w; ++i) db[i] *= gelu_slope<G>(xb[i]);
    store_f32(dx, off, w, db);
  }
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out, Gelu form) {
  check_same("gelu_forward", x, out);
  dispatch_gelu(form, [&](auto g) { forward<decltype(g)::value>(x, out); });
}

void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) {
  check_same("gelu_backward", x, dx);
  check_same("gelu_backward", x, dout);
  dispatch_gelu(form, [&](auto g) { backward<decltype(g)::value>(dout, x, dx); });
}

}  // namespace trident::cpu
