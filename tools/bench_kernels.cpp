// trident-bench --kernels (see bench_kernels.h).
//
// Method (the device README's METHOD.md): random inputs, never zeros; warm-up calls
// first; each op timed with CUDA events on the backend's compute stream over a batch of
// calls, three batches, the median batch reported. Inputs are several times the 60 MB L2
// so the memory-bound ops measure device memory. Each row's work is counted as the fewest
// bytes the op must move (every input read once, every output written once, "+="
// outputs read and written) or, for GEMM and attention, its arithmetic:
//   GEMM 2*M*N*K; causal attention forward 4*B*H*T*T*D/2 and backward 2.5x that
//   (flash-attention's convention), so forward+backward is 3.5x the forward.
// The "of peak" column compares with the ceilings measured at the start of the same run:
// a 1 GiB device-to-device copy (bytes read + written) and an 8192^3 bf16 GEMM.
#include "tools/bench_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/attn_dropout_mask.h"
#include "core/backend.h"
#include "core/dtype.h"
#include "kernels/backends.h"
#include "tools/kernel_rows.h"
#include "tools/with_env.h"

#ifdef TRIDENT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_backend.h"
#endif

namespace trident {

#ifndef TRIDENT_HAVE_CUDA

int run_kernel_bench(const KernelBenchOptions&) {
  std::printf("trident-bench: no GPU: this build has no CUDA backend; kernel benchmarks skipped\n");
  return 0;
}

#else

namespace {

#define BENCH_CUDA_CHECK(call)                                                                          \
  do {                                                                                                  \
    const cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "trident-bench: CUDA error %s in %s (%s:%d)\n", cudaGetErrorString(e_), #call, \
                   __FILE__, __LINE__);                                                                 \
      std::abort();                                                                                     \
    }                                                                                                   \
  } while (0)

class Timer {
 public:
  explicit Timer(cudaStream_t s) : s_(s) {
    BENCH_CUDA_CHECK(cudaEventCreate(&a_));
    BENCH_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  // Median over `reps` batches of milliseconds per call; `calls` calls per batch.
  double ms(const std::function<void()>& f, int calls, int reps = 3, int warmup = 2) {
    for (int i = 0; i < warmup; ++i) f();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      BENCH_CUDA_CHECK(cudaEventRecord(a_, s_));
      for (int i = 0; i < calls; ++i) f();
      BENCH_CUDA_CHECK(cudaEventRecord(b_, s_));
      BENCH_CUDA_CHECK(cudaEventSynchronize(b_));
      float e = 0;
      BENCH_CUDA_CHECK(cudaEventElapsedTime(&e, a_, b_));
      t.push_back(static_cast<double>(e) / calls);
    }
    BENCH_CUDA_CHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// Random values in [lo, hi) (or ints in [0, int_hi)) uploaded in chunks: a host block of
// at most 4M elements, tiled over the tensor with a different offset per chunk.
void randomize(Backend& be, const Tensor& t, float lo = -1.f, float hi = 1.f, int32_t int_hi = 0) {
  std::mt19937 rng(12345u + static_cast<unsigned>(t.numel()));
  const int64_t n = t.numel(), block = std::min<int64_t>(n, int64_t{1} << 22);
  const size_t es = dtype_size(t.dtype);
  std::vector<unsigned char> host(static_cast<size_t>(block + 1024) * es);
  if (t.dtype == DType::I32) {
    std::uniform_int_distribution<int32_t> d(0, std::max(int_hi, 1) - 1);
    for (int64_t i = 0; i < block + 1024; ++i) reinterpret_cast<int32_t*>(host.data())[i] = d(rng);
  } else {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < block + 1024; ++i) store_from_float(host.data(), t.dtype, i, d(rng));
  }
  for (int64_t off = 0, k = 0; off < n; off += block, ++k) {
    const int64_t len = std::min(block, n - off);
    const Tensor dst(static_cast<char*>(t.data) + off * es, Shape{len}, t.dtype, t.device);
    be.copy_from_host(dst, host.data() + static_cast<size_t>((k * 61) % 1024) * es);
  }
}

struct Row {
  std::string name, shape;
  double ms = 0;
  double work = 0;   // bytes or FLOPs per call
  bool flops = false;
  std::string error;  // not empty: the op threw
  int number = 0;        // the measured row's number (KernelRowBook); 0: a row computed from others
  bool settled = false;  // its outcome came without running it (a rerun's earlier row, a skipped one)
};

// The environment settings ("VAR=value ...") that make one kernel group fastest, each
// group a list of timed settings in which "" is the default. A setting replaces the default
// only when it is at least 3% faster (less is within the run-to-run noise). Printed by
// --kernels for tools/gpu-check.sh, which trains once more with them.
struct TileCandidate {
  std::string env;
  double ms = 0;
};
std::string fastest_tiles(const std::vector<const std::vector<TileCandidate>*>& groups) {
  std::string env;
  for (const auto* group : groups) {
    const auto dflt = std::find_if(group->begin(), group->end(), [](const TileCandidate& c) { return c.env.empty(); });
    if (dflt == group->end()) continue;  // the default failed: nothing to compare with
    const TileCandidate* best = &*dflt;
    for (const TileCandidate& c : *group)
      if (c.ms < best->ms) best = &c;
    if (best->ms <= 0.97 * dflt->ms) env += (env.empty() ? "" : " ") + best->env;
  }
  return env.empty() ? "defaults" : env;
}

double rate(const Row& r) { return r.work / (r.ms * 1e-3) / (r.flops ? 1e12 : 1e9); }

// Each row is printed as soon as it is measured (stdout line-buffered): a CUDA error that
// aborts the process, or gpu-check's timeout, then costs only the rows after it.
class Bench {
 public:
  Bench(Backend& be, cudaStream_t s, const KernelBenchOptions& opt)
      : be_(be),
        timer_(s),
        quick_(opt.quick),
        once_(opt.once),
        only_(opt.only),
        book_(opt.progress, opt.results, opt.resume, opt.skip) {
    // Test hook: TRIDENT_TEST_CRASH_IN_ROW=<n> aborts the process in row n, as a CUDA error
    // would (tests/e2e/bench_kernels.sh checks --kernels-progress and --kernels-resume so).
    if (const char* v = std::getenv("TRIDENT_TEST_CRASH_IN_ROW")) crash_in_row_ = std::atoi(v);
    note_progress("");  // no row yet
  }

  Buffer rnd(Shape s, DType t, float lo = -1.f, float hi = 1.f) {
    Buffer b = be_.empty(s, t);
    randomize(be_, b, lo, hi);
    return b;
  }
  Buffer ints(Shape s, int32_t hi) {
    Buffer b = be_.empty(s, DType::I32);
    randomize(be_, b, 0, 0, hi);
    return b;
  }
  // Times f: a failing op (a shape check, say) gives its row an error, not the table. Rows
  // are numbered in the order measured, for --kernels-progress and --kernels-resume.
  Row measure(const std::string& name, const std::string& shape, double work, bool flops,
              const std::function<void()>& f, int calls) {
    Row r{name, shape, 0, work, flops, ""};
    r.number = row_number_ = book_.next_row();
    if (const std::optional<RowOutcome> known = book_.settled(r.number, qualified(name), is_peak(name))) {
      r.ms = known->ms;
      r.error = known->error;
      r.settled = true;
      return r;
    }
    note_progress(name);
    if (row_number_ == crash_in_row_) std::abort();
    try {
      r.ms = once_ ? timer_.ms(f, 1, 1, 0) : timer_.ms(f, quick_ ? 2 : calls, quick_ ? 1 : 3);
      be_.synchronize();
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    note_progress("");
    return r;
  }
  void add(const std::string& name, const std::string& shape, double work, bool flops,
           const std::function<void()>& f, int calls) {
    push(measure(name, shape, work, flops, f, calls));
  }
  // Keeps a finished row and prints it. The ceilings ("peak: ..." rows) come first and set
  // the "of peak" column's reference for the rows after them (0 without them).
  void push(const Row& r) {
    rows_.push_back(r);
    if (r.number > 0) book_.record(r.number, {r.ms, r.error});
    const bool ok = r.error.empty() && r.ms > 0;
    if (ok && is_peak(r.name)) (r.flops ? peak_fl_ : peak_bw_) = rate(r);
    if (silent()) return;
    if (!ok) {
      std::printf("%-28s %-34s FAILED: %s\n", r.name.c_str(), r.shape.c_str(), r.error.c_str());
      return;
    }
    const double v = rate(r);
    char achieved[32];
    std::snprintf(achieved, sizeof(achieved), r.flops ? "%.1f TF/s" : "%.0f GB/s", v);
    const double peak = r.flops ? peak_fl_ : peak_bw_;
    std::printf("%-28s %-34s %10.4f %12s %8.1f%%\n", r.name.c_str(), r.shape.c_str(), r.ms, achieved,
                peak > 0 ? 100.0 * v / peak : 0.0);
  }
  // Runs one section's setup and rows: a throw there (a shape check, an allocation) costs
  // that section a FAILED row, not the table.
  void section(const std::string& name, const std::function<void()>& body) {
    if (!only_.empty() && name.find(only_) == std::string::npos) return;
    section_ = name;
    try {
      body();
    } catch (const std::exception& e) {
      push({name, "(setup)", 0, 0, false, e.what()});
    }
    section_.clear();
  }
  // The ceilings' rows ("peak: ..."), the reference of the "of peak" column.
  static bool is_peak(const std::string& row) { return row.rfind("peak: ", 0) == 0; }
  // A rerun (--kernels-resume) before the row the run before died in: nothing is printed.
  bool silent() const { return book_.silent(row_number_); }
  // --kernels-progress: "<row number> <section>: <row name>" while a row is measured, empty
  // between rows, so that a run that dies outside every row (a section's setup, a check) names none.
  void note_progress(const std::string& row) const {
    book_.note_progress(row_number_, row.empty() ? row : qualified(row));
  }
  // A row's name in its section ("attention D64: attn fwd, wgmma"), as --kernels-progress gives
  // it and --kernels-skip takes it: the head dims' sections have rows of the same names.
  std::string qualified(const std::string& row) const { return section_.empty() ? row : section_ + ": " + row; }
  // Whether every row's outcome is known (the choices across the table need them all).
  bool complete() const { return book_.complete(); }
  std::vector<std::string> unmatched_skips() const { return book_.unmatched_skips(); }
  const std::vector<Row>& rows() const { return rows_; }
  double peak_bw() const { return peak_bw_; }
  double peak_fl() const { return peak_fl_; }
  Backend& be() { return be_; }
  bool quick() const { return quick_; }

 private:
  Backend& be_;
  Timer timer_;
  bool quick_, once_;
  std::string only_, section_;  // section_: the one running
  KernelRowBook book_;
  int row_number_ = 0, crash_in_row_ = 0;
  std::vector<Row> rows_;
  double peak_bw_ = 0, peak_fl_ = 0;
};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) {
    if (!s.empty()) s.push_back('x');
    s.append(std::to_string(v));
  }
  return s;
}

// Per head dim, the timed settings of the forward and of the backward (fastest_tiles).
using AttentionCandidates = std::map<int, std::pair<std::vector<TileCandidate>, std::vector<TileCandidate>>>;

// What the table's sections share, built once by run_kernel_bench (smaller inputs under
// --kernels-quick), and the sections.
struct BenchContext {
  Bench& b;                       // the table: measures, numbers and prints the rows
  Backend& be;                    // the CUDA backend the rows run on
  const KernelBenchOptions& opt;  // the options (--kernels-once, --kernels-resume, ...)
  const CudaStreamRef& ref;       // be's device and stream
  bool q;                         // --kernels-quick: small inputs
  DType bf;                       // bf16, the activations' type
  int64_t G;                      // the square GEMMs' M = N = K
  int64_t tok;                    // GPT-2 1.3B: tokens (8 x 1024)
  int64_t C;                      // GPT-2 1.3B: hidden size
  int64_t V;                      // GPT-2 1.3B: vocabulary (padded)
  int64_t rows;                   // the memory-bound ops' activations: [rows, C]
  double act;                     // bytes of one [rows, C] bf16 tensor

  // The sections, in the table's order.
  void bench_ceilings() const;
  void bench_gemms() const;
  void bench_layernorm() const;
  void bench_bias_gelu() const;
  void bench_optimizer() const;
  void bench_cross_entropy_embedding() const;
  void bench_attention(AttentionCandidates& candidates) const;
  void bench_attention_decode() const;
};

// One GEMM row, in a section of its name: out[M, N] = a[M, K] w[N, K]^T in type t, run on `on`.
void gemm_row(Bench& b, const std::string& name, int64_t M, int64_t N, int64_t K, DType t, Backend& on, int calls) {
  b.section(name, [&] {
    Buffer a = b.rnd(Shape{M, K}, t), w = b.rnd(Shape{N, K}, t), out = on.empty(Shape{M, N}, t);
    b.add(name, dims({M, N, K}) + " " + dtype_name(t), 2.0 * M * N * K, true,
          [&] { on.matmul(out, a, w, Tensor(), false, true, false); }, calls);
  });
}

// ---- ceilings: device copy (bandwidth) and a large bf16 GEMM (FLOP/s) ----------------
// The rows "peak: device copy" and "peak: GEMM bf16", the "of peak" column's references.
void BenchContext::bench_ceilings() const {
  b.section("device copy", [&] {
    const int64_t n = q ? (int64_t{1} << 22) : (int64_t{1} << 28);  // f32: 1 GiB
    Buffer src = b.rnd(Shape{n}, DType::F32), dst = be.empty(Shape{n}, DType::F32);
    b.add("peak: device copy", dims({n}) + " f32", 2.0 * n * 4, false, [&] { be.copy(dst, src); }, 20);
  });
  gemm_row(b, "peak: GEMM bf16", G, G, G, bf, be, 20);
}

// The GEMM rows: fp16, fp32 with and without TF32, GPT-2 1.3B's shapes and epilogues, decoding's, a layer's.
void BenchContext::bench_gemms() const {
  gemm_row(b, "GEMM fp16", G, G, G, DType::F16, be, 20);
  gemm_row(b, "GEMM fp32 (TF32)", G, G, G, DType::F32, be, 10);
  b.section("GEMM fp32 (no TF32)", [&] {
    auto plain = make_cuda_backend(ref.device, {.allow_tf32 = false});
    Buffer a = b.rnd(Shape{G / 2, G / 2}, DType::F32), w = b.rnd(Shape{G / 2, G / 2}, DType::F32);
    Buffer out = plain->empty(Shape{G / 2, G / 2}, DType::F32);
    // The operands live on `be`'s allocator: same device, so the plain backend can read them.
    const cudaStream_t ps = static_cast<cudaStream_t>(cuda_stream_of(*plain).stream);
    Timer t(ps);
    const double ms = t.ms([&] { plain->matmul(out, a, w, Tensor(), false, true, false); }, q ? 2 : 5, q ? 1 : 3);
    plain->synchronize();
    out.reset();
    b.push({"GEMM fp32 (no TF32)", dims({G / 2, G / 2, G / 2}) + " f32", ms, 2.0 * (G / 2) * (G / 2) * (G / 2),
            true, ""});
  });

  gemm_row(b, "GEMM qkv (1.3b)", tok, 3 * C, C, bf, be, 20);
  gemm_row(b, "GEMM mlp up (1.3b)", tok, 4 * C, C, bf, be, 20);
  b.section("GEMM mlp up+bias+GELU", [&] {
    // The same GEMM with its bias and GELU in cuBLASLt's epilogue (forward), and the
    // backward GEMM into the activation's gradient with the DGELU epilogue; compare their
    // rows with "GEMM mlp up" (plus a separate gelu pass) to see what the fusion saves.
    Buffer x = b.rnd(Shape{tok, C}, bf), w = b.rnd(Shape{4 * C, C}, bf), bias = b.rnd(Shape{4 * C}, bf);
    Buffer pre = be.empty(Shape{tok, 4 * C}, bf), out = be.empty(Shape{tok, 4 * C}, bf);
    b.add("GEMM mlp up+bias+GELU", dims({tok, 4 * C, C}) + " bf16", 2.0 * tok * 4 * C * C, true,
          [&] { be.matmul_bias_gelu(pre, out, x, w, bias, false, true, Gelu::Tanh); }, 20);
    Buffer dy = b.rnd(Shape{tok, C}, bf), w2 = b.rnd(Shape{C, 4 * C}, bf);
    b.add("GEMM mlp dgelu (bwd)", dims({tok, 4 * C, C}) + " bf16", 2.0 * tok * 4 * C * C, true,
          [&] { be.matmul_gelu_backward(out, dy, w2, pre, false, false, Gelu::Tanh); }, 20);
    // The exact (erf) GELU's layers (--no-bias-gelu-fusion): cuBLASLt's epilogues are tanh-only,
    // so the GEMM with its bias epilogue, then the GELU kernel (and the backward likewise).
    b.add("GEMM mlp up+bias, erf GELU", dims({tok, 4 * C, C}) + " bf16", 2.0 * tok * 4 * C * C, true,
          [&] { be.matmul_bias_gelu(pre, out, x, w, bias, false, true, Gelu::Erf); }, 20);
    b.add("GEMM mlp, erf dgelu (bwd)", dims({tok, 4 * C, C}) + " bf16", 2.0 * tok * 4 * C * C, true,
          [&] { be.matmul_gelu_backward(out, dy, w2, pre, false, false, Gelu::Erf); }, 20);
  });
  gemm_row(b, "GEMM lm head (1.3b)", tok, V, C, bf, be, 10);
  b.section("GEMM decode", [&] {
    // Decoding's products, 8 rows (sequences) by a weight: cuBLASLt's, and the small-M GEMV
    // (TRIDENT_GEMM_GEMV=1). Bytes: the weight read once (what bounds them).
    struct Shape3 {
      const char* name;
      int64_t N, K;
    };
    for (const Shape3& g : {Shape3{"GEMM decode qkv (124m)", 2304, 768}, Shape3{"GEMM decode mlp down (124m)", 768, 3072},
                            Shape3{"GEMM decode mlp up (1.3b)", q ? 2048 : 8192, q ? 512 : 2048}}) {
      const int64_t M = 8;
      Buffer x = b.rnd(Shape{M, g.K}, bf), w = b.rnd(Shape{g.N, g.K}, bf, -0.02f, 0.02f);
      Buffer out = be.empty(Shape{M, g.N}, bf);
      const double bytes = 2.0 * g.N * g.K;
      const auto f = [&] { be.matmul(out, x, w, Tensor(), false, true, false); };
      b.add(g.name, dims({M, g.N, g.K}) + " bf16", bytes, false, f, 50);
      with_env("TRIDENT_GEMM_GEMV=1",
               [&] { b.add(std::string(g.name) + ", GEMV", dims({M, g.N, g.K}) + " bf16", bytes, false, f, 50); });
    }
  });
  b.section("GEMMs of a layer", [&] {
    // A gpt2-1.3b layer's twelve GEMMs as training runs them (forward; the activations'
    // gradients, the MLP's through DGELU; the weights' gradients accumulated in fp32), with the
    // heuristic's algorithms and with TRIDENT_GEMM_AUTOTUNE=1's (timed once a shape, on the
    // first call: the warm-up).
    Buffer x = b.rnd(Shape{tok, C}, bf), qkv = be.empty(Shape{tok, 3 * C}, bf), h = be.empty(Shape{tok, 4 * C}, bf);
    Buffer pre = be.empty(Shape{tok, 4 * C}, bf), y = be.empty(Shape{tok, C}, bf);
    Buffer w_qkv = b.rnd(Shape{3 * C, C}, bf, -0.02f, 0.02f), w_proj = b.rnd(Shape{C, C}, bf, -0.02f, 0.02f);
    Buffer w_fc = b.rnd(Shape{4 * C, C}, bf, -0.02f, 0.02f), w_fc2 = b.rnd(Shape{C, 4 * C}, bf, -0.02f, 0.02f);
    Buffer b_fc = b.rnd(Shape{4 * C}, bf, -0.02f, 0.02f);
    Buffer dw_qkv = be.zeros(Shape{3 * C, C}, DType::F32), dw_proj = be.zeros(Shape{C, C}, DType::F32);
    Buffer dw_fc = be.zeros(Shape{4 * C, C}, DType::F32), dw_fc2 = be.zeros(Shape{C, 4 * C}, DType::F32);
    const auto layer = [&] {
      be.matmul(qkv, x, w_qkv, Tensor(), false, true, false);
      be.matmul(y, x, w_proj, Tensor(), false, true, false);
      be.matmul_bias_gelu(pre, h, x, w_fc, b_fc, false, true, Gelu::Tanh);
      be.matmul(y, h, w_fc2, Tensor(), false, true, false);
      be.matmul(x, qkv, w_qkv, Tensor(), false, false, false);
      be.matmul(x, y, w_proj, Tensor(), false, false, false);
      be.matmul_gelu_backward(h, y, w_fc2, pre, false, false, Gelu::Tanh);
      be.matmul(x, h, w_fc, Tensor(), false, false, false);
      be.matmul(dw_qkv, qkv, x, Tensor(), true, false, true);
      be.matmul(dw_proj, y, x, Tensor(), true, false, true);
      be.matmul(dw_fc, h, x, Tensor(), true, false, true);
      be.matmul(dw_fc2, y, h, Tensor(), true, false, true);
    };
    const double flops = 3 * 2.0 * tok * C * C * (3 + 1 + 4 + 4);
    b.add("GEMMs of a layer (1.3b)", dims({tok, C}) + " bf16 x12", flops, true, layer, 5);
    with_env("TRIDENT_GEMM_AUTOTUNE=1",
             [&] { b.add("GEMMs of a layer, autotuned", dims({tok, C}) + " bf16 x12", flops, true, layer, 5); });
  });
}

// ---- memory-bound ops, bf16 activations [rows, C] -------------------------------------
// The "layernorm" rows: forward, backward, with the residual and dropout, and their opt-in kernels.
void BenchContext::bench_layernorm() const {
  b.section("layernorm", [&] {
    Buffer x = b.rnd(Shape{rows, C}, bf), out = be.empty(Shape{rows, C}, bf);
    Buffer g = b.rnd(Shape{C}, bf, 0.5f, 1.5f), beta = b.rnd(Shape{C}, bf);
    Buffer mean = be.empty(Shape{rows}, DType::F32), rstd = be.empty(Shape{rows}, DType::F32);
    b.add("layernorm fwd", dims({rows, C}) + " bf16", 2 * act + 8.0 * rows, false,
          [&] { be.layernorm_forward(x, g, beta, out, mean, rstd); }, 20);
    Buffer dout = b.rnd(Shape{rows, C}, bf), dx = b.rnd(Shape{rows, C}, bf);
    Buffer dg = be.zeros(Shape{C}, DType::F32), db = be.zeros(Shape{C}, DType::F32);
    // dout, x read; dx += (read and written); mean, rstd read.
    b.add("layernorm bwd", dims({rows, C}) + " bf16", 4 * act + 8.0 * rows, false,
          [&] { be.layernorm_backward(dout, x, g, mean, rstd, dx, dg, db); }, 20);
    // x and branch read, resid and out written.
    Buffer branch = b.rnd(Shape{rows, C}, bf), resid = be.empty(Shape{rows, C}, bf);
    b.add("residual+layernorm fwd", dims({rows, C}) + " bf16", 4 * act + 8.0 * rows, false,
          [&] { be.residual_layernorm_forward(x, branch, resid, g, beta, out, mean, rstd); }, 20);
    // The same with training's hidden dropout (0.1) on the branch, drawn in the pass (the
    // fused kernel leaves the branch as it was, so every call sees the same input).
    DropoutKey drop;
    drop.p = 0.1f;
    drop.seed = 7;
    b.add("dropout+residual+LN fwd", dims({rows, C}) + " bf16", 4 * act + 8.0 * rows, false,
          [&] { be.dropout_residual_layernorm_forward(x, branch, 1024, drop, resid, g, beta, out, mean, rstd); }, 20);
    // The forwards above have warps walk several rows (the default); the same with one row
    // per warp (TRIDENT_LN_FWD_ROWS_PER_WARP=1, read on every call), the older kernel.
    auto one_row = [&](const char* name, double work, const std::function<void()>& f) {
      with_env("TRIDENT_LN_FWD_ROWS_PER_WARP=1", [&] { b.add(name, dims({rows, C}) + " bf16", work, false, f, 20); });
    };
    one_row("layernorm fwd, row per warp", 2 * act + 8.0 * rows,
            [&] { be.layernorm_forward(x, g, beta, out, mean, rstd); });
    one_row("residual+LN fwd, row/warp", 4 * act + 8.0 * rows,
            [&] { be.residual_layernorm_forward(x, branch, resid, g, beta, out, mean, rstd); });
    one_row("dropout+res+LN, row/warp", 4 * act + 8.0 * rows, [&] {
      be.dropout_residual_layernorm_forward(x, branch, 1024, drop, resid, g, beta, out, mean, rstd);
    });
    // The plain forward's walking warps with their next rows in registers, not in flight to
    // shared memory (TRIDENT_LN_FWD_RING=0; the default before 2026-12-04): compare with
    // "layernorm fwd".
    with_env("TRIDENT_LN_FWD_RING=0", [&] {
      b.add("layernorm fwd, walking warps", dims({rows, C}) + " bf16", 2 * act + 8.0 * rows, false,
            [&] { be.layernorm_forward(x, g, beta, out, mean, rstd); }, 20);
    });
  });
}

// The "bias gradient" rows and the GELUs' (tanh and erf), forward and backward.
void BenchContext::bench_bias_gelu() const {
  b.section("bias gradient", [&] {
    // A projection's bias gradient (column sums of its output gradient), and training's
    // form: the output gradient through the hidden dropout (0.1) written in the same pass.
    Buffer dout = b.rnd(Shape{rows, C}, bf), dx = be.empty(Shape{rows, C}, bf);
    Buffer db = be.zeros(Shape{C}, bf);
    b.add("bias_backward", dims({rows, C}) + " bf16", act, false, [&] { be.bias_backward(dout, db); }, 20);
    DropoutKey drop;
    drop.p = 0.1f;
    drop.seed = 7;
    b.add("dropout+bias backward", dims({rows, C}) + " bf16", 2 * act, false,
          [&] { be.dropout_bias_backward(dout, 1024, drop, dx, db); }, 20);
  });
  // The tanh GELU's kernel, and the exact (erf) GELU's (--no-bias-gelu-fusion).
  for (const Gelu form : {Gelu::Tanh, Gelu::Erf}) {
    const std::string name = form == Gelu::Tanh ? "gelu" : "erf GELU";
    b.section(name, [&] {
      const int64_t n = rows * 4 * C;
      Buffer x = b.rnd(Shape{rows, 4 * C}, bf), out = be.empty(Shape{rows, 4 * C}, bf);
      b.add(name + " fwd", dims({rows, 4 * C}) + " bf16", 2.0 * n * 2, false,
            [&] { be.gelu_forward(x, out, form); }, 20);
      Buffer dout = b.rnd(Shape{rows, 4 * C}, bf);
      b.add(name + " bwd", dims({rows, 4 * C}) + " bf16", 3.0 * n * 2, false,
            [&] { be.gelu_backward(dout, x, out, form); }, 20);
    });
  }
}

// The optimizer's rows: "adamw", "adamw multi-tensor" and the passes over the "gradient buffer".
void BenchContext::bench_optimizer() const {
  b.section("adamw", [&] {
    const int64_t n = q ? (int64_t{1} << 22) : (int64_t{1} << 28);  // 268M parameters
    Buffer master = b.rnd(Shape{n}, DType::F32, -0.05f, 0.05f), grad = b.rnd(Shape{n}, bf, -1e-3f, 1e-3f);
    Buffer m = b.rnd(Shape{n}, DType::F32, -1e-4f, 1e-4f), v = b.rnd(Shape{n}, DType::F32, 0.f, 1e-6f);
    Buffer p = be.empty(Shape{n}, bf);
    AdamWArgs a;
    a.master = master;
    a.grad = grad;
    a.m = m;
    a.v = v;
    a.model_param = p;
    a.lr = 1e-4f;
    a.weight_decay = 0.1f;
    a.step = 10;
    // master, m, v read and written (24 bytes), bf16 grad read (2), bf16 param written (2).
    b.add("adamw", dims({n}) + " f32 state, bf16 grad", 28.0 * n, false, [&] { be.adamw(a); }, 10);
  });
  b.section("adamw multi-tensor", [&] {
    // The optimizer's real call: one adamw_multi over gpt2-124m's 148 parameter tensors
    // (fp32 grads, bf16 model copy), and the gradient norm's sum_squares_multi over them.
    std::vector<int64_t> sizes = {50304 * 768, 1024 * 768};
    for (int l = 0; l < 12; ++l)
      for (int64_t n : {768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768})
        sizes.push_back(n);
    sizes.push_back(768);
    sizes.push_back(768);
    if (q)
      for (int64_t& n : sizes) n = std::max<int64_t>(1, n / 16);
    int64_t total = 0;
    for (int64_t n : sizes) total += n;
    Buffer master = b.rnd(Shape{total}, DType::F32, -0.05f, 0.05f), grad = b.rnd(Shape{total}, DType::F32, -1e-3f, 1e-3f);
    Buffer m = b.rnd(Shape{total}, DType::F32, -1e-4f, 1e-4f), v = b.rnd(Shape{total}, DType::F32, 0.f, 1e-6f);
    Buffer p = be.empty(Shape{total}, bf);
    std::vector<AdamWArgs> list;
    std::vector<Tensor> grads;
    int64_t off = 0;
    for (const int64_t n : sizes) {
      AdamWArgs a;
      a.master = master.t().flat_slice(off, n);
      a.grad = grad.t().flat_slice(off, n);
      a.m = m.t().flat_slice(off, n);
      a.v = v.t().flat_slice(off, n);
      a.model_param = p.t().flat_slice(off, n);
      a.lr = 1e-4f;
      a.weight_decay = n > 3072 ? 0.1f : 0.0f;
      a.step = 10;
      list.push_back(a);
      grads.push_back(a.grad);
      off += n;
    }
    const std::string shape = std::to_string(list.size()) + " tensors, " + std::to_string(total) + " elements";
    // master, m, v read and written, f32 grad read (28), bf16 param written (2).
    b.add("adamw multi-tensor", shape, 30.0 * total, false, [&] { be.adamw_multi(list); }, 10);
    b.add("grad norm (sum_squares_multi)", shape + " f32", 4.0 * total, false,
          [&] { be.sum_squares_multi(grads); }, 10);
    // --log-optimizer-states-to-tensorboard's pass over one of the three f32 states.
    b.add("magnitude stats (optimizer states)", shape + " f32", 4.0 * total, false,
          [&] { be.magnitude_stats_multi(grads); }, 10);
  });
  b.section("gradient buffer", [&] {
    // The per-step passes over the whole flat bf16 gradient (the training default): zeroing
    // before the step, the norm for clipping, the inf/NaN check of the loss scaler.
    const int64_t n = q ? (int64_t{1} << 22) : (int64_t{1} << 28);
    Buffer g = b.rnd(Shape{n}, bf, -1e-3f, 1e-3f);
    const std::vector<Tensor> pieces = {g.t().flat_slice(0, n / 3), g.t().flat_slice(n / 3, n - n / 3)};
    b.add("grad norm (sum_squares_multi)", dims({n}) + " bf16, 2 pieces", 2.0 * n, false,
          [&] { be.sum_squares_multi(pieces); }, 10);
    b.add("inf/nan check", dims({n}) + " bf16", 2.0 * n, false, [&] { be.has_inf_or_nan(g); }, 10);
    b.add("zero grads (fill 0)", dims({n}) + " bf16", 2.0 * n, false, [&] { be.fill(g, 0.0f); }, 10);
  });
}

// The "cross-entropy" rows over the [N, V] logits and the "embedding" rows, forward and backward.
void BenchContext::bench_cross_entropy_embedding() const {
  b.section("cross-entropy", [&] {
    const int64_t N = q ? 1024 : 16384;
    Buffer logits = b.rnd(Shape{N, V}, bf, -4.f, 4.f), targets = b.ints(Shape{N}, static_cast<int32_t>(V - 47));
    Buffer mx = be.empty(Shape{N}, DType::F32), tl = be.empty(Shape{N}, DType::F32);
    Buffer se = be.empty(Shape{N}, DType::F32), loss = be.empty(Shape{N}, DType::F32);
    Buffer corr = be.empty(Shape{N}, DType::F32);
    const int64_t valid = V - 47;  // 50257 real tokens in the padded 50304
    // Three passes: stats and sum-exp read the logits, loss+grad reads and overwrites them.
    b.add("cross-entropy (3 phases)", dims({N, V}) + " bf16", 4.0 * N * V * 2, false,
          [&] {
            be.xent_stats(logits, targets, 0, valid, mx, tl);
            be.xent_sumexp(logits, valid, mx, se);
            be.xent_loss_grad(logits, targets, 0, valid, mx, se, tl, loss, corr, 1.0f / N);
          },
          10);
    // Training's path without tensor parallelism: phases 1 and 2 in one read.
    b.add("cross-entropy (2 passes)", dims({N, V}) + " bf16", 3.0 * N * V * 2, false,
          [&] {
            be.xent_stats_sumexp(logits, targets, 0, valid, mx, tl, se);
            be.xent_loss_grad(logits, targets, 0, valid, mx, se, tl, loss, corr, 1.0f / N);
          },
          10);
  });
  b.section("embedding", [&] {
    const int T = 1024;
    const int64_t N = rows;
    Buffer tokens = b.ints(Shape{N}, static_cast<int32_t>(V - 47));
    Buffer wte = b.rnd(Shape{V, C}, bf, -0.05f, 0.05f), wpe = b.rnd(Shape{T, C}, bf, -0.05f, 0.05f);
    Buffer out = be.empty(Shape{N, C}, bf);
    // wte rows and wpe rows read, out written (wpe is small and re-read from cache).
    b.add("embedding fwd", dims({N, C}) + " bf16", 2 * act + static_cast<double>(T) * C * 2, false,
          [&] { be.embedding_forward(tokens, wte, 0, wpe, T, out); }, 20);
    Buffer dout = b.rnd(Shape{N, C}, bf, -1e-3f, 1e-3f);
    Buffer dwte = be.zeros(Shape{V, C}, DType::F32), dwpe = be.zeros(Shape{T, C}, DType::F32);
    // dout read; the dwte rows of the distinct ids (f32) read and written; dwpe read and written.
    auto backward_bytes = [&](const std::vector<int32_t>& ids) {
      const double distinct = static_cast<double>(std::set<int32_t>(ids.begin(), ids.end()).size());
      return act + 2.0 * distinct * C * 4 + 2.0 * T * C * 4;
    };
    std::vector<int32_t> uniform_ids(static_cast<size_t>(N));
    be.copy_to_host(uniform_ids.data(), tokens);
    b.add("embedding bwd", dims({N, C}) + " bf16, f32 grads", backward_bytes(uniform_ids), false,
          [&] { be.embedding_backward(dout, tokens, 0, T, dwte, dwpe); }, 10);
    // Text is skewed ("," "the" "." are several per cent of GPT-2's tokens) and one block sums
    // each id's rows: Zipf (s = 1) over the vocabulary, whose commonest id is 1/H(V) ~ 9% of
    // the rows (~2900 of 32768 rows summed by one block).
    std::vector<int32_t> zipf_ids(static_cast<size_t>(N));
    std::vector<double> weights(static_cast<size_t>(V - 47));
    for (size_t r = 0; r < weights.size(); ++r) weights[r] = 1.0 / static_cast<double>(r + 1);
    std::discrete_distribution<int32_t> zipf(weights.begin(), weights.end());
    std::mt19937 gen(20261202);
    for (int32_t& id : zipf_ids) id = zipf(gen);
    Buffer zipf_tokens = be.empty(Shape{N}, DType::I32);
    be.copy_from_host(zipf_tokens, zipf_ids.data());
    b.add("embedding bwd, Zipf tokens", dims({N, C}) + " bf16, f32 grads", backward_bytes(zipf_ids), false,
          [&] { be.embedding_backward(dout, zipf_tokens, 0, T, dwte, dwpe); }, 10);
  });
}

// ---- attention, causal: gpt2-124m/345m's head dim 64 and gpt2-1.3b's 128 -------------
// The defaults (the wgmma kernels on an H100/H200), then the other kernels and tile shapes
// (AttnTiles in kernels/cuda/attention/attn_plans.cuh; the launchers read their environment variables at each
// call): the wgmma forward's 128-key tiles and the wgmma backward for D 64, the mma.sync
// kernels' defaults, 128-row forward blocks, doubled forward key tiles, double-buffered
// forward K/V, a double-buffered dK/dV kernel, the other dK/dV query tiles, (D 128) doubled
// dQ key tiles, and dQ added by the dK/dV kernel with atomics. The table ends with the
// fastest settings per head dim, which tools/gpu-check.sh trains with once more.

// The "attention D64" and "attention D128" rows: the defaults, then every opt-in kernel and tile shape.
void BenchContext::bench_attention(AttentionCandidates& candidates) const {
  auto attention = [&](int B, int T, int H, int D) {
    b.section("attention D" + std::to_string(D), [&] {
      AttentionShape s;
      s.B = q ? 2 : B;
      s.T = q ? 256 : T;
      s.H = q ? 4 : H;
      s.D = D;
      char shp_buf[64];
      std::snprintf(shp_buf, sizeof(shp_buf), "B%d T%d H%d D%d bf16", s.B, s.T, s.H, s.D);
      const std::string shp = shp_buf;
      Buffer qkv = b.rnd(Shape{s.B, s.T, 3 * s.H, s.D}, bf), out = be.empty(Shape{s.B, s.T, s.H, s.D}, bf);
      Buffer lse = be.empty(Shape{s.B, s.H, s.T}, DType::F32);
      Buffer dout = b.rnd(Shape{s.B, s.T, s.H, s.D}, bf), dqkv = be.empty(Shape{s.B, s.T, 3 * s.H, s.D}, bf);
      const DropoutKey nodrop;
      const double fwd = 4.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.D / 2;
      const int tile = D > 64 ? 32 : 64;  // the default key / query tile rows
      auto forward = [&] { be.attention_forward(qkv, out, lse, s, nodrop); };
      auto backward = [&] { be.attention_backward(dout, qkv, out, lse, dqkv, s, nodrop); };
      // The fastest setting of the forward, and of the backward (its variants and their
      // combinations each timed as a whole).
      std::vector<TileCandidate>& fwd_c = candidates[D].first;
      std::vector<TileCandidate>& bwd_c = candidates[D].second;
      // The defaults' results, for checking each variant's: a variant more than 5% of the
      // largest value away (bf16 variants differ by a few roundings; a broken kernel by
      // about the values themselves) gets an error row and is no candidate, so that it
      // cannot become the fastest setting that gpu-check trains with.
      auto host_copy = [&](const Buffer& buf) {
        const Tensor t = buf.t();
        std::vector<char> raw(t.nbytes());
        be.copy_to_host(raw.data(), t);
        std::vector<float> v(static_cast<size_t>(t.numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(raw.data(), t.dtype, i);
        return v;
      };
      // Not under --kernels-once, where every launch is one that Nsight Compute profiles.
      const bool check_variants = !opt.once;
      std::vector<float> ref_out, ref_dqkv;
      if (check_variants) {
        forward();
        backward();
        be.synchronize();
        ref_out = host_copy(out);
        ref_dqkv = host_copy(dqkv);
      }
      auto wrong = [&](const Buffer& got_buf, const std::vector<float>& ref) -> std::string {
        const std::vector<float> got = host_copy(got_buf);
        double worst = 0, largest = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          largest = std::max(largest, std::fabs(static_cast<double>(ref[i])));
          const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
          if (!(d <= worst)) worst = d;  // NaN included
        }
        if (worst <= 0.05 * largest) return "";
        return "wrong result: max |diff| " + std::to_string(worst) + " from the defaults' (largest " +
               std::to_string(largest) + ")";
      };
      // A row is printed once its check is done: an abort during the check loses that row.
      auto timed = [&](std::vector<TileCandidate>* group, const char* name, const std::string& env, double work,
                       const std::function<void()>& f, int calls) {
        Row r;
        with_env(env, [&] { r = b.measure(name, shp, work, true, f, calls); });
        if (check_variants && !r.settled && r.error.empty() && !env.empty()) {
          b.note_progress(name);  // a death in the check is the row's
          with_env(env, [&] { f(); });
          be.synchronize();
          r.error = group == &fwd_c ? wrong(out, ref_out) : wrong(dqkv, ref_dqkv);
          b.note_progress("");
        }
        if (group != nullptr && r.error.empty() && r.ms > 0) group->push_back({env, r.ms});
        b.push(r);
      };
      // The defaults (on an H100/H200 the wgmma kernels for D > 32), then the alternatives;
      // the mma.sync rows turn wgmma off explicitly.
      const std::string fmma = "TRIDENT_ATTN_FWD_WGMMA=0 ", bmma = "TRIDENT_ATTN_BWD_WGMMA=0 ";
      const std::string bdb = bmma + "TRIDENT_ATTN_BWD_DB=1", atomic = bmma + "TRIDENT_ATTN_BWD_ATOMIC=1";
      timed(&fwd_c, "attention fwd (causal)", "", fwd, forward, 20);
      const Row f = b.rows().back();
      timed(&bwd_c, "attention bwd (causal)", "", 2.5 * fwd, backward, 10);
      const Row g = b.rows().back();
      b.push(Row{"attention fwd+bwd (causal)", shp, f.ms + g.ms, 3.5 * fwd, true, f.error + g.error});
      // sm_90a only (an error row elsewhere): warpgroup MMA, its default keys (64) and 128.
      const std::string wgmma = "TRIDENT_ATTN_FWD_WGMMA=1";
      timed(&fwd_c, "attn fwd, wgmma", wgmma, fwd, forward, 20);
      timed(&fwd_c, "attn fwd, wgmma, 128 keys", wgmma + " TRIDENT_ATTN_FWD_BK=128", fwd, forward, 20);
      // Two warpgroups a block (128 query rows sharing each K and V tile), both key tiles.
      timed(&fwd_c, "attn fwd, wgmma, 2-wg", wgmma + " TRIDENT_ATTN_FWD_WG=2", fwd, forward, 20);
      timed(&fwd_c, "attn fwd, wgmma, 128k, 2-wg", wgmma + " TRIDENT_ATTN_FWD_BK=128 TRIDENT_ATTN_FWD_WG=2", fwd,
            forward, 20);
      // Warp-specialized (the default where wgmma runs): one thread streams K and V by TMA
      // into a ring, P V runs under the next tile's softmax (64-key tiles; D 64 also 128).
      timed(&fwd_c, "attn fwd, warp-specialized", "TRIDENT_ATTN_FWD_WS=1", fwd, forward, 20);
      if (D == 64)
        timed(&fwd_c, "attn fwd, warp-spec, 128 keys", "TRIDENT_ATTN_FWD_WS=1 TRIDENT_ATTN_FWD_BK=128", fwd, forward,
              20);
      timed(&bwd_c, "attn bwd, wgmma", "TRIDENT_ATTN_BWD_WGMMA=1", 2.5 * fwd, backward, 10);
      if (D == 64)  // the other dK/dV query tiles (32 fits 3 blocks an SM, the default 64 2)
        timed(&bwd_c, "attn bwd, wgmma, 32-q dK/dV", "TRIDENT_ATTN_BWD_WGMMA=1 TRIDENT_ATTN_DKDV_BQ=32", 2.5 * fwd,
              backward, 10);
      // The warp-specialized backward kernels (opt-ins): dQ (K and V by TMA into a ring, each
      // step's dS K under the next step's dS; D 128 by half tiles); at D 64 also dK/dV (Q and
      // dO by TMA into a ring), both, the dK/dV kernel by 32-query half stages (each half's
      // products under the next half's elementwise step) alone and with the dQ kernel.
      const std::string ws = "TRIDENT_ATTN_BWD_WS=1", ws_dq = "TRIDENT_ATTN_DQ_WS=1";
      if (D == 64) timed(&bwd_c, "attn bwd, warp-spec dK/dV", ws, 2.5 * fwd, backward, 10);
      timed(&bwd_c, "attn bwd, warp-spec dQ", ws_dq, 2.5 * fwd, backward, 10);
      if (D == 64) {
        const std::string halves = " TRIDENT_ATTN_DKDV_BQ=32";
        timed(&bwd_c, "attn bwd, warp-spec both", ws + " " + ws_dq, 2.5 * fwd, backward, 10);
        timed(&bwd_c, "attn bwd, warp-spec 32q", ws + halves, 2.5 * fwd, backward, 10);
        timed(&bwd_c, "attn bwd, warp-spec 32q both", ws + halves + " " + ws_dq, 2.5 * fwd, backward, 10);
        // ... and the dK/dV kernel computing dQ too, added by the copy engine's bulk f32 reduces
        // (FlashAttention-3's way; 5 tile products instead of 7, dQ not bitwise reproducible).
        timed(&bwd_c, "attn bwd, warp-spec bulk dQ", ws + " TRIDENT_ATTN_BWD_ATOMIC=1", 2.5 * fwd, backward, 10);
      }
      // FlashAttention-3's dK/dV block: 128 keys, two consumer warpgroups (240 registers a
      // thread by setmaxnreg) and a producer warpgroup; at D 64 the next step's scores under
      // this one's products. With the warp-specialized dQ kernel.
      timed(&bwd_c, "attn bwd, 2-consumer ws", ws + " TRIDENT_ATTN_BWD_WG=2 " + ws_dq, 2.5 * fwd, backward, 10);
      if (D == 64)  // ... computing dQ too, added by bulk f32 reduces: FlashAttention-3's backward
        timed(&bwd_c, "attn bwd, 2-consumer bulk dQ", ws + " TRIDENT_ATTN_BWD_WG=2 TRIDENT_ATTN_BWD_ATOMIC=1",
              2.5 * fwd, backward, 10);
      // dQ added by the wgmma dK/dV kernel with float atomics: 5 tile products instead of 7 (D 64).
      if (D == 64)
        timed(&bwd_c, "attn bwd, wgmma, atomic dQ", "TRIDENT_ATTN_BWD_WGMMA=1 TRIDENT_ATTN_BWD_ATOMIC=1", 2.5 * fwd,
              backward, 10);
      // Two warpgroups a block (128 rows sharing each streamed tile): the dQ kernel (K and V
      // loaded once for 128 queries), and at D 64 the dK/dV kernel too (Q and dO once for 128
      // keys; with atomic dQ, half the atomics).
      const std::string bwgmma = "TRIDENT_ATTN_BWD_WGMMA=1 ";
      timed(&bwd_c, "attn bwd, wgmma, 2-wg dQ", bwgmma + "TRIDENT_ATTN_DQ_WG=2", 2.5 * fwd, backward, 10);
      if (D == 64) {
        timed(&bwd_c, "attn bwd, wgmma, 2-wg dK/dV", bwgmma + "TRIDENT_ATTN_BWD_WG=2", 2.5 * fwd, backward, 10);
        timed(&bwd_c, "attn bwd, wgmma, 2-wg both", bwgmma + "TRIDENT_ATTN_BWD_WG=2 TRIDENT_ATTN_DQ_WG=2", 2.5 * fwd,
              backward, 10);
        timed(&bwd_c, "attn bwd, wgmma atomic, 2-wg", bwgmma + "TRIDENT_ATTN_BWD_ATOMIC=1 TRIDENT_ATTN_BWD_WG=2",
              2.5 * fwd, backward, 10);
      }
      const std::string wm2 = fmma + "TRIDENT_ATTN_FWD_WM=2",
                        bk2 = fmma + "TRIDENT_ATTN_FWD_BK=" + std::to_string(2 * tile),
                        fdb = "TRIDENT_ATTN_FWD_DB=1";
      timed(&fwd_c, "attn fwd, mma.sync", fmma, fwd, forward, 20);
      timed(&fwd_c, "attn fwd, 128-row blocks", wm2, fwd, forward, 20);
      timed(&fwd_c, "attn fwd, 2x key tiles", bk2, fwd, forward, 20);
      timed(&fwd_c, "attn fwd, 2 K/V buffers", fmma + fdb, fwd, forward, 20);
      timed(&fwd_c, "attn fwd, 128 rows, 2 bufs", wm2 + " " + fdb, fwd, forward, 20);
      timed(&fwd_c, "attn fwd, 2x keys, 2 bufs", bk2 + " " + fdb, fwd, forward, 20);
      // The dK/dV query tiles beside the default (32 for D 64 and 128): D 64 64, D 128 16.
      const std::string other_q = "TRIDENT_ATTN_DKDV_BQ=" + std::to_string(D > 64 ? 16 : 64);
      const std::string dqbk = "TRIDENT_ATTN_DQ_BK=" + std::to_string(2 * tile);
      timed(&bwd_c, "attn bwd, mma.sync", bmma, 2.5 * fwd, backward, 10);
      timed(&bwd_c, "attn bwd, dK/dV 2 buffers", bdb, 2.5 * fwd, backward, 10);
      timed(&bwd_c, "attn bwd, dK/dV other q tiles", bmma + other_q, 2.5 * fwd, backward, 10);
      if (D > 64) {
        timed(&bwd_c, "attn bwd, dQ 2x key tiles", bmma + dqbk, 2.5 * fwd, backward, 10);
        timed(&bwd_c, "attn bwd, 2 bufs, dQ 2x keys", bdb + " " + dqbk, 2.5 * fwd, backward, 10);
      }
      timed(&bwd_c, "attn bwd, atomic dQ", atomic, 2.5 * fwd, backward, 10);
      timed(&bwd_c, "attn bwd, atomic dQ, 2 bufs", atomic + " TRIDENT_ATTN_BWD_DB=1", 2.5 * fwd, backward, 10);
      timed(&bwd_c, "attn bwd, atomic dQ, other q", atomic + " " + other_q, 2.5 * fwd, backward, 10);
      // Training's default attention dropout (0.1): the kernels draw the mask with Philox.
      DropoutKey drop;
      drop.p = 0.1f;
      drop.seed = 1234;
      b.add("attn fwd+bwd, dropout 0.1", shp, 3.5 * fwd, true,
            [&] {
              be.attention_forward(qkv, out, lse, s, drop);
              be.attention_backward(dout, qkv, out, lse, dqkv, s, drop);
            },
            10);
      // ... with the mask saved by the forward and read by the backward (TRIDENT_ATTN_SAVE_MASK=1
      // in training): the backward's dK/dV and dQ passes read bits instead of drawing them.
      {
        const int64_t words = attn_mask_words(s.B, s.H, s.T);
        Buffer mask = be.empty(Shape{words}, DType::I32);
        AttentionShape m = s;
        m.dropout_mask = mask.t();
        const std::string label = shp + ", " + std::to_string(words * 4 >> 10) + " KiB mask";
        auto saved_mask_step = [&] {
          be.attention_forward(qkv, out, lse, m, drop);
          be.attention_backward(dout, qkv, out, lse, dqkv, m, drop);
        };
        b.add("attn fwd+bwd, dropout, saved mask", label, 3.5 * fwd, true, saved_mask_step, 10);
        // ... drawn ahead by a kernel of its own and read by the forward too
        // (TRIDENT_ATTN_MASK_AHEAD=1): no attention kernel runs Philox.
        with_env("TRIDENT_ATTN_MASK_AHEAD=1",
                 [&] { b.add("attn fwd+bwd, dropout, mask ahead", label, 3.5 * fwd, true, saved_mask_step, 10); });
        // The forwards alone, to tell what each way costs the forward from what it saves the
        // backward: the draws under the products, the draws and the stores of the saved mask,
        // and the mask kernel ahead with the forward's loads.
        b.add("attn fwd, dropout 0.1", shp, fwd, true, [&] { be.attention_forward(qkv, out, lse, s, drop); }, 20);
        b.add("attn fwd, dropout, saved mask", label, fwd, true, [&] { be.attention_forward(qkv, out, lse, m, drop); },
              20);
        with_env("TRIDENT_ATTN_MASK_AHEAD=1", [&] {
          b.add("attn fwd, dropout, mask ahead", label, fwd, true, [&] { be.attention_forward(qkv, out, lse, m, drop); },
                20);
        });
      }
      // Megatron's --reset-attention-mask: documents of 200 tokens (boundaries inside tiles;
      // 64 in the quick run, whose T 256 would otherwise hold one and a tail). The work
      // counted is what the documents see (each a causal sequence of its own): blocks that
      // straddle a boundary walk their first row's whole document, so the row reads below the
      // causal one; without the skip it would read about the documents' share of it.
      {
        const int kDocument = std::min(200, s.T / 4);
        std::vector<int32_t> starts(static_cast<size_t>(s.B) * s.T);
        for (size_t n = 0; n < starts.size(); ++n) starts[n] = static_cast<int>(n % s.T) / kDocument * kDocument;
        double pairs = 0;  // sum of L^2 / 2 over a sample's documents, as the causal rows count T^2 / 2
        for (int first = 0; first < s.T; first += kDocument) {
          const double length = std::min(kDocument, s.T - first);
          pairs += 0.5 * length * length;
        }
        Buffer starts_dev = be.empty(Shape{s.B * s.T}, DType::I32);
        be.copy_from_host(starts_dev, starts.data());
        AttentionShape d = s;
        d.document_starts = starts_dev.t();
        const double doc_fwd = 4.0 * s.B * s.H * s.D * pairs;
        b.add("attn fwd+bwd, documents of " + std::to_string(kDocument), shp, 3.5 * doc_fwd, true,
              [&] {
                be.attention_forward(qkv, out, lse, d, nodrop);
                be.attention_backward(dout, qkv, out, lse, dqkv, d, nodrop);
              },
              10);
      }
      // FlashAttention-2's published curves keep B * T at 16K tokens and vary T: the same
      // tokens as 4x longer sequences (4x the work; more of it in full, unmasked tiles), and
      // at head dim 64 as 16x (T 16384, the curves' longest point).
      auto longer = [&](int times, int calls) {
        if (q || s.B % times != 0) return;
        AttentionShape l = s;
        l.B = s.B / times;
        l.T = s.T * times;
        std::snprintf(shp_buf, sizeof(shp_buf), "B%d T%d H%d D%d bf16", l.B, l.T, l.H, l.D);
        Buffer lse_l = be.empty(Shape{l.B, l.H, l.T}, DType::F32);
        b.add("attention fwd+bwd, " + std::to_string(times) + "x T", shp_buf, times * 3.5 * fwd, true,
              [&] {
                be.attention_forward(qkv, out, lse_l, l, nodrop);
                be.attention_backward(dout, qkv, out, lse_l, dqkv, l, nodrop);
              },
              calls);
        if (times != 16) return;
        // The forward alone at the curves' longest point, by default (warp-specialized where
        // wgmma runs) and by the one-warpgroup wgmma kernel it replaced there.
        const auto forward_l = [&] { be.attention_forward(qkv, out, lse_l, l, nodrop); };
        b.add("attention fwd, 16x T", shp_buf, times * fwd, true, forward_l, calls);
        with_env("TRIDENT_ATTN_FWD_WS=0",
                 [&] { b.add("attn fwd, 1-wg wgmma, 16x T", shp_buf, times * fwd, true, forward_l, calls); });
      };
      longer(4, 5);
      if (D == 64) longer(16, 3);
    });
  };
  attention(16, 1024, 32, 64);
  attention(8, 1024, 16, 128);
}

// ---- attention over a KV cache: one decoding step (generation) ----------------------
// Memory-bound: the bytes are the caches' keys and values up to the position, read once
// (the query, the new rows and the output are 1/keys of it). Few (sequence, head) rows: the
// vector kernel splits each row's keys into ranges (cuda_attention_decode.cu). The calls
// take turns over copies of the caches that together pass 256 MB, so that each reads its
// caches from memory, not from the L2 (50 MB on an H100/H200), as the steps of a model's
// layers do.
// The "attn decode" rows: one step of generation over KV caches, by the vector kernel and the scalar one.
void BenchContext::bench_attention_decode() const {
  b.section("attn decode", [&] {
    auto step = [&](int B, int keys, int H, int D, const char* what) {
      const double bytes = 2.0 * B * keys * H * D * 2;
      const int copies = std::max(1, static_cast<int>(std::ceil(256e6 / bytes)));
      Buffer qkv = b.rnd(Shape{B, 3, H, D}, bf), out = be.empty(Shape{B, H, D}, bf);
      std::vector<Buffer> kc, vc;
      for (int i = 0; i < copies; ++i) {
        kc.push_back(b.rnd(Shape{B, keys, H, D}, bf));
        vc.push_back(b.rnd(Shape{B, keys, H, D}, bf));
      }
      int call = 0;
      b.add(std::string("attn decode, ") + what, "B" + std::to_string(B) + " pos " + std::to_string(keys - 1) +
                " H" + std::to_string(H) + " D" + std::to_string(D) + " bf16",
            bytes, false,
            [&] {
              const int i = call++ % copies;
              be.attention_decode(qkv, kc[i], vc[i], keys - 1, out);
            },
            20);
    };
    step(1, 1024, 12, 64, "124m x1");   // one sequence of gpt2-124m: 12 rows
    step(8, 640, 12, 64, "124m x8");    // trident-bench --generate's last step: 8 sequences at 512 + 128
    step(1, 2048, 16, 128, "1.3b x1");  // gpt2-1.3b at its longest context
    // The scalar kernel, which decoded every step before the vector kernel (2026-12-04).
    with_env("TRIDENT_ATTN_DECODE_SCALAR=1", [&] {
      step(1, 1024, 12, 64, "124m x1, scalar");
      step(8, 640, 12, 64, "124m x8, scalar");
    });
  });
}

}  // namespace

int run_kernel_bench(const KernelBenchOptions& opt) {
  if (!cuda_available()) {
    std::printf("trident-bench: no GPU visible; kernel benchmarks skipped\n");
    return 0;
  }
  // Line-buffered even into a file: every row is out before a later abort or a kill.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto backend = make_backend("cuda");
  const CudaStreamRef ref = cuda_stream_of(*backend);
  TRIDENT_CHECK(ref.valid(), "trident-bench: the CUDA backend has no stream");
  Backend& be = *backend;
  const cudaStream_t stream = static_cast<cudaStream_t>(ref.stream);
  Bench b(be, stream, opt);
  const bool q = opt.quick;
  const DType bf = DType::BF16;
  if (opt.resume == 0) {  // a rerun's rows continue the table of the run before
    std::printf("trident-bench --kernels on %s%s\n", be.name().c_str(), q ? " (quick: small inputs)" : "");
    std::printf("\n%-28s %-34s %10s %12s %9s\n", "kernel", "shape", "ms/call", "achieved", "of peak");
  }

  const int64_t G = q ? 1024 : 8192;
  // GPT-2 1.3B shapes: 8 x 1024 tokens, hidden 2048, vocabulary 50304 (padded).
  const int64_t tok = q ? 1024 : 8192, C = q ? 512 : 2048, V = q ? 4096 : 50304;
  const int64_t rows = q ? 4096 : 32768;
  const double act = static_cast<double>(rows) * C * 2;  // bytes of one [rows, C] bf16 tensor
  const BenchContext ctx{b, be, opt, ref, q, bf, G, tok, C, V, rows, act};

  ctx.bench_ceilings();
  ctx.bench_gemms();
  ctx.bench_layernorm();
  ctx.bench_bias_gelu();
  ctx.bench_optimizer();
  ctx.bench_cross_entropy_embedding();
  AttentionCandidates candidates;  // filled by bench_attention, read by the summary
  ctx.bench_attention(candidates);
  ctx.bench_attention_decode();

  // ---- the summary: the rows are out already ------------------------------------------
  // (--kernels-only leaves the peaks out: "of peak" then reads 0).
  std::printf("peaks measured in this run: device copy %.0f GB/s (read + write), bf16 GEMM %.1f TFLOP/s\n",
              b.peak_bw(), b.peak_fl());
  for (const std::string& s : b.unmatched_skips())
    std::printf("note: --kernels-skip \"%s\" named no row (a row's name is \"SECTION: ROW\")\n", s.c_str());
  // The choices below compare rows across the table: a rerun past a row knows the rows before
  // it from --kernels-results only; without it, it makes none (gpu-check then trains with the
  // defaults only).
  if (!b.complete()) {
    std::printf("no tile or opt-in choices: a rerun past row %d measures part of the table\n", opt.resume);
    return 0;
  }
  auto choice = [&](int D) {
    auto& groups = candidates[D];
    std::string line = "D";  // appended, not operator+: GCC 12 warns falsely (-Wrestrict) on the chain
    line += std::to_string(D);
    line += ": ";
    line += fastest_tiles({&groups.first, &groups.second});
    return line;
  };
  for (const auto& c : candidates) std::printf("fastest attention tiles, %s\n", choice(c.first).c_str());
  // The opt-in kernels (environment switches away from the defaults) against the rows they
  // would replace, by fastest_tiles' rule; gpu-check trains with the faster ones too, so
  // that one run says what making them the defaults gives.
  struct OptIn {
    const char* env;
    const char* row;
    const char* replaces;
  };
  const OptIn opt_ins[] = {{"TRIDENT_LN_FWD_RING=0", "layernorm fwd, walking warps", "layernorm fwd"},
                           {"TRIDENT_GEMM_AUTOTUNE=1", "GEMMs of a layer, autotuned", "GEMMs of a layer (1.3b)"},
                           {"TRIDENT_GEMM_GEMV=1", "GEMM decode qkv (124m), GEMV", "GEMM decode qkv (124m)"}};
  auto timed_ms = [&](const char* name) {
    for (const Row& r : b.rows())
      if (r.name == name && r.error.empty() && r.ms > 0) return r.ms;
    return 0.0;
  };
  std::vector<std::vector<TileCandidate>> opt_in_groups;
  for (const OptIn& o : opt_ins) {
    const double ms = timed_ms(o.row), replaced = timed_ms(o.replaces);
    if (ms > 0 && replaced > 0) opt_in_groups.push_back({{"", replaced}, {o.env, ms}});
  }
  std::vector<const std::vector<TileCandidate>*> opt_in_ptrs;
  for (const auto& g : opt_in_groups) opt_in_ptrs.push_back(&g);
  std::printf("faster opt-in kernels: %s\n", fastest_tiles(opt_in_ptrs).c_str());
  return 0;
}

#endif

}  // namespace trident
