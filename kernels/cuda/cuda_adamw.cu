// AdamW on fp32 master weights (decoupled weight decay, bias correction), fused with the
// gradient unscale/clip factor and the copy of the new master weights into the model's
// dtype, applied to a whole list of parameter pieces in a few launches (multi-tensor
// apply, cuda_multi_tensor.cuh). fp32 math; the bias corrections 1 - beta^step are
// computed once on the host in double and passed as floats.
// Speed: the step moves 30 bytes per parameter (fp32 master, m, v read and written, the
// gradient read, the model copy written), so it is bound by memory bandwidth. A thread
// updates 4 consecutive elements with vector loads and stores when every pointer of the
// piece allows it (16-byte fp32, 8-byte 16-bit), else one at a time; both paths run the
// same per-element arithmetic, so the results do not depend on the path. Chunks of 16K
// elements and 2048 blocks a launch keep a gpt2-1.3b step to ~40 launches (with 4K-element
// chunks and scalar accesses an H200 ran it at 57% of its copy bandwidth) and give the
// 16-tensor launches of small models enough blocks to fill the GPU.
// Pieces of one launch share the gradient dtype and the model-parameter dtype; lr, betas,
// eps, the gradient factor and the step are common to the list, weight decay is per piece.
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_multi_tensor.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kMaxTensors = 16;
// 16K-element chunks, up to 2048 a launch: gpt2-124m's 16-tensor launches (~12M elements)
// then have ~760 blocks, not ~190 of 64K elements (1.4 an SM on an H200, so that half the
// SMs idled while the others ran their second block: 67% of the copy rate, 2026-11-30).
constexpr int kMaxBlocks = 2048;
constexpr int64_t kChunk = 16384;  // elements per block: a multiple of kVec
constexpr int kThreads = 256;
constexpr int kVec = 4;  // elements per thread on the vector path

// One launch's pieces (about 11 KB: CUDA 12.1 and later take up to 32 KB of kernel parameters
// on Volta and later GPUs).
struct AdamWTable {
  float* master[kMaxTensors];
  const void* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  void* model[kMaxTensors];  // null: no model copy
  int64_t n[kMaxTensors];
  float weight_decay[kMaxTensors];
  bool vec[kMaxTensors];  // every pointer of the piece is aligned for kVec-element vectors
  ChunkMap<kMaxBlocks> map;
};

struct AdamWScalars {
  float lr, beta1, beta2, eps, grad_scale, bc1, bc2;
  DType model_dtype;
};
static_assert(sizeof(AdamWTable) + sizeof(AdamWScalars) <= 32764, "adamw_multi_kernel's parameters");
#if defined(CUDART_VERSION) && CUDART_VERSION < 12010
#error "cuda_adamw.cu passes ~11 KB of kernel parameters: CUDA 12.1 or newer is needed"
#endif

// One element's update; m, v and the master weight are updated in place and the new
// master weight returned.
__device__ __forceinline__ float adamw_element(float g_raw, float& m, float& v, float& master, float wd,
                                               const AdamWScalars& k) {
  const float g = g_raw * k.grad_scale;
  m = k.beta1 * m + (1.0f - k.beta1) * g;
  v = k.beta2 * v + (1.0f - k.beta2) * g * g;
  master -= k.lr * ((m / k.bc1) / (sqrtf(v / k.bc2) + k.eps) + wd * master);
  return master;
}

// kVec values converted to T and stored as one vector at p.
template <typename T>
__device__ __forceinline__ void store_converted(T* p, const float (&v)[kVec]) {
  Vec<T, kVec> o;
#pragma unroll
  for (int e = 0; e < kVec; ++e) o.v[e] = from_f32<T>(v[e]);
  store_vec<T, kVec>(p, o);
}

// kVec model-copy values from element i on; the piece's vec flag guarantees the alignment.
__device__ __forceinline__ void store_model_vec(AnyPtr model, int64_t i, const float (&p)[kVec]) {
  switch (model.t) {
    case DType::F32: store_converted(static_cast<float*>(model.p) + i, p); break;
    case DType::F16: store_converted(static_cast<__half*>(model.p) + i, p); break;
    case DType::BF16: store_converted(static_cast<__nv_bfloat16*>(model.p) + i, p); break;
    default:
#pragma unroll
      for (int e = 0; e < kVec; ++e) store_any(model, i + e, p[e]);
  }
}

template <typename G>
__global__ void __launch_bounds__(kThreads) adamw_multi_kernel(AdamWTable tab, AdamWScalars k) {
  const int t = tab.map.tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(tab.map.chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < tab.n[t] ? begin + kChunk : tab.n[t];
  float* master = tab.master[t];
  const G* grad = static_cast<const G*>(tab.grad[t]);
  float* m = tab.m[t];
  float* v = tab.v[t];
  const AnyPtr model{tab.model[t], k.model_dtype};
  const float wd = tab.weight_decay[t];
  // Vector part [begin, vend) (chunks start at multiples of kVec), then the scalar rest.
  const int64_t vend = tab.vec[t] ? begin + ((end - begin) / kVec) * kVec : begin;
  for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * kVec; i < vend; i += kThreads * kVec) {
    const Vec<G, kVec> g = load_vec<G, kVec>(grad + i);
    float4 m4 = *reinterpret_cast<const float4*>(m + i), v4 = *reinterpret_cast<const float4*>(v + i);
    float4 p4 = *reinterpret_cast<const float4*>(master + i);
    float out[kVec];
    out[0] = adamw_element(to_f32(g.v[0]), m4.x, v4.x, p4.x, wd, k);
    out[1] = adamw_element(to_f32(g.v[1]), m4.y, v4.y, p4.y, wd, k);
    out[2] = adamw_element(to_f32(g.v[2]), m4.z, v4.z, p4.z, wd, k);
    out[3] = adamw_element(to_f32(g.v[3]), m4.w, v4.w, p4.w, wd, k);
    *reinterpret_cast<float4*>(m + i) = m4;
    *reinterpret_cast<float4*>(v + i) = v4;
    *reinterpret_cast<float4*>(master + i) = p4;
    if (model.p != nullptr) store_model_vec(model, i, out);
  }
  for (int64_t i = vend + threadIdx.x; i < end; i += kThreads) {
    float mi = m[i], vi = v[i], p = master[i];
    adamw_element(to_f32(grad[i]), mi, vi, p, wd, k);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    if (model.p != nullptr) store_any(model, i, p);
  }
}

void check_piece(const char* op, const AdamWArgs& a) {
  const int64_t n = a.master.numel();
  TRIDENT_CHECK(a.master.dtype == DType::F32 && a.m.dtype == DType::F32 && a.v.dtype == DType::F32, op,
                ": master, m and v must be f32");
  // Checked for every piece before the first launch: a bad one later in the list must not
  // leave the earlier ones updated.
  TRIDENT_CHECK(is_float(a.grad.dtype), op, ": grad must be a float tensor, got ", dtype_name(a.grad.dtype));
  TRIDENT_CHECK(a.grad.numel() == n && a.m.numel() == n && a.v.numel() == n, op, ": sizes master ", n, " grad ",
                a.grad.numel(), " m ", a.m.numel(), " v ", a.v.numel());
  if (!a.model_param.empty())
    TRIDENT_CHECK(is_float(a.model_param.dtype) && a.model_param.numel() == n, op, ": model_param ",
                  a.model_param.shape.str(), " for ", n, " elements");
  TRIDENT_CHECK(a.step >= 1, op, ": step must be >= 1, got ", a.step);
}

// Whether every pointer of the piece takes kVec-element vector accesses.
bool vector_aligned(const AdamWArgs& a) {
  auto ok = [](const Tensor& t) {
    return t.empty() || reinterpret_cast<uintptr_t>(t.data) % (kVec * dtype_size(t.dtype)) == 0;
  };
  return ok(a.master) && ok(a.grad) && ok(a.m) && ok(a.v) && ok(a.model_param);
}

// The launches of one adamw_multi call: the scalars, the pieces cut into chunk launches
// (one gradient dtype and one model dtype per launch) and each launch's table, handed to
// launch(tab, k, blocks, grad_dtype). Shared by the host launcher and the CPU emulator's
// test, so both run the same geometry.
template <typename Launch>
void plan_adamw_launches(const std::vector<AdamWArgs>& list, Launch launch) {
  const AdamWArgs& first = list.front();
  std::vector<int64_t> sizes;
  sizes.reserve(list.size());
  for (const AdamWArgs& a : list) sizes.push_back(a.master.numel());
  const double step = static_cast<double>(first.step);
  AdamWScalars k{first.lr, first.beta1, first.beta2, first.eps, first.grad_scale,
                 static_cast<float>(1.0 - std::pow(static_cast<double>(first.beta1), step)),
                 static_cast<float>(1.0 - std::pow(static_cast<double>(first.beta2), step)), DType::F32};
  auto model_dtype = [&](size_t i) { return list[i].model_param.empty() ? DType::F32 : list[i].model_param.dtype; };
  auto launch_key = [&](size_t i) { return static_cast<int>(list[i].grad.dtype) * 16 + static_cast<int>(model_dtype(i)); };
  for_each_chunk_launch<kMaxTensors, kMaxBlocks>(
      sizes, kChunk, launch_key, [&](const std::vector<int>& tensors, const ChunkMap<kMaxBlocks>& map, int blocks) {
        AdamWTable tab{};
        for (size_t j = 0; j < tensors.size(); ++j) {
          const AdamWArgs& a = list[tensors[j]];
          tab.master[j] = a.master.ptr<float>();
          tab.grad[j] = a.grad.data;
          tab.m[j] = a.m.ptr<float>();
          tab.v[j] = a.v.ptr<float>();
          tab.model[j] = a.model_param.empty() ? nullptr : a.model_param.data;
          tab.n[j] = a.master.numel();
          tab.weight_decay[j] = a.weight_decay;
          tab.vec[j] = vector_aligned(a);
        }
        tab.map = map;
        k.model_dtype = model_dtype(tensors.front());
        launch(tab, k, blocks, list[tensors.front()].grad.dtype);
      });
}

}  // namespace

// Host launchers.

void adamw_multi(const std::vector<AdamWArgs>& list, cudaStream_t s) {
  const char* op = "adamw";
  if (list.empty()) return;
  check_adamw_multi_list(list);
  for (const AdamWArgs& a : list) check_piece(op, a);
  plan_adamw_launches(list, [&](const AdamWTable& tab, const AdamWScalars& k, int blocks, DType grad_dtype) {
    dispatch_float(grad_dtype, op, [&](auto tag) {
      using G = decltype(tag);
      adamw_multi_kernel<G><<<blocks, kThreads, 0, s>>>(tab, k);
    });
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace trident::cuda
