// GELU of either form (core/backend.h's Gelu) as device functions, shared by the GELU
// kernels (cuda_gelu.cu) and the small-M GEMV's epilogue (cuda_gemv.cu, the tanh form only):
//   tanh approximation ("gelu_fast" / "gelu_new"):
//     gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//     gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//   exact (erf):
//     gelu(x)  = x Phi(x),  Phi(x) = 0.5 (1 + erf(x / sqrt 2))
//     gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// fp32 math with full-precision tanhf, erff and expf: within a few ulp of the CPU twin.
#pragma once

#include "core/backend.h"

namespace trident::cuda {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;
constexpr float kGeluSqrtHalf = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kGeluInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

template <Gelu G>
__device__ __forceinline__ float gelu(float v) {
  if constexpr (G == Gelu::Erf) return 0.5f * v * (1.0f + erff(v * kGeluSqrtHalf));
  return 0.5f * v * (1.0f + tanhf(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v)));
}
// dout * gelu'(v)
template <Gelu G>
__device__ __forceinline__ float gelu_grad(float dout, float v) {
  if constexpr (G == Gelu::Erf)
    return dout * (0.5f * (1.0f + erff(v * kGeluSqrtHalf)) + v * kGeluInvSqrt2Pi * expf(-0.5f * v * v));
  const float t = tanhf(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v));
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * v * v);
  return dout * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
}

}  // namespace trident::cuda
