// GELU with the tanh approximation ("gelu_fast" / "gelu_new") as device functions, shared by
// the GELU kernels (cuda_gelu.cu) and the small-M GEMV's epilogue (cuda_gemv.cu):
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// fp32 math with full-precision tanhf: within a few ulp of the CPU twin.
#pragma once

namespace trident::cuda {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

__device__ __forceinline__ float gelu(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v)));
}
// dout * gelu'(v)
__device__ __forceinline__ float gelu_grad(float dout, float v) {
  const float t = tanhf(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v));
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * v * v);
  return dout * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
}

}  // namespace trident::cuda
