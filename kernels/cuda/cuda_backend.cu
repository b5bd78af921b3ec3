// CudaBackend: the Backend seam on one GPU. It owns the device memory (cudaMalloc behind
// the caching allocator), one compute stream on which every kernel and cuBLASLt call of
// this backend runs, and the GEMM state. Each op forwards to its family's entry point in
// cuda_<family>.cu (declared in cuda_ops.h), which checks shapes and launches.
// Host copies are cudaMemcpyAsync on the compute stream followed by a stream sync, so a
// host buffer may be reused as soon as the call returns.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <exception>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/nvml_energy.h"

namespace trident {
namespace {

void check_device(const char* op, const Tensor& t) {
  TRIDENT_CHECK(t.device == Device::Cuda, op, ": tensor is not on the CUDA device");
}

// Every non-empty operand must live on the GPU: a host pointer in a kernel would be an
// illegal address (an abort), so it is caught here as an InternalError naming the op.
void require_device(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->empty()) check_device(op, *t);
}

// Makes `ordinal` the current device for the lifetime of the guard's scope. Cheap when it
// already is; needed when one thread drives backends on several GPUs (tests).
void activate(int ordinal) {
  int cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != ordinal) CUDA_CHECK(cudaSetDevice(ordinal));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, const CudaBackendOptions& options) : Backend(Device::Cuda), ordinal_(ordinal) {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<cuda::Gemm>(options.allow_tf32, options.bf16_reduction_in_fp32);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    device_name_ = prop.name;
    name_ = std::string("cuda:") + std::to_string(ordinal_) + " (" + prop.name + ")";
  }

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }

  ~CudaBackend() override {
    // While an exception unwinds (a rank failing, on its way to ending the job), the stream
    // may wait for a collective whose peers never come: synchronising would hang the rank
    // before it can end the job. Leave the stream and memory to the process's end.
    if (std::uncaught_exceptions() > 0) {
      abandon_all_memory();
      // The GEMM's workspace too: cudaFree may synchronise the device, and so wait for the
      // stuck collective.
      (void)gemm_.release();
      return;
    }
    activate(ordinal_);
    cudaStreamSynchronize(stream_);
    release_all_memory();  // frees through raw_free, which needs the stream gone idle
    gemm_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  std::string device_name() const override { return device_name_; }
  std::optional<double> energy_joules(std::string* why_none) override {
    if (!energy_) {  // NVML opened on first use: only --log-energy reads it
      char bus_id[32] = {};
      CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal_));
      energy_ = std::make_unique<cuda::NvmlEnergy>(bus_id);
    }
    const std::optional<double> j = energy_->joules();
    if (!j && why_none) *why_none = name_ + ": " + energy_->why_none();
    return j;
  }

  std::optional<uint64_t> device_memory_used() override {
    activate(ordinal_);
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<uint64_t>(total - free);
  }

  // ---- memory ----
  void* raw_alloc(size_t bytes) override {
    activate(ordinal_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw InternalError("cuda:" + std::to_string(ordinal_) + ": out of device memory allocating " +
                          std::to_string(bytes) + " bytes (" + std::to_string(free_b >> 20) + " MiB free of " +
                          std::to_string(total_b >> 20) + " MiB): " + cudaGetErrorString(err));
    }
    return p;
  }
  void raw_free(void* p) override {
    activate(ordinal_);
    CUDA_CHECK(cudaFree(p));
  }
  void copy_from_host(const Tensor& dst, const void* src) override {
    check_device("copy_from_host", dst);
    if (dst.nbytes() == 0) return;
    activate(ordinal_);
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    check_device("copy_to_host", src);
    if (src.nbytes() == 0) return;
    activate(ordinal_);
    CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    check_device("copy", dst);
    check_device("copy", src);
    TRIDENT_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy: dst ", dst.shape.str(), " ",
                  dtype_name(dst.dtype), " vs src ", src.shape.str(), " ", dtype_name(src.dtype));
    if (dst.data == src.data || src.nbytes() == 0) return;
    activate(ordinal_);
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  void fill(const Tensor& t, float value) override {
    on_device();
    require_device("fill", {&t});
    cuda::fill(t, value, stream_);
  }
  void synchronize() override {
    activate(ordinal_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  bool pin_host_memory(void* p, size_t bytes) override {
    activate(ordinal_);
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
    (void)cudaGetLastError();  // pageable copies still work: leave no error for the next call
    return false;
  }
  // Called from destructors: errors (a device already failed) are cleared, never thrown.
  void unpin_host_memory(void* p) noexcept override {
    if (cudaSetDevice(ordinal_) != cudaSuccess || cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
  }
  bool profiler_start() override {
    activate(ordinal_);
    CUDA_CHECK(cudaProfilerStart());
    return true;
  }
  void profiler_stop() override {
    activate(ordinal_);
    CUDA_CHECK(cudaProfilerStop());
  }
  void range_push(const char* name) override { nvtxRangePushA(name); }
  void range_pop() override { nvtxRangePop(); }

  // ---- element-wise ----
  void cast(const Tensor& src, const Tensor& dst) override {
    on_device();
    require_device("cast", {&src, &dst});
    cuda::cast(src, dst, stream_);
  }
  void scale(const Tensor& t, float alpha) override {
    on_device();
    require_device("scale", {&t});
    cuda::scale(t, alpha, stream_);
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    on_device();
    require_device("add", {&a, &b, &out});
    cuda::add(a, b, out, stream_);
  }
  void accumulate(const Tensor& dst, const Tensor& src) override {
    on_device();
    require_device("accumulate", {&dst, &src});
    cuda::accumulate(dst, src, stream_);
  }

  // ---- embedding ----
  void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start, const Tensor& wpe, int T,
                         const Tensor& out) override {
    on_device();
    require_device("embedding_forward", {&tokens, &wte, &wpe, &out});
    cuda::embedding_forward(tokens, wte, vocab_start, wpe, T, out, stream_);
  }
  void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T, const Tensor& dwte,
                          const Tensor& dwpe) override {
    on_device();
    require_device("embedding_backward", {&dout, &tokens, &dwte, &dwpe});
    cuda::embedding_backward(dout, tokens, vocab_start, T, dwte, dwpe, allocator(), stream_);
  }

  // ---- LayerNorm ----
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                         const Tensor& mean, const Tensor& rstd) override {
    on_device();
    require_device("layernorm_forward", {&x, &gamma, &beta, &out, &mean, &rstd});
    cuda::layernorm_forward(x, gamma, beta, out, mean, rstd, stream_);
  }
  void residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                                  const Tensor& beta, const Tensor& out, const Tensor& mean,
                                  const Tensor& rstd) override {
    if (branch.dtype != x.dtype || resid.dtype != x.dtype) {  // mixed dtypes: the unfused meaning
      Backend::residual_layernorm_forward(x, branch, resid, gamma, beta, out, mean, rstd);
      return;
    }
    on_device();
    require_device("residual_layernorm_forward", {&x, &branch, &resid, &gamma, &beta, &out, &mean, &rstd});
    cuda::residual_layernorm_forward(x, branch, resid, gamma, beta, out, mean, rstd, stream_);
  }
  void dropout_residual_layernorm_forward(const Tensor& x, const Tensor& branch, int T, const DropoutKey& drop,
                                          const Tensor& resid, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& out, const Tensor& mean, const Tensor& rstd) override {
    if (branch.dtype != x.dtype || resid.dtype != x.dtype) {  // mixed dtypes: the unfused meaning
      Backend::dropout_residual_layernorm_forward(x, branch, T, drop, resid, gamma, beta, out, mean, rstd);
      return;
    }
    on_device();
    require_device("dropout_residual_layernorm_forward", {&x, &branch, &resid, &gamma, &beta, &out, &mean, &rstd});
    cuda::residual_layernorm_forward(x, branch, resid, gamma, beta, out, mean, rstd, stream_, T, drop);
  }
  void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) override {
    on_device();
    require_device("layernorm_backward", {&dout, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta});
    cuda::layernorm_backward(dout, x, gamma, mean, rstd, dx, dgamma, dbeta, allocator(), stream_);
  }

  // ---- GEMM ----
  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
              bool accumulate) override {
    on_device();
    require_device("matmul", {&out, &a, &b, &bias});
    gemm_->run(out, a, b, bias, trans_a, trans_b, accumulate, stream_);
  }
  // The tanh GELU in the GEMM's epilogue when cuBLASLt has an algorithm for it; else (and
  // always for the erf GELU, which cuBLASLt's epilogues do not compute) the GEMM with its
  // bias epilogue and the GELU kernel (Backend's composition).
  void matmul_bias_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                        bool trans_a, bool trans_b, Gelu form) override {
    on_device();
    require_device("matmul_bias_gelu", {&pre, &out, &a, &b, &bias});
    if (form != Gelu::Tanh || !gemm_->run_gelu(pre, out, a, b, bias, trans_a, trans_b, stream_))
      Backend::matmul_bias_gelu(pre, out, a, b, bias, trans_a, trans_b, form);
  }
  void matmul_gelu_backward(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre, bool trans_a,
                            bool trans_b, Gelu form) override {
    on_device();
    require_device("matmul_gelu_backward", {&dpre, &a, &b, &pre});
    if (form != Gelu::Tanh || !gemm_->run_dgelu(dpre, a, b, pre, trans_a, trans_b, stream_))
      Backend::matmul_gelu_backward(dpre, a, b, pre, trans_a, trans_b, form);
  }
  void bias_backward(const Tensor& dout, const Tensor& dbias) override {
    on_device();
    require_device("bias_backward", {&dout, &dbias});
    cuda::bias_backward(dout, dbias, allocator(), stream_);
  }
  void dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx,
                             const Tensor& dbias) override {
    if (dx.dtype != dout.dtype) {  // mixed dtypes: the unfused meaning
      Backend::dropout_bias_backward(dout, T, drop, dx, dbias);
      return;
    }
    on_device();
    require_device("dropout_bias_backward", {&dout, &dx, &dbias});
    cuda::dropout_bias_backward(dout, T, drop, dx, dbias, allocator(), stream_);
  }

  // ---- GELU ----
  void gelu_forward(const Tensor& x, const Tensor& out, Gelu form) override {
    on_device();
    require_device("gelu_forward", {&x, &out});
    cuda::gelu_forward(x, out, form, stream_);
  }
  void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) override {
    on_device();
    require_device("gelu_backward", {&dout, &x, &dx});
    cuda::gelu_backward(dout, x, dx, form, stream_);
  }

  // ---- attention ----
  void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s,
                         const DropoutKey& drop) override {
    on_device();
    require_device("attention_forward", {&qkv, &out, &lse, &s.document_starts, &s.dropout_mask});
    cuda::attention_forward(qkv, out, lse, s, drop, stream_);
  }
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          const Tensor& dqkv, const AttentionShape& s, const DropoutKey& drop) override {
    on_device();
    require_device("attention_backward", {&dout, &qkv, &out, &lse, &dqkv, &s.document_starts, &s.dropout_mask});
    cuda::attention_backward(dout, qkv, out, lse, dqkv, s, drop, allocator(), stream_);
  }

  void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                        const Tensor& out) override {
    on_device();
    require_device("attention_decode", {&qkv, &k_cache, &v_cache, &out});
    cuda::attention_decode(qkv, k_cache, v_cache, at, out, allocator(), stream_);
  }
  // ---- dropout ----
  void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop) override {
    on_device();
    require_device("dropout_forward", {&x, &out});
    cuda::dropout_forward(x, out, T, drop, stream_);
  }
  void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop) override {
    on_device();
    require_device("dropout_backward", {&dout, &dx});
    cuda::dropout_backward(dout, dx, T, drop, stream_);
  }

  // ---- cross-entropy ----
  void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                  const Tensor& row_max, const Tensor& target_logit) override {
    on_device();
    require_device("xent_stats", {&logits, &targets, &row_max, &target_logit});
    cuda::xent_stats(logits, targets, vocab_start, vocab_valid, row_max, target_logit, stream_);
  }
  void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp) override {
    on_device();
    require_device("xent_sumexp", {&logits, &row_max, &sumexp});
    cuda::xent_sumexp(logits, vocab_valid, row_max, sumexp, stream_);
  }
  void xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                         const Tensor& row_max, const Tensor& target_logit, const Tensor& sumexp) override {
    on_device();
    require_device("xent_stats_sumexp", {&logits, &targets, &row_max, &target_logit, &sumexp});
    cuda::xent_stats_sumexp(logits, targets, vocab_start, vocab_valid, row_max, target_logit, sumexp, stream_);
  }
  void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                      const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, const Tensor& losses,
                      const Tensor& correct, float grad_scale) override {
    on_device();
    require_device("xent_loss_grad", {&logits, &targets, &row_max, &sumexp, &target_logit, &losses, &correct});
    cuda::xent_loss_grad(logits, targets, vocab_start, vocab_valid, row_max, sumexp, target_logit, losses, correct,
                         grad_scale, stream_);
  }
  void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids) override {
    on_device();
    require_device("logits_argmax", {&logits, &values, &ids});
    cuda::logits_argmax(logits, vocab_valid, values, ids, stream_);
  }
  void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                     const std::vector<RowDraw>& draws, const Tensor& ids) override {
    on_device();
    require_device("sample_logits", {&logits, &ids});
    cuda::sample_logits(logits, vocab_valid, temperature, top_k, draws, ids, allocator(), stream_);
  }

  // ---- optimizer and reductions ----
  void adamw(const AdamWArgs& a) override { adamw_multi({a}); }
  void adamw_multi(const std::vector<AdamWArgs>& list) override {
    on_device();
    for (const AdamWArgs& a : list) require_device("adamw", {&a.master, &a.grad, &a.m, &a.v, &a.model_param});
    cuda::adamw_multi(list, stream_);
  }
  double sum_squares_multi(const std::vector<Tensor>& list) override {
    on_device();
    for (const Tensor& t : list) require_device("sum_squares", {&t});
    return cuda::sum_squares_multi(list, allocator(), stream_);
  }
  int64_t count_zeros_multi(const std::vector<Tensor>& list) override {
    on_device();
    for (const Tensor& t : list) require_device("count_zeros", {&t});
    return cuda::count_zeros_multi(list, allocator(), stream_);
  }
  MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list) override {
    on_device();
    for (const Tensor& t : list) require_device("magnitude_stats", {&t});
    return cuda::magnitude_stats_multi(list, allocator(), stream_);
  }
  double sum_squares(const Tensor& t) override {
    on_device();
    require_device("sum_squares", {&t});
    return cuda::sum(t, true, allocator(), stream_);
  }
  double sum(const Tensor& t) override {
    on_device();
    require_device("sum", {&t});
    return cuda::sum(t, false, allocator(), stream_);
  }
  bool has_inf_or_nan(const Tensor& t) override {
    on_device();
    require_device("has_inf_or_nan", {&t});
    return cuda::has_inf_or_nan(t, allocator(), stream_);
  }

 private:
  void on_device() { activate(ordinal_); }

  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::string name_, device_name_;
  std::unique_ptr<cuda::NvmlEnergy> energy_;  // --log-energy's counter, once asked for
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    // No driver, no GPU, or "driver version is insufficient": all mean "no GPU here".
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int ordinal, const CudaBackendOptions& options) {
  const int n = cuda_device_count();
  if (ordinal < 0 || ordinal >= n)
    throw ConfigError("--device cuda: GPU " + std::to_string(ordinal) + " requested but " + std::to_string(n) +
                      " visible");
  return std::make_unique<CudaBackend>(ordinal, options);
}

CudaStreamRef cuda_stream_of(Backend& backend) {
  CudaStreamRef ref;
  if (auto* cb = dynamic_cast<CudaBackend*>(&backend)) {
    ref.device = cb->ordinal();
    ref.stream = cb->stream();
  }
  return ref;
}

}  // namespace trident
