// The Backend seam: every numeric op the model, optimizer and trainer need.
// CpuBackend (kernels/cpu) is the reference; CudaBackend (kernels/cuda) is the product.
// The model calls only this interface, so one training step can run on both and be compared.
//
// Conventions for every op:
// - Tensors are contiguous row-major views on this backend's device.
// - Float tensors may be F32, F16 or BF16 unless a comment says "f32"; arithmetic is fp32.
// - "=" outputs are overwritten; "+=" outputs accumulate (parameter gradients always
//   accumulate, so gradient accumulation over micro-batches needs no extra pass).
// - Shapes are checked; a mismatch throws InternalError naming the op.
// - Ops are asynchronous on devices that have streams; functions returning host values
//   (sum_squares, sum, has_inf_or_nan, count_zeros_multi) synchronise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>
#include <string>
#include <type_traits>

#include "core/allocator.h"
#include "core/gelu.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "core/token_draw.h"

namespace trident {

// Shape of a fused causal self-attention: batch, sequence, local heads, head dim.
// `head_offset` and `heads_total` place the local heads among all heads (tensor
// parallelism), so dropout masks index heads globally.
// `document_starts` (I32 [B*T] on the backend's device, or empty) restricts each query to
// its own document (Megatron's --reset-attention-mask): query i of sample b sees the keys j
// with document_starts[b*T + i] <= j <= i. Documents are contiguous runs of positions: each
// value is its own position (a document starts) or its predecessor's value. The CPU backend
// checks this; the CUDA kernels trust it (data/documents.h makes such starts).
// `dropout_mask` (I32 [attn_mask_words(B, H, T)] on the backend's device, or empty; core/
// attn_dropout_mask.h's layout): with attention dropout, attention_forward saves the keep bits
// there and attention_backward reads them instead of drawing the mask again, so the same
// tensor must reach both (Backend::saves_attention_dropout_mask says whether to pass one).
struct AttentionShape {
  int B = 0, T = 0, H = 0, D = 0;
  int head_offset = 0;
  int heads_total = 0;  // 0 means H
  Tensor document_starts{};
  Tensor dropout_mask{};
};

// Where the new tokens of an attention_decode call go: every sequence's at positions pos ..
// pos + T - 1 (an int converts to this), or, with `rows` (I32 [B] on the backend's device),
// sequence b's at rows[b] .. rows[b] + T - 1, with 0 <= rows[b] <= pos: `pos` is then their
// largest, from which the CUDA backend plans its launch without reading the device tensor
// (the CPU backend checks the values; the CUDA kernels trust them, as document_starts).
// Per-row positions let a batch of prompts of different lengths decode each sequence at its
// own length.
struct DecodePositions {
  DecodePositions(int every = 0) : pos(every) {}  // NOLINT(google-explicit-constructor): every sequence at `every`
  DecodePositions(int largest, Tensor per_row) : pos(largest), rows(per_row) {}
  int pos = 0;
  Tensor rows{};
};

// The sizes of an attention_decode call: B sequences, T new tokens each, H heads of D, caches
// of Tmax positions. check_decode_shapes validates the call (shapes, dtypes, T new positions
// from `at.pos` inside the cache, at.rows' shape, dtype and device; not its values) and
// throws InternalError naming `op` when it is wrong.
struct DecodeShape {
  int64_t B = 0, T = 0, H = 0, D = 0, Tmax = 0;
};
DecodeShape check_decode_shapes(const char* op, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                                const DecodePositions& at, const Tensor& out);

// The GELU of an op: core/gelu.h.

// Backend::magnitude_stats_multi's result: over the elements x of the tensors, in double.
struct MagnitudeStats {
  double sum_squares = 0, sum_abs = 0, sum_sqrt_abs = 0, max_abs = 0;
};

// AdamW on one flat fp32 shard (decoupled weight decay, bias correction).
//   g  = grad * grad_scale                       (unscale and clip folded into one factor)
//   m  = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^step) / (sqrt(v / (1 - beta2^step)) + eps) + weight_decay * p)
//   model_param = p  (cast to its dtype), when model_param is not empty
struct AdamWArgs {
  Tensor master;       // f32 [n], updated in place
  Tensor grad;         // [n], any float dtype
  Tensor m, v;         // f32 [n]
  Tensor model_param;  // [n] copy of master in the model's dtype, or empty
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  float grad_scale = 1.0f;
  int64_t step = 1;  // 1-based step for bias correction
};

// Backend::adamw_multi's precondition: every element shares lr, betas, eps, grad_scale and
// step (weight decay may differ). Throws InternalError otherwise.
void check_adamw_multi_list(const std::vector<AdamWArgs>& list);

class Backend {
 public:
  explicit Backend(Device device);
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  Device device() const { return device_; }
  virtual std::string name() const = 0;
  // The device's marketing name ("NVIDIA H200", as the driver reports it); the peak-FLOP/s
  // table for MFU is keyed by it. The CPU backend answers "cpu".
  virtual std::string device_name() const { return name(); }
  // True for a backend that allocates and computes nothing (DryRunBackend, for measuring
  // memory): host work that only prepares values for its ops may be skipped.
  virtual bool dry_run() const { return false; }
  // The device's energy counter, joules since a fixed point (a GPU's: NVML's), for Megatron's
  // --log-energy; nullopt on a device without one (the CPU's), with the reason in *why_none.
  virtual std::optional<double> energy_joules(std::string* why_none);
  // The bytes the whole device has in use, by every process (Megatron's
  // --log-device-memory-used); nullopt where there is no device memory (the CPU's).
  virtual std::optional<uint64_t> device_memory_used() { return std::nullopt; }
  // Whether the model should keep each layer's attention dropout mask from its forward for
  // its backward (AttentionShape::dropout_mask): bits of memory against drawing it again.
  // Every backend: TRIDENT_ATTN_SAVE_MASK=1 or TRIDENT_ATTN_MASK_AHEAD=1 (core/attn_dropout_mask.h).
  virtual bool saves_attention_dropout_mask() const;

  // ---- memory -------------------------------------------------------------------------
  // Tensors come from a caching allocator over raw_alloc: after the first training step
  // every request is served from the cache (allocator().stats() proves it).
  Buffer empty(Shape shape, DType dtype);
  Buffer zeros(Shape shape, DType dtype);
  CachingAllocator& allocator() { return *allocator_; }

  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* p) = 0;
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;  // nbytes of dst
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;          // nbytes of src
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;          // same dtype and numel
  virtual void fill(const Tensor& t, float value) = 0;
  virtual void synchronize() = 0;

  // Page-locks host memory [p, p + bytes) so that copies between it and the device run at the
  // bus's speed without a staging copy (CUDA: cudaHostRegister). False where the backend has
  // nothing to lock for or locking failed: copies still work, slower. unpin_host_memory(p)
  // before the memory is unmapped.
  virtual bool pin_host_memory(void* /*p*/, size_t /*bytes*/) { return false; }
  virtual void unpin_host_memory(void* /*p*/) noexcept {}

  // ---- an external profiler (--profile) ---------------------------------------------------
  // The device profiler's capture (CUDA: cudaProfilerStart/Stop, which Nsight Systems'
  // --capture-range=cudaProfilerApi waits for) and named ranges on its timeline (NVTX).
  // Returns false where the backend has no profiler (the CPU backend); the ranges are then
  // no-ops.
  virtual bool profiler_start() { return false; }
  virtual void profiler_stop() {}
  virtual void range_push(const char* /*name*/) {}
  virtual void range_pop() {}

  // ---- element-wise -------------------------------------------------------------------
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;                   // dst = src
  virtual void scale(const Tensor& t, float alpha) = 0;                          // t *= alpha
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;     // out = a + b
  virtual void accumulate(const Tensor& dst, const Tensor& src) = 0;             // dst += src

  // ---- embedding ----------------------------------------------------------------------
  // tokens: I32 [B*T] (row n is position n % T). wte: [Vl, C] holds vocab ids
  // [vocab_start, vocab_start + Vl); ids outside give zero (vocab-parallel).
  // out[n] = wte[tok - vocab_start] + (wpe.empty() ? 0 : wpe[n % T]).        out: [B*T, C] =
  virtual void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start,
                                 const Tensor& wpe, int T, const Tensor& out) = 0;
  // dwte += scatter of dout by token (ids outside the shard skipped); dwpe += sum over
  // batch of dout, when dwpe is not empty. Deterministic (no float atomics).
  virtual void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start,
                                  int T, const Tensor& dwte, const Tensor& dwpe) = 0;

  // ---- LayerNorm over the last dim, eps 1e-5, f32 statistics ---------------------------
  // x, out: [N, C]; gamma, beta: [C]; mean, rstd: f32 [N] (saved for backward).
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& out, const Tensor& mean, const Tensor& rstd) = 0;
  // dx += ..., dgamma += ..., dbeta += ...
  virtual void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma,
                                  const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                  const Tensor& dgamma, const Tensor& dbeta) = 0;

  // ---- GEMM ---------------------------------------------------------------------------
  // out[M, N] (= or +=) op(a) @ op(b) (+ bias[N] when not empty, broadcast over rows).
  // op(a) is a [M, K] (trans_a: a is [K, M]); op(b) is b [K, N] (trans_b: b is [N, K]).
  // A linear layer y = x W^T + b with W [out, in] is matmul(y, x, W, b, false, true).
  virtual void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                      bool trans_a, bool trans_b, bool accumulate) = 0;
  // dbias[N] += column sums of dout [M, N].
  virtual void bias_backward(const Tensor& dout, const Tensor& dbias) = 0;

  // ---- GELU of either form (Gelu above), fp32 math -------------------------------------
  // out = gelu(x); dx = dout * gelu'(x) (dx may alias dout).
  virtual void gelu_forward(const Tensor& x, const Tensor& out, Gelu form) = 0;                     // =
  virtual void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) = 0;  // =

  // ---- fused causal multi-head attention ----------------------------------------------
  // qkv: [B, T, 3, H, D] (Q, K, V blocks, heads contiguous); out: [B, T, H, D] =;
  // lse: f32 [B, H, T] = log-sum-exp of each row of scaled scores (saved for backward).
  // Scores scaled by 1/sqrt(D); position j > i masked (and j < the document's start, with
  // s.document_starts). Attention-probability dropout uses
  // key `drop`: philox.h's attn_dropout_keep(drop, drop.sample_base + b, h_global, T, i, j)
  // (h_global = head_offset + h), kept values scaled by attn_drop_scale(drop.p).
  virtual void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                 const AttentionShape& s, const DropoutKey& drop) = 0;
  // dqkv: [B, T, 3, H, D] =
  virtual void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, const Tensor& dqkv, const AttentionShape& s,
                                  const DropoutKey& drop) = 0;

  // ---- attention over a KV cache (generation: new tokens of every sequence) -------------
  // qkv: [B, T, 3, H, D] of the T tokens of each sequence b at positions p_b .. p_b + T - 1
  // (p_b: at.pos, or at.rows[b]; Q, K, V blocks; [B, 3, H, D] is T = 1). Their K and V are
  // written to k_cache and v_cache [B, Tmax, H, D] (qkv's dtype) at those positions, and the
  // query at p_b + t attends causally: out [B, T, H, D] (or [B, H, D] at T = 1) =
  // softmax(q . K[0..p_b+t]^T / sqrt(D)) V[0..p_b+t]  (=). No dropout. The softmax of each
  // row is in fp32 from its maximum; the caches hold positions [0, p_b) before the call.
  // T = 1 is a decoding step, T > 1 feeds a prompt in one pass (prefill). A backend may feed
  // a prompt from position 0 (every sequence) through its attention_forward (CUDA in 16-bit
  // types, whose P V takes 16-bit probabilities): equal to the other passes up to that rounding.
  virtual void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                                const DecodePositions& at, const Tensor& out) = 0;

  // ---- dropout on [B*T, row] activations (row = hidden size) ----------------------------
  // out = x * keep / (1 - p); element index within a sample is drop.index_base + (n % T) *
  // row + c, sample is drop.sample_base + n / T. With p = 0 it is a copy.
  virtual void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop) = 0;
  virtual void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop) = 0;  // =

  // ---- softmax cross-entropy over a (vocab-parallel) logit shard ------------------------
  // logits: [N, Vl] holding vocab ids [vocab_start, vocab_start + Vl); only the first
  // `vocab_valid` columns are real vocabulary (the rest is padding and never counts).
  // targets: I32 [N]; a negative target is ignored (loss 0, no gradient, not counted).
  // Three phases so tensor parallelism can all-reduce between them (MAX, SUM, SUM):
  //   1. row_max = max over valid columns; target_logit = logit of the target when this
  //      shard owns it, else 0.                                                  (f32 [N] =)
  //   2. sumexp = sum over valid columns of exp(logit - row_max)                 (f32 [N] =)
  //   3. losses = log(sumexp) + row_max - target_logit (0 when ignored);
  //      correct = 1 when target_logit >= row_max (top-1 hit), else 0;          (f32 [N] =)
  //      logits are overwritten by grad_scale * (softmax - onehot(target)), 0 in padding.
  virtual void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                          int64_t vocab_valid, const Tensor& row_max, const Tensor& target_logit) = 0;
  virtual void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max,
                           const Tensor& sumexp) = 0;
  virtual void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                              int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp,
                              const Tensor& target_logit, const Tensor& losses,
                              const Tensor& correct, float grad_scale) = 0;
  // The greedy draw of each row with the logits left on the device (a decoding step then
  // brings B ids to the host, not B x Vl logits): ids[r] (I32 [R]) = the first column of
  // the largest logit among columns [0, vocab_valid) of row r of logits [R, Vl] (the rest is
  // padding; 1 <= vocab_valid), values[r] (f32 [R]) = that logit. Ties go to the lower
  // column, as most_likely's and sample_token's greedy draw on the host; NaN never wins (a
  // row of NaN gives column 0).
  virtual void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values,
                             const Tensor& ids) = 0;
  // A decoding step's sampled draw with the logits left on the device: ids[r] (I32 [R], R =
  // draws.size()) = the token that draws[r].uniform draws from the first vocab_valid
  // columns of row r under core/token_draw.h's rule (temperature > 0, top_k, draws[r].top_p).
  // logits is [S R, Vl]: S segments of R rows, row r's columns k Vl .. k Vl + Vl - 1 in row
  // k R + r (S = 1: plain rows; S = tp: a vocab-parallel TP group's logits gathered
  // rank-major); 1 <= vocab_valid <= S Vl. The CPU backend runs draw_token itself; a GPU
  // sums the weights in float, so its token may differ where the uniform lies within ~1e-6
  // of a boundary between two.
  virtual void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                             const std::vector<RowDraw>& draws, const Tensor& ids) = 0;

  // ---- optimizer and reductions -------------------------------------------------------
  virtual void adamw(const AdamWArgs& a) = 0;
  virtual double sum_squares(const Tensor& t) = 0;  // sum of x^2 in double, to the host
  virtual double sum(const Tensor& t) = 0;          // sum of x in double, to the host
  virtual bool has_inf_or_nan(const Tensor& t) = 0;
  // The elements equal to zero (-0 included, NaN not) over all the tensors, to the host
  // (Megatron's --log-num-zeros-in-grad).
  virtual int64_t count_zeros_multi(const std::vector<Tensor>& list) = 0;
  // Magnitude statistics over all the elements of the tensors, to the host (Megatron-
  // DeepSpeed's --log-optimizer-states-to-tensorboard): sums in double, the maximum of |x|
  // exact; a NaN element makes sum_abs and max_abs NaN. All zero for no elements.
  virtual MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list) = 0;

  // ---- fused ops ------------------------------------------------------------------------
  // Each has a default made of the ops above: that composition is its meaning, and the CPU
  // backend uses it. A device backend overrides it with fewer passes over memory (one
  // kernel, or a cuBLASLt epilogue) that computes the same up to the rounding noted.

  // resid = x + branch (rounded to resid's dtype), then layernorm_forward(resid, ...) with
  // the statistics of the rounded resid: the residual add in front of every pre-LN
  // LayerNorm, one pass instead of two. `resid` may alias x.
  virtual void residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid,
                                          const Tensor& gamma, const Tensor& beta, const Tensor& out,
                                          const Tensor& mean, const Tensor& rstd);
  // residual_layernorm_forward of x and dropout_forward(branch, T, drop): the dropout on the
  // residual branch (Megatron's bias-dropout-add) in the same pass. `branch` is consumed:
  // the composition drops it in place, a fused kernel leaves it as it was.
  virtual void dropout_residual_layernorm_forward(const Tensor& x, const Tensor& branch, int T,
                                                  const DropoutKey& drop, const Tensor& resid, const Tensor& gamma,
                                                  const Tensor& beta, const Tensor& out, const Tensor& mean,
                                                  const Tensor& rstd);
  // dropout_backward(dout, dx, T, drop) then bias_backward(dx, dbias): the gradient of a
  // row-parallel projection's output through the hidden dropout, and its bias gradient,
  // in one pass over dout.
  virtual void dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx,
                                     const Tensor& dbias);
  // xent_stats then xent_sumexp, for a TP group of one (nothing to all-reduce between
  // them): one pass over the logits instead of two. A fused kernel may sum the
  // exponentials with a running max (rescaled as it grows): the same sum up to rounding.
  virtual void xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                 int64_t vocab_valid, const Tensor& row_max, const Tensor& target_logit,
                                 const Tensor& sumexp);
  // The MLP's up-projection with its activation: pre = op(a) op(b) + bias (=, bias may be
  // empty), out = gelu(pre) (=) of the given form. A fused GEMM may apply gelu to the fp32
  // accumulator before pre is rounded to its dtype.
  virtual void matmul_bias_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b,
                                const Tensor& bias, bool trans_a, bool trans_b, Gelu form);
  // Its backward through the activation: dpre = (op(a) op(b)) * gelu'(pre)  (=). A fused
  // GEMM may multiply the fp32 accumulator before rounding.
  virtual void matmul_gelu_backward(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre,
                                    bool trans_a, bool trans_b, Gelu form);
  // A linear layer's parameter gradients from its output gradient dout [M, out] and input
  // x [M, in]: dw [out, in] += dout^T x, and dbias [out] += the column sums of dout (no bias
  // gradient when dbias is empty). matmul then bias_backward; a fused GEMM may sum dbias
  // from the tiles of dout it loads for dw (cuBLASLt's BGRADB epilogue lost to the two
  // ops on an H200: kernels/cuda/PERFORMANCE.md, 2026-12-04).
  virtual void linear_param_grads(const Tensor& dout, const Tensor& x, const Tensor& dw, const Tensor& dbias);
  // adamw() on every element of `list`, in few launches on a device (multi-tensor apply).
  // Every element must share lr, betas, eps, grad_scale and step; weight_decay may differ.
  virtual void adamw_multi(const std::vector<AdamWArgs>& list);
  // Sum over the tensors of sum_squares(t), in double, with one synchronisation.
  virtual double sum_squares_multi(const std::vector<Tensor>& list);

 protected:
  // Every derived destructor calls this first: the cache frees through raw_free, which
  // must still be callable.
  void release_all_memory() { allocator_.reset(); }
  // Instead, on the way to ending the process after an error: the device memory is left to
  // the process's end (freeing it may wait for work that never finishes).
  void abandon_all_memory() { (void)allocator_.release(); }

 private:
  Device device_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace trident
