// Attention over a KV cache (generation): the CUDA kernels (kernels/cuda/cuda_attention_decode.cu)
// against the CPU reference (cpu::attention_decode in kernels/cpu/cpu_attention.cpp), per
// dtype, on: one position (pos 0, Tmax 1), the 16B config's head dim (D = 120) and the
// largest one (D = 128 = the block's thread count), positions on both sides of the
// scalar kernel's 128-thread stride (127, 128, 255, 256) and up to 2099 (the longest GPT-2
// context is 2048), B*H from 1 to 48 rows (few rows: the vector kernel splits their keys
// into ranges, combined after), D = 12 (the scalar kernel in 16-bit types); and T > 1 new
// tokens a sequence (prefill, qkv [B, T, 3, H, D]) from position 0 and after cached
// positions, up to 2048 in one pass, and one split into ranges that hold none of the first
// queries' keys.
// Cache rows after the new ones hold NaN on both sides: reading one would poison the
// output.
//
// Checked: out within tolerance of the CPU; both caches byte-identical to the CPU's (rows
// pos .. pos + T - 1 are the tokens' K / V copied, nothing else written); the caches also
// equal the expected bytes computed here (old bytes, those rows replaced); two identical GPU calls give
// identical bytes; decoding a sequence step by step on the GPU matches the GPU's own full
// causal attention_forward row by row; a 16-bit prompt from position 0 equals that forward bit
// for bit (the launcher's flash prefill); sequences at positions of their own; the cases
// again under TRIDENT_ATTN_DECODE_SCALAR=1 (the scalar kernel everywhere); bad arguments
// throw InternalError.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|), inputs uniform in [-2, 2]:
//   fp32 rtol 1e-5, atol 2e-5     the same fp32 algorithm; only nvcc's fused multiply-adds in
//                                 the q.k dots, the device expf (2 ulp) and the order of the
//                                 sums differ: the block sum of exponentials, the vector
//                                 kernel's lane-group shuffles and per-group value sums, the
//                                 key ranges' rescaled partials (a few 1e-7 relative in each
//                                 weight, times |v| <= 2)
//   fp16 / bf16: storage_tol (two ulps of the output format + the fp32 terms above); a 16-bit
//                prompt from position 0 (the flash prefill, 16-bit probabilities) the
//                forward's tolerances as below.
// The measured worst differences are printed per dtype.
// Step by step vs the GPU's attention_forward: the forward's tolerances against the CPU in
// test_cuda_attention.cpp, doubled (fp32 2e-5 + 2e-5 max|ref|, fp16 4e-3 + 4e-3 max|ref|,
// bf16 2e-2 + 2e-2 max|ref|; rtol storage_tol(dt, 2e-4)), on inputs in [-1, 1] as there:
// each side is within its own tolerance of the same CPU value.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

struct DecodeCase {
  int B, Tmax, H, D;
  std::vector<int> positions;
  int T = 1;  // new tokens a sequence (T > 1: prefill)
};

std::string describe(const DecodeCase& c, int pos) {
  std::ostringstream os;
  os << "B=" << c.B << " Tmax=" << c.Tmax << " H=" << c.H << " D=" << c.D << " pos=" << pos << " T=" << c.T;
  return os.str();
}

const std::vector<DecodeCase>& cases() {
  static const std::vector<DecodeCase> v = {
      {1, 1, 1, 8, {0}},                      // a single position, smallest head dim, one block
      {3, 64, 5, 120, {0, 1, 31, 63}},        // the 16B config's head dim, 15 blocks
      {2, 300, 3, 64, {127, 128, 255, 256, 299}},  // around the 128-thread stride of the score loop
      {2, 2048, 4, 128, {1000, 2047}},        // D = 128 (every thread accumulates), 2048 context
      {1, 2100, 2, 120, {1999, 2099}},        // positions up to ~2000 at D = 120
      {2, 40, 24, 8, {39}},                   // 48 blocks, most threads idle in the output loop
      {2, 40, 3, 12, {0, 39}},                // 16-bit rows of 24 bytes: the scalar kernel
  };
  return v;
}

class CudaAttentionDecode : public CudaVsCpuDtype {
 protected:
  Tol out_tol() const { return storage_tol(dt(), 1e-5, 2e-5); }

  std::vector<float> uniform(size_t n, float lo = -2.f, float hi = 2.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  static std::vector<unsigned char> raw(Backend& be, const Tensor& t) {
    std::vector<unsigned char> b(t.nbytes());
    be.copy_to_host(b.data(), t);
    return b;
  }
  static std::vector<unsigned char> to_bytes(const std::vector<float>& v, DType t) {
    std::vector<unsigned char> b(v.size() * dtype_size(t));
    for (size_t i = 0; i < v.size(); ++i) store_from_float(b.data(), t, i, v[i]);
    return b;
  }
  // Worst |gpu - cpu| and |gpu - cpu| / |cpu| (|cpu| >= 1e-3) seen in this test.
  void note(const std::vector<float>& g, const std::vector<float>& c) {
    for (size_t i = 0; i < c.size(); ++i) {
      const double d = std::fabs(static_cast<double>(g[i]) - c[i]);
      worst_abs_ = std::max(worst_abs_, d);
      if (std::fabs(c[i]) >= 1e-3) worst_rel_ = std::max(worst_rel_, d / std::fabs(c[i]));
    }
  }
  void print_worst(const std::string& what) {
    std::printf("[ measured ] %s %s: max|gpu - cpu| %.3g, max rel %.3g\n", what.c_str(), dtype_name(dt()),
                worst_abs_, worst_rel_);
  }

  // One call on both backends with identical inputs; checks out and the caches. `first`:
  // per-row positions (sequence b's new tokens at first[b], pos their largest), or empty.
  void run(const DecodeCase& c, int pos, const std::vector<int32_t>& first = {}) {
    SCOPED_TRACE(describe(c, pos) + (first.empty() ? "" : " per-row positions"));
    const DType t = dt();
    const int T = c.T;
    const size_t C = static_cast<size_t>(c.H) * c.D, rows = static_cast<size_t>(c.B) * c.Tmax;
    const auto first_of = [&](int b) { return static_cast<size_t>(first.empty() ? pos : first[b]); };
    std::vector<float> k = uniform(rows * C), v = uniform(rows * C);
    for (int b = 0; b < c.B; ++b)  // rows after the new ones: NaN (never read, never written)
      for (size_t i = (static_cast<size_t>(b) * c.Tmax + first_of(b) + T) * C;
           i < (static_cast<size_t>(b) + 1) * c.Tmax * C; ++i)
        k[i] = v[i] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> q = uniform(static_cast<size_t>(c.B) * T * 3 * C);
    Pair qkv = upload(T == 1 ? Shape{c.B, 3, c.H, c.D} : Shape{c.B, T, 3, c.H, c.D}, t, q);
    Pair kc = upload(Shape{c.B, c.Tmax, c.H, c.D}, t, k), vc = upload(Shape{c.B, c.Tmax, c.H, c.D}, t, v);
    Pair out = filled(T == 1 ? Shape{c.B, c.H, c.D} : Shape{c.B, T, c.H, c.D}, t, 7.f);  // "=": the 7s must all go
    Pair per_row = ints(Shape{static_cast<int64_t>(first.size())}, first);
    const auto at = [&](const Buffer& r) { return first.empty() ? DecodePositions(pos) : DecodePositions(pos, r.t()); };
    cpu().attention_decode(qkv.cpu, kc.cpu, vc.cpu, at(per_row.cpu), out.cpu);
    gpu().attention_decode(qkv.gpu, kc.gpu, vc.gpu, at(per_row.gpu), out.gpu);
    gpu().synchronize();

    // A 16-bit prompt from position 0 takes the training forward's flash kernels, whose
    // probabilities are rounded to 16 bits before P V: the forward's tolerances of
    // test_cuda_attention.cpp, doubled as in StepByStepMatchesGpuAttentionForward.
    const bool flash = pos == 0 && first.empty() && T > 1 && t != DType::F32 && c.D % 8 == 0 && !scalar_;
    const std::vector<float> want = host_cpu(out);
    double mx = 0;
    for (float x : want) mx = std::max(mx, static_cast<double>(std::fabs(x)));
    const double f = t == DType::F16 ? 4e-3 : 2e-2;
    expect_close(out, flash ? Tol{storage_tol(t, 2e-4).rtol, f + f * mx} : out_tol(), "out");
    note(host_gpu(out), want);
    expect_identical(kc, "k_cache");
    expect_identical(vc, "v_cache");
    // Independently of the CPU: the old bytes with rows pos .. pos + T - 1 replaced by the
    // tokens' K / V.
    const size_t es = dtype_size(t);
    std::vector<unsigned char> want_k = to_bytes(k, t), want_v = to_bytes(v, t);
    const std::vector<unsigned char> qb = to_bytes(q, t);
    for (int b = 0; b < c.B; ++b)
      for (int j = 0; j < T; ++j) {
        const size_t row = (static_cast<size_t>(b) * c.Tmax + first_of(b) + j) * C * es;
        const size_t token = (static_cast<size_t>(b) * T + j) * 3 * C * es;
        std::memcpy(want_k.data() + row, qb.data() + token + C * es, C * es);
        std::memcpy(want_v.data() + row, qb.data() + token + 2 * C * es, C * es);
      }
    EXPECT_TRUE(raw(gpu(), kc.gpu) == want_k) << "gpu k_cache is not the old cache with the new rows replaced";
    EXPECT_TRUE(raw(gpu(), vc.gpu) == want_v) << "gpu v_cache is not the old cache with the new rows replaced";
  }

  double worst_abs_ = 0, worst_rel_ = 0;
  bool scalar_ = false;  // TRIDENT_ATTN_DECODE_SCALAR=1 is set: no flash prefill
};

TEST_P(CudaAttentionDecode, MatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (const DecodeCase& c : cases())
    for (int pos : c.positions) run(c, pos);
  print_worst("decode out");
}

// Several new tokens a sequence (prefill): a prompt from position 0 (in 16-bit types the
// flash forward's kernels, then the cache rows), chunks after cached positions (keys from the
// cache and from the chunk), a chunk that fills the cache, the longest context in one pass.
TEST_P(CudaAttentionDecode, PrefillMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const std::vector<DecodeCase> prefill = {
      {2, 64, 3, 64, {0}, 64},        // a whole prompt
      {3, 300, 2, 120, {100}, 150},   // after 100 cached positions, across the 128-thread stride
      {1, 40, 5, 8, {33}, 7},         // fills the cache
      {1, 2048, 2, 128, {0}, 2048},   // the longest GPT-2 context at D = 128
      {1, 400, 1, 64, {100}, 200},    // 200 rows, key ranges on GPUs of 51+ SMs: the first queries see none of the last
  };
  for (const DecodeCase& c : prefill)
    for (int pos : c.positions) run(c, pos);
  print_worst("prefill out");
}

// Sequences at positions of their own (prompts of different lengths, each decoding at its
// length; the launch planned from the largest, so the shorter rows leave key ranges empty):
// steps and chunks, a 16-bit chunk from position 0 for every sequence (per-row positions
// take the decode kernels, not the flash prefill), both kernels.
TEST_P(CudaAttentionDecode, PerRowPositionsMatchCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  run({4, 2048, 2, 64, {}}, 1500, {3, 1500, 0, 700});
  run({3, 400, 3, 120, {}, 5}, 390, {390, 17, 0});
  run({2, 64, 3, 64, {}, 16}, 0, {0, 0});
  {
    ScopedEnv scalar("TRIDENT_ATTN_DECODE_SCALAR", "1");
    run({4, 2048, 2, 64, {}}, 1500, {3, 1500, 0, 700});
  }
  print_worst("per-row positions out");
}

// TRIDENT_ATTN_DECODE_SCALAR=1 (gpu-check's "before"): the scalar kernel for every call, on
// the decoding cases and a prompt from position 0.
TEST_P(CudaAttentionDecode, ScalarKernelMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ScopedEnv scalar("TRIDENT_ATTN_DECODE_SCALAR", "1");
  scalar_ = true;
  for (const DecodeCase& c : cases())
    for (int pos : c.positions) run(c, pos);
  run({2, 64, 3, 64, {0}, 64}, 0);
  print_worst("scalar kernel out");
}

// A 16-bit prompt from position 0 is the training forward's attention, bit for bit (the
// launcher takes the flash kernels), and its K and V rows land in the caches.
TEST_P(CudaAttentionDecode, PromptFromPositionZeroIsTheForward) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 prompts take the decode kernels";
  for (const auto [B, T, H, D] : {std::array<int, 4>{2, 200, 3, 64}, std::array<int, 4>{1, 130, 2, 120}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                 " D=" + std::to_string(D));
    Pair qkv = random(Shape{B, T, 3, H, D}, dt(), -2.f, 2.f);
    Buffer kc = gpu().empty(Shape{B, T + 5, H, D}, dt()), vc = gpu().empty(Shape{B, T + 5, H, D}, dt());
    Buffer decoded = gpu().empty(Shape{B, T, H, D}, dt()), forward = gpu().empty(Shape{B, T, H, D}, dt());
    Buffer lse = gpu().empty(Shape{B, H, T}, DType::F32);
    gpu().attention_decode(qkv.gpu, kc, vc, 0, decoded);
    AttentionShape s;
    s.B = B;
    s.T = T;
    s.H = H;
    s.D = D;
    gpu().attention_forward(qkv.gpu, forward, lse, s, DropoutKey{});
    EXPECT_TRUE(raw(gpu(), decoded) == raw(gpu(), forward)) << "the prompt's attention is not the forward's";
    // The caches' first T rows of each sequence: the tokens' K and V.
    const std::vector<unsigned char> q = raw(gpu(), qkv.gpu), k = raw(gpu(), kc), v = raw(gpu(), vc);
    const size_t C = static_cast<size_t>(H) * D * dtype_size(dt());
    int wrong = 0;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < T; ++j) {
        const size_t at = (static_cast<size_t>(b) * (T + 5) + j) * C, token = (static_cast<size_t>(b) * T + j) * 3 * C;
        wrong += std::memcmp(k.data() + at, q.data() + token + C, C) != 0;
        wrong += std::memcmp(v.data() + at, q.data() + token + 2 * C, C) != 0;
      }
    EXPECT_EQ(wrong, 0) << "cache rows that are not the tokens' K / V";
  }
}

// Same inputs twice: the same bytes (fixed-order block reductions, no atomics).
TEST_P(CudaAttentionDecode, IsDeterministic) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int B = 2, Tmax = 2048, H = 3, D = 120, pos = 2047;
  Pair qkv = random(Shape{B, 3, H, D}, dt(), -2.f, 2.f);
  Pair kc = random(Shape{B, Tmax, H, D}, dt(), -2.f, 2.f), vc = random(Shape{B, Tmax, H, D}, dt(), -2.f, 2.f);
  Buffer o1 = gpu().empty(Shape{B, H, D}, dt()), o2 = gpu().empty(Shape{B, H, D}, dt());
  gpu().attention_decode(qkv.gpu, kc.gpu, vc.gpu, pos, o1);
  gpu().attention_decode(qkv.gpu, kc.gpu, vc.gpu, pos, o2);  // rewrites row pos with the same bytes
  EXPECT_TRUE(raw(gpu(), o1) == raw(gpu(), o2)) << "out differs between two identical calls";
}

// Generation's key property on the device: decoding positions 0..T-1 one token at a time
// gives the rows of the GPU's own full causal attention (no dropout) of the sequence.
TEST_P(CudaAttentionDecode, StepByStepMatchesGpuAttentionForward) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const DType t = dt();
  for (const auto [B, T, H, D] : {std::array<int, 4>{2, 70, 3, 64}, std::array<int, 4>{1, 130, 2, 120}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                 " D=" + std::to_string(D));
    const size_t C = static_cast<size_t>(H) * D, es = dtype_size(t);
    // Inputs in [-1, 1] as in test_cuda_attention.cpp, whose forward tolerances are used here.
    const std::vector<unsigned char> seq = to_bytes(uniform(static_cast<size_t>(B) * T * 3 * C, -1.f, 1.f), t);
    Buffer qkv = gpu().empty(Shape{B, T, 3 * H, D}, t);
    gpu().copy_from_host(qkv, seq.data());
    Buffer full = gpu().empty(Shape{B, T, H, D}, t), lse = gpu().empty(Shape{B, H, T}, DType::F32);
    AttentionShape s;
    s.B = B;
    s.T = T;
    s.H = H;
    s.D = D;
    gpu().attention_forward(qkv, full, lse, s, DropoutKey{});
    const std::vector<float> want_all = host(gpu(), full);
    double mx = 0;
    for (float x : want_all) mx = std::max(mx, static_cast<double>(std::fabs(x)));
    const double f = t == DType::F16 ? 4e-3 : t == DType::BF16 ? 2e-2 : 2e-5;
    const Tol tol{storage_tol(t, 2e-4).rtol, f + f * mx};

    Buffer kc = gpu().empty(Shape{B, T, H, D}, t), vc = gpu().empty(Shape{B, T, H, D}, t);
    gpu().fill(kc, NAN);
    gpu().fill(vc, NAN);
    Buffer step = gpu().empty(Shape{B, 3, H, D}, t), out = gpu().empty(Shape{B, H, D}, t);
    std::vector<unsigned char> step_b(static_cast<size_t>(B) * 3 * C * es);
    int bad = 0;
    double worst = 0;
    for (int p = 0; p < T; ++p) {
      for (int b = 0; b < B; ++b)
        std::memcpy(step_b.data() + static_cast<size_t>(b) * 3 * C * es,
                    seq.data() + (static_cast<size_t>(b) * T + p) * 3 * C * es, 3 * C * es);
      gpu().copy_from_host(step, step_b.data());
      gpu().attention_decode(step, kc, vc, p, out);
      const std::vector<float> got = host(gpu(), out);
      for (int b = 0; b < B; ++b)
        for (size_t i = 0; i < C; ++i) {
          const double w = want_all[(static_cast<size_t>(b) * T + p) * C + i], g = got[b * C + i];
          const double d = std::fabs(g - w);
          worst = std::max(worst, d);
          if (!(d <= tol.atol + tol.rtol * std::fabs(w)) && bad++ < 5)
            ADD_FAILURE() << "step " << p << " b " << b << " element " << i << ": decode " << g << " forward " << w;
        }
    }
    EXPECT_EQ(bad, 0) << "decode steps vs attention_forward (rtol " << tol.rtol << ", atol " << tol.atol << ")";
    std::printf("[ measured ] decode steps vs gpu attention_forward %s B=%d T=%d H=%d D=%d: max|diff| %.3g "
                "(atol %.3g)\n", dtype_name(t), B, T, H, D, worst, tol.atol);
    // The caches hold the whole sequence's K and V.
    std::vector<unsigned char> want_k(static_cast<size_t>(B) * T * C * es), want_v(want_k.size());
    for (int b = 0; b < B; ++b)
      for (int p = 0; p < T; ++p) {
        const unsigned char* row = seq.data() + (static_cast<size_t>(b) * T + p) * 3 * C * es;
        std::memcpy(want_k.data() + (static_cast<size_t>(b) * T + p) * C * es, row + C * es, C * es);
        std::memcpy(want_v.data() + (static_cast<size_t>(b) * T + p) * C * es, row + 2 * C * es, C * es);
      }
    EXPECT_TRUE(raw(gpu(), kc) == want_k) << "k_cache after T steps";
    EXPECT_TRUE(raw(gpu(), vc) == want_v) << "v_cache after T steps";
  }
}

TEST_P(CudaAttentionDecode, RejectsBadArguments) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const DType t = dt();
  const int B = 2, Tmax = 8, H = 3;
  auto reject = [&](int D, int pos, DType cache_dt, const char* what) {
    Buffer qkv = gpu().zeros(Shape{B, 3, H, D}, t), out = gpu().zeros(Shape{B, H, D}, t);
    Buffer kc = gpu().zeros(Shape{B, Tmax, H, D}, cache_dt), vc = gpu().zeros(Shape{B, Tmax, H, D}, cache_dt);
    EXPECT_THROW(gpu().attention_decode(qkv, kc, vc, pos, out), InternalError) << what;
  };
  reject(136, 0, t, "head dim above 128");
  reject(64, -1, t, "pos -1");
  reject(64, Tmax, t, "pos Tmax");
  reject(64, 0, t == DType::F32 ? DType::BF16 : DType::F32, "caches of another dtype than qkv");
  Buffer qkv = gpu().zeros(Shape{B, 3, H, 64}, t), out = gpu().zeros(Shape{B, H, 64}, t);
  Buffer kc = gpu().zeros(Shape{B, Tmax, H, 64}, t), vc = gpu().zeros(Shape{B, Tmax + 1, H, 64}, t);
  EXPECT_THROW(gpu().attention_decode(qkv, kc, vc, 0, out), InternalError) << "cache shapes differ";
  Buffer kc2 = gpu().zeros(Shape{B, Tmax, H + 1, 64}, t), vc2 = gpu().zeros(Shape{B, Tmax, H + 1, 64}, t);
  EXPECT_THROW(gpu().attention_decode(qkv, kc2, vc2, 0, out), InternalError) << "cache heads";
  Buffer out2 = gpu().zeros(Shape{B, H, 63}, t), vc3 = gpu().zeros(Shape{B, Tmax, H, 64}, t);
  EXPECT_THROW(gpu().attention_decode(qkv, kc, vc3, 0, out2), InternalError) << "out size";
  // Host tensors are rejected by the CUDA backend.
  Buffer host_qkv = cpu().zeros(Shape{B, 3, H, 64}, t);
  EXPECT_THROW(gpu().attention_decode(host_qkv, kc, vc3, 0, out), InternalError) << "host qkv";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionDecode, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
