// Not a kernel of trident: a fixture for extract_device_code.cmake and the emulator's
// self-tests (test_emu_runtime.cpp). It uses each shared-memory declaration form the
// script rewrites, plus one it leaves to the `static` fallback, in the file layout of
// kernels/cuda/*.cu (kernels in an anonymous namespace before the host launchers).
#include <cstdint>

namespace trident::cuda {
namespace {

constexpr int kForms = 5;  // values recorded per block by thread 0

// out[block * kForms + k]: the bits thread 0 finds in each shared variable before any
// thread of the block wrote it (the emulator's poison, 0xFF bytes, in every block), then
// every thread checks what the others wrote after a barrier (mismatches[block]).
template <typename T>
__global__ void shared_forms_kernel(uint32_t* out, int* mismatches) {
  __shared__ __align__(16) float tile[4][8];
  __shared__ T scalar;
  __shared__ int counts[32];
  __shared__ unsigned fallback, fallback_hi;  // two declarators: left to the `static` fallback
  extern __shared__ __align__(16) unsigned char dyn[];
  const int t = threadIdx.x;
  if (t == 0) {
    uint32_t bits;
    __builtin_memcpy(&bits, &tile[3][7], 4);
    out[blockIdx.x * kForms + 0] = bits;
    uint32_t sbits = 0;
    __builtin_memcpy(&sbits, &scalar, sizeof(T) < 4 ? sizeof(T) : 4);
    out[blockIdx.x * kForms + 1] = sbits;
    out[blockIdx.x * kForms + 2] = static_cast<uint32_t>(counts[31]);
    out[blockIdx.x * kForms + 3] = dyn[0] | dyn[1] << 8 | dyn[2] << 16 | dyn[3] << 24;
    out[blockIdx.x * kForms + 4] = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(dyn) % 16);
  }
  __syncthreads();
  if (t < 32) {
    tile[t / 8][t % 8] = static_cast<float>(t + blockIdx.x);
    counts[t] = t * 3;
    dyn[t] = static_cast<unsigned char>(t);
  }
  if (t == 0) {
    scalar = static_cast<T>(blockIdx.x + 1);
    fallback = blockIdx.x;
    fallback_hi = blockIdx.x + 1;
  }
  __syncthreads();
  int bad = 0;
  const int s = (t * 7) % 32;
  bad += tile[s / 8][s % 8] != static_cast<float>(s + blockIdx.x);
  bad += counts[s] != s * 3;
  bad += dyn[s] != s;
  bad += scalar != static_cast<T>(blockIdx.x + 1);
  bad += fallback != blockIdx.x || fallback_hi != blockIdx.x + 1;
  if (bad) atomicAdd(&mismatches[blockIdx.x], bad);
}

}  // namespace

// Host launchers would follow here.

}  // namespace trident::cuda
