// AdamW on fp32 master weights (decoupled weight decay, bias correction), fused with the
// gradient unscale/clip factor and the copy of the new master weights into the model's
// dtype, applied to a whole list of parameter pieces in a few launches (multi-tensor
// apply, cuda_multi_tensor.cuh). One thread per element and fp32 math; the bias
// corrections 1 - beta^step are computed once on the host in double and passed as floats.
// Pieces of one launch share the gradient dtype and the model-parameter dtype; lr, betas,
// eps, the gradient factor and the step are common to the list, weight decay is per piece.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_multi_tensor.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kMaxTensors = 16;
constexpr int kMaxBlocks = 512;
constexpr int64_t kChunk = 16384;  // elements per block
constexpr int kThreads = 256;

// One launch's pieces (about 3.4 KB: within the kernel parameter limit).
struct AdamWTable {
  float* master[kMaxTensors];
  const void* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  void* model[kMaxTensors];  // null: no model copy
  int64_t n[kMaxTensors];
  float weight_decay[kMaxTensors];
  ChunkMap<kMaxBlocks> map;
};

struct AdamWScalars {
  float lr, beta1, beta2, eps, grad_scale, bc1, bc2;
  DType model_dtype;
};

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
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float g = to_f32(grad[i]) * k.grad_scale;
    const float mi = k.beta1 * m[i] + (1.0f - k.beta1) * g;
    const float vi = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master[i];
    p -= k.lr * ((mi / k.bc1) / (sqrtf(vi / k.bc2) + k.eps) + wd * p);
    master[i] = p;
    if (model.p != nullptr) store_any(model, i, p);
  }
}

void check_piece(const char* op, const AdamWArgs& a) {
  const int64_t n = a.master.numel();
  TRIDENT_CHECK(a.master.dtype == DType::F32 && a.m.dtype == DType::F32 && a.v.dtype == DType::F32, op,
                ": master, m and v must be f32");
  TRIDENT_CHECK(a.grad.numel() == n && a.m.numel() == n && a.v.numel() == n, op, ": sizes master ", n, " grad ",
                a.grad.numel(), " m ", a.m.numel(), " v ", a.v.numel());
  if (!a.model_param.empty())
    TRIDENT_CHECK(is_float(a.model_param.dtype) && a.model_param.numel() == n, op, ": model_param ",
                  a.model_param.shape.str(), " for ", n, " elements");
  TRIDENT_CHECK(a.step >= 1, op, ": step must be >= 1, got ", a.step);
}

}  // namespace

// Host launchers.

void adamw_multi(const std::vector<AdamWArgs>& list, cudaStream_t s) {
  const char* op = "adamw";
  if (list.empty()) return;
  check_adamw_multi_list(list);
  const AdamWArgs& first = list.front();
  std::vector<int64_t> sizes;
  sizes.reserve(list.size());
  for (const AdamWArgs& a : list) {
    check_piece(op, a);
    sizes.push_back(a.master.numel());
  }
  const double step = static_cast<double>(first.step);
  AdamWScalars k{first.lr, first.beta1, first.beta2, first.eps, first.grad_scale,
                 static_cast<float>(1.0 - std::pow(static_cast<double>(first.beta1), step)),
                 static_cast<float>(1.0 - std::pow(static_cast<double>(first.beta2), step)), DType::F32};
  auto model_dtype = [&](size_t i) { return list[i].model_param.empty() ? DType::F32 : list[i].model_param.dtype; };
  // A launch has one gradient dtype and one model dtype.
  auto launch_key = [&](size_t i) { return static_cast<int>(list[i].grad.dtype) * 16 + static_cast<int>(model_dtype(i)); };
  for_each_chunk_launch<kMaxTensors, kMaxBlocks>(sizes, kChunk, launch_key, [&](const std::vector<int>& tensors,
                                                                                   const ChunkMap<kMaxBlocks>& map,
                                                                                   int blocks) {
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
    }
    tab.map = map;
    k.model_dtype = model_dtype(tensors.front());
    dispatch_float(list[tensors.front()].grad.dtype, op, [&](auto tag) {
      using G = decltype(tag);
      adamw_multi_kernel<G><<<blocks, kThreads, 0, s>>>(tab, k);
    });
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace trident::cuda
