// attention_decode (generation: new tokens of each sequence over a KV cache) on the CPU
// backend, against the double-precision reference ref::attention_decode (naive_ref.h):
//  - the output, for every (b, h), is softmax(q . K[0..pos]^T / sqrt(D)) V[0..pos] over the
//    rounded cache contents, for fp32/fp16/bf16 at awkward sizes (B 1 and 3, H 1 and 5,
//    D 8, 64, 120, Tmax 1..40, pos 0, 1, Tmax/2, Tmax-1); at pos 0 it is the token's V
//    exactly;
//  - the cache rows at `pos` hold the token's K and V rounded to the cache dtype, byte for
//    byte, and no other byte of the caches changed (rows after pos hold NaN, so reading
//    one would also poison the output);
//  - decoding a sequence step by step gives, row by row, the output of the full causal
//    attention_forward (no dropout) on the whole [B, T, 3, H, D] sequence;
//  - several new tokens at once (prefill, qkv [B, T, 3, H, D]): each query against the
//    reference over the cache up to its own position, the caches written at the chunk's
//    rows only; a sequence fed in chunks of any sizes gives the bytes of single steps;
//  - per-row positions (each sequence at its own): each sequence's bytes are those of the
//    call on it alone;
//  - bad shapes, dtypes and positions outside [0, Tmax) throw InternalError and write
//    nothing.
// Tolerances (|got - want| <= atol + rtol |want|); the measured maxima are printed:
//  - vs the double reference: rtol = atol = dtype_tol(out dtype) (fp32 1e-5, fp16 4e-3,
//    bf16 3e-2: about 4 ulps of the output format; outputs are O(1)).
//  - step by step vs attention_forward: fp32 rtol 1e-5, atol 1e-6 (the two only differ in
//    the fp32 softmax normalisation: sum of exp from the maximum vs log-sum-exp);
//    16-bit outputs one ulp of the format apart at most (rtol 2^-10 fp16, 2^-7 bf16) plus
//    the fp32 terms.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

// Worst absolute and relative error of got vs want, for the printed summary.
struct Worst {
  double abs = 0, rel = 0;
  void add(const Vec& got, const Vec& want) {
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::fabs(got[i] - want[i]);
      if (!(d <= abs)) abs = d;
      const double r = d / std::max(std::fabs(want[i]), 1e-3);
      if (!(r <= rel)) rel = r;
    }
  }
  void print(const std::string& what) const {
    std::printf("[ measured ] %-40s max|diff| %.3g  max rel (|want| >= 1e-3) %.3g\n", what.c_str(), abs, rel);
  }
};

// Host bytes of `v` stored as dtype t.
std::vector<char> to_bytes(const std::vector<float>& v, DType t) {
  std::vector<char> b(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_from_float(b.data(), t, i, v[i]);
  return b;
}

Buffer upload_bytes(Backend& be, const std::vector<char>& b, Shape s, DType t) {
  Buffer buf = be.empty(s, t);
  EXPECT_EQ(buf.t().nbytes(), b.size());
  be.copy_from_host(buf, b.data());
  return buf;
}

Vec values(const std::vector<char>& b, DType t) {
  Vec v(b.size() / dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(b.data(), t, i);
  return v;
}

// Byte-for-byte equality of two [B, Tmax, H, D] caches; names the first differing element.
void expect_same_cache(const std::vector<char>& got, const std::vector<char>& want, DType t, int Tmax, int H,
                       int D, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t es = dtype_size(t);
  for (size_t i = 0; i < got.size() / es; ++i)
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      const size_t d = i % D, h = i / D % H, tt = i / (size_t(D) * H) % Tmax, b = i / (size_t(D) * H * Tmax);
      ADD_FAILURE() << what << ": element (b " << b << ", t " << tt << ", h " << h << ", d " << d << ") holds "
                    << load_as_float(got.data(), t, i) << ", expected " << load_as_float(want.data(), t, i);
      return;
    }
}

struct Dims {
  int B, Tmax, H, D, pos;
  int T = 1;  // new tokens a sequence (T > 1: prefill, qkv [B, T, 3, H, D])
  std::string str() const {
    return "B=" + std::to_string(B) + " Tmax=" + std::to_string(Tmax) + " H=" + std::to_string(H) +
           " D=" + std::to_string(D) + " pos=" + std::to_string(pos) + " T=" + std::to_string(T);
  }
};

// One call of the op on fresh data: checks the output against the reference and the caches
// against the expected bytes (the old bytes with rows pos .. pos + T - 1 replaced); adds the
// output's errors to `worst`.
void run_case(Backend& be, const Dims& c, DType qkv_dt, DType cache_dt, DType out_dt, uint32_t seed, Worst& worst) {
  SCOPED_TRACE(c.str() + " qkv " + dtype_name(qkv_dt) + " cache " + dtype_name(cache_dt) + " out " +
               dtype_name(out_dt));
  const int B = c.B, Tmax = c.Tmax, H = c.H, D = c.D, pos = c.pos, T = c.T;
  const size_t C = size_t(H) * D;
  const auto qkv = randn(size_t(B) * T * 3 * C, seed);
  // The history (rows < pos) random, rows pos .. pos + T - 1 stale random (must be
  // overwritten), rows after them NaN (must be neither read nor written).
  auto kc = randn(B * Tmax * C, seed + 1), vc = randn(B * Tmax * C, seed + 2);
  for (int b = 0; b < B; ++b)
    for (size_t i = (size_t(b) * Tmax + pos + T) * C; i < (size_t(b) + 1) * Tmax * C; ++i)
      kc[i] = vc[i] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<char> qkv_b = to_bytes(qkv, qkv_dt), kc_b = to_bytes(kc, cache_dt), vc_b = to_bytes(vc, cache_dt);
  Buffer QKV = upload_bytes(be, qkv_b, T == 1 ? Shape{B, 3, H, D} : Shape{B, T, 3, H, D}, qkv_dt);
  Buffer KC = upload_bytes(be, kc_b, Shape{B, Tmax, H, D}, cache_dt);
  Buffer VC = upload_bytes(be, vc_b, Shape{B, Tmax, H, D}, cache_dt);
  // "=": the 7s must go.
  Buffer OUT = upload(be, std::vector<float>(size_t(B) * T * C, 7.f), T == 1 ? Shape{B, H, D} : Shape{B, T, H, D},
                      out_dt);
  be.attention_decode(QKV, KC, VC, pos, OUT);

  // Expected caches: row pos + t of every sequence = token t's K / V (as stored in qkv's
  // dtype) rounded to the cache dtype; every other byte as before.
  std::vector<char> want_k = kc_b, want_v = vc_b;
  const auto qkv_at = [&](int b, int t, int which, size_t i) {
    return load_as_float(qkv_b.data(), qkv_dt, ((size_t(b) * T + t) * 3 + which) * C + i);
  };
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (size_t i = 0; i < C; ++i) {
        const size_t at = (size_t(b) * Tmax + pos + t) * C + i;
        store_from_float(want_k.data(), cache_dt, at, qkv_at(b, t, 1, i));
        store_from_float(want_v.data(), cache_dt, at, qkv_at(b, t, 2, i));
      }
  expect_same_cache(bytes(be, KC), want_k, cache_dt, Tmax, H, D, "k_cache");
  expect_same_cache(bytes(be, VC), want_v, cache_dt, Tmax, H, D, "v_cache");

  const Vec got = download(be, OUT);
  const double tol = dtype_tol(out_dt);
  for (int t = 0; t < T; ++t) {  // query t sees the cache up to pos + t
    SCOPED_TRACE("token " + std::to_string(t));
    Vec q(B * C), got_t(B * C);
    for (int b = 0; b < B; ++b)
      for (size_t i = 0; i < C; ++i) {
        q[b * C + i] = qkv_at(b, t, 0, i);
        got_t[b * C + i] = got[(size_t(b) * T + t) * C + i];
      }
    const Vec want =
        ref::attention_decode(q, values(want_k, cache_dt), values(want_v, cache_dt), B, Tmax, H, D, pos + t);
    expect_close(got_t, want, tol, tol, "out");
    worst.add(got_t, want);
    if (pos + t == 0) {  // one position: weight exp(0) / 1 = 1, so out is the token's V exactly
      Vec v0(B * C);
      for (int b = 0; b < B; ++b)
        for (size_t i = 0; i < C; ++i) {
          uint32_t slot = 0;
          store_from_float(&slot, out_dt, 0, load_as_float(want_v.data(), cache_dt, size_t(b) * Tmax * C + i));
          v0[b * C + i] = load_as_float(&slot, out_dt, 0);
        }
      expect_close(got_t, v0, 0, 0, "out at pos 0 (= V)");
    }
  }
}

class AttentionDecode : public ::testing::TestWithParam<DType> {};

// (a) + (b): output vs the double reference, caches written at pos only.
TEST_P(AttentionDecode, MatchesReferenceAndWritesOnlyRowPos) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  Worst worst;
  int n = 0;
  uint32_t seed = 100;
  for (int B : {1, 3})
    for (int H : {1, 5})
      for (int D : {8, 64, 120})
        for (int Tmax : {1, 2, 17, 40}) {
          std::vector<int> ps = {0, 1, Tmax / 2, Tmax - 1};
          std::sort(ps.begin(), ps.end());
          ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
          for (int pos : ps) {
            if (pos >= Tmax) continue;
            run_case(*be, Dims{B, Tmax, H, D, pos}, dt, dt, dt, seed += 7, worst);
            ++n;
          }
        }
  worst.print(std::string("decode vs reference ") + dtype_name(dt) + " (" + std::to_string(n) + " cases)");
}

// (e) Several new tokens a sequence (prefill): a prompt from position 0, chunks after
// cached positions, a chunk that fills the cache; each query against the reference over
// the cache up to its own position, the caches written at the chunk's rows only.
TEST_P(AttentionDecode, PrefillMatchesReferenceAndWritesOnlyItsRows) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  Worst worst;
  uint32_t seed = 500;
  for (const Dims& c : {Dims{1, 8, 1, 8, 0, 8}, Dims{3, 17, 5, 64, 0, 9}, Dims{2, 40, 3, 120, 13, 11},
                        Dims{3, 20, 2, 8, 15, 5}, Dims{1, 33, 4, 64, 1, 2}})
    run_case(*be, c, dt, dt, dt, seed += 7, worst);
  worst.print(std::string("prefill vs reference ") + dtype_name(dt));
}

// (f) A sequence fed in chunks of any sizes gives the bytes of feeding it one token at a
// time: the output of every token and both caches (the CPU op computes each query alike).
TEST_P(AttentionDecode, ChunksGiveTheBytesOfSingleSteps) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int B = 2, T = 13, H = 3, D = 8, Tmax = 16;
  const size_t C = size_t(H) * D, es = dtype_size(dt);
  const std::vector<char> seq = to_bytes(randn(size_t(B) * T * 3 * C, 77, 1.5f), dt);
  const std::vector<char> nan_cache = to_bytes(std::vector<float>(size_t(B) * Tmax * C, NAN), dt);
  // Feeds the sequence in chunks of the given sizes; returns the outputs [B, T, H, D] and caches.
  const auto feed = [&](const std::vector<int>& chunks) {
    Buffer KC = upload_bytes(*be, nan_cache, Shape{B, Tmax, H, D}, dt);
    Buffer VC = upload_bytes(*be, nan_cache, Shape{B, Tmax, H, D}, dt);
    std::vector<char> outs(size_t(B) * T * C * es);
    int pos = 0;
    for (int n : chunks) {
      std::vector<char> part(size_t(B) * n * 3 * C * es);
      for (int b = 0; b < B; ++b)
        std::memcpy(part.data() + size_t(b) * n * 3 * C * es, seq.data() + (size_t(b) * T + pos) * 3 * C * es,
                    size_t(n) * 3 * C * es);
      Buffer QKV = upload_bytes(*be, part, Shape{B, n, 3, H, D}, dt);
      Buffer out = be->empty(Shape{B, n, H, D}, dt);
      be->attention_decode(QKV, KC, VC, pos, out);
      const std::vector<char> o = bytes(*be, out);
      for (int b = 0; b < B; ++b)
        std::memcpy(outs.data() + (size_t(b) * T + pos) * C * es, o.data() + size_t(b) * n * C * es,
                    size_t(n) * C * es);
      pos += n;
    }
    return std::vector<std::vector<char>>{outs, bytes(*be, KC), bytes(*be, VC)};
  };
  const auto steps = feed(std::vector<int>(T, 1));
  for (const std::vector<int>& chunks : {std::vector<int>{T}, std::vector<int>{4, 1, 8}, std::vector<int>{2, 11}}) {
    const auto got = feed(chunks);
    EXPECT_TRUE(got[0] == steps[0]) << "outputs differ from single steps, chunks of " << chunks[0] << "...";
    EXPECT_TRUE(got[1] == steps[1] && got[2] == steps[2]) << "caches differ from single steps";
  }
}

// (g) Per-row positions (a batch of prompts of different lengths, each decoding at its own
// length): each sequence gets the bytes of the call on that sequence alone at its position
// (itself checked against the reference above): outputs and both caches, steps and chunks.
// Positions outside [0, at.pos] and per-row tensors of the wrong dtype or count are
// refused before anything is written.
TEST_P(AttentionDecode, PerRowPositionsGiveEachSequenceItsCallAlone) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int H = 3, D = 8, Tmax = 24;
  const std::vector<int32_t> first = {5, 0, 19, 12};
  const int B = static_cast<int>(first.size()), largest = 19;
  const size_t C = size_t(H) * D, es = dtype_size(dt);
  for (int T : {1, 4}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<char> qkv_b = to_bytes(randn(size_t(B) * T * 3 * C, 31 + T, 1.5f), dt);
    const std::vector<char> kc_b = to_bytes(randn(size_t(B) * Tmax * C, 32), dt);
    const std::vector<char> vc_b = to_bytes(randn(size_t(B) * Tmax * C, 33), dt);
    const Shape qkv_shape = T == 1 ? Shape{B, 3, H, D} : Shape{B, T, 3, H, D};
    Buffer QKV = upload_bytes(*be, qkv_b, qkv_shape, dt);
    Buffer KC = upload_bytes(*be, kc_b, Shape{B, Tmax, H, D}, dt);
    Buffer VC = upload_bytes(*be, vc_b, Shape{B, Tmax, H, D}, dt);
    Buffer OUT = be->empty(Shape{B, T, H, D}, dt);
    Buffer rows = be->empty(Shape{B}, DType::I32);
    be->copy_from_host(rows, first.data());
    be->attention_decode(QKV, KC, VC, DecodePositions(largest, rows.t()), OUT);
    const std::vector<char> out = bytes(*be, OUT), kc = bytes(*be, KC), vc = bytes(*be, VC);
    for (int b = 0; b < B; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b) + " at " + std::to_string(first[b]));
      const auto part = [&](const std::vector<char>& v, size_t n) {
        return std::vector<char>(v.begin() + b * n * es, v.begin() + (b + 1) * n * es);
      };
      Buffer q1 = upload_bytes(*be, part(qkv_b, T * 3 * C), T == 1 ? Shape{1, 3, H, D} : Shape{1, T, 3, H, D}, dt);
      Buffer k1 = upload_bytes(*be, part(kc_b, Tmax * C), Shape{1, Tmax, H, D}, dt);
      Buffer v1 = upload_bytes(*be, part(vc_b, Tmax * C), Shape{1, Tmax, H, D}, dt);
      Buffer o1 = be->empty(Shape{1, T, H, D}, dt);
      be->attention_decode(q1, k1, v1, first[b], o1);
      EXPECT_TRUE(bytes(*be, o1) == part(out, T * C)) << "out";
      EXPECT_TRUE(bytes(*be, k1) == part(kc, Tmax * C)) << "k_cache";
      EXPECT_TRUE(bytes(*be, v1) == part(vc, Tmax * C)) << "v_cache";
    }
  }
  // Refused: a position past at.pos or below 0, positions of another dtype or count.
  Buffer QKV = upload(*be, randn(size_t(B) * 3 * C, 5), Shape{B, 3, H, D}, dt);
  Buffer KC = be->zeros(Shape{B, Tmax, H, D}, dt), VC = be->zeros(Shape{B, Tmax, H, D}, dt);
  Buffer OUT = be->zeros(Shape{B, H, D}, dt);
  const auto rows_of = [&](const std::vector<int32_t>& v) {
    Buffer r = be->empty(Shape{static_cast<int64_t>(v.size())}, DType::I32);
    be->copy_from_host(r, v.data());
    return r;
  };
  Buffer past = rows_of({5, 0, 20, 12}), negative = rows_of({5, -1, 19, 12}), three = rows_of({5, 0, 19});
  Buffer floats = be->zeros(Shape{B}, DType::F32);
  for (const auto& [rows, what] : {std::pair{past.t(), "a position past at.pos"},
                                   std::pair{negative.t(), "a negative position"},
                                   std::pair{three.t(), "3 positions for 4 sequences"},
                                   std::pair{floats.t(), "F32 positions"}})
    EXPECT_THROW(be->attention_decode(QKV, KC, VC, DecodePositions(largest, rows), OUT), InternalError) << what;
  const std::vector<char> zeros_cache(size_t(B) * Tmax * C * es, 0), zeros_out(size_t(B) * C * es, 0);
  EXPECT_TRUE(bytes(*be, KC) == zeros_cache && bytes(*be, VC) == zeros_cache) << "a refused call wrote a cache";
  EXPECT_TRUE(bytes(*be, OUT) == zeros_out) << "a refused call wrote out";
}

// The output may have another dtype than qkv (fp32 output of 16-bit inputs); caches of
// another dtype than qkv are rejected (the CUDA kernel copies the new row as it is).
TEST_P(AttentionDecode, OutputDtypeMayDifferCacheDtypeMayNot) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  Worst worst;
  run_case(*be, Dims{3, 12, 5, 8, 11}, dt, dt, DType::F32, 9, worst);
  worst.print(std::string("decode, fp32 output of ") + dtype_name(dt));
  if (dt == DType::F32) return;
  Buffer qkv = be->zeros(Shape{1, 3, 2, 8}, DType::F32), out = be->empty(Shape{1, 2, 8}, DType::F32);
  Buffer kc = be->zeros(Shape{1, 4, 2, 8}, dt), vc = be->zeros(Shape{1, 4, 2, 8}, dt);
  EXPECT_THROW(be->attention_decode(qkv, kc, vc, 0, out), InternalError);
}

// (c) Decoding positions 0..T-1 one token at a time gives the full causal attention's rows.
TEST_P(AttentionDecode, StepByStepMatchesFullCausalAttention) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const double ulp = dt == DType::F16 ? std::ldexp(1.0, -10) : dt == DType::BF16 ? std::ldexp(1.0, -7) : 0.0;
  const double rtol = 1e-5 + ulp, atol = 1e-6;
  Worst worst;
  struct Seq {
    int B, T, H, D;
  };
  for (const Seq s : {Seq{3, 40, 5, 8}, Seq{2, 33, 1, 120}, Seq{1, 40, 5, 64}, Seq{3, 1, 1, 64}}) {
    SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
                 " D=" + std::to_string(s.D));
    const int B = s.B, T = s.T, H = s.H, D = s.D, Tmax = T + 3;
    const size_t C = size_t(H) * D;
    const std::vector<char> seq = to_bytes(randn(size_t(B) * T * 3 * C, 11 + T + D, 1.5f), dt);
    Buffer QKV = upload_bytes(*be, seq, Shape{B, T, 3 * H, D}, dt);
    Buffer full = be->empty(Shape{B, T, H, D}, dt), lse = be->empty(Shape{B, H, T}, DType::F32);
    be->attention_forward(QKV, full, lse, AttentionShape{B, T, H, D, 0, 0}, DropoutKey{});
    const Vec want_all = download(*be, full);

    const std::vector<char> nan_cache = to_bytes(std::vector<float>(size_t(B) * Tmax * C, NAN), dt);
    Buffer KC = upload_bytes(*be, nan_cache, Shape{B, Tmax, H, D}, dt);
    Buffer VC = upload_bytes(*be, nan_cache, Shape{B, Tmax, H, D}, dt);
    const size_t es = dtype_size(dt);
    for (int t = 0; t < T; ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      std::vector<char> step(size_t(B) * 3 * C * es);  // qkv[:, t] as [B, 3, H, D]
      for (int b = 0; b < B; ++b)
        std::memcpy(step.data() + size_t(b) * 3 * C * es, seq.data() + (size_t(b) * T + t) * 3 * C * es, 3 * C * es);
      Buffer QKV1 = upload_bytes(*be, step, Shape{B, 3, H, D}, dt);
      Buffer out = upload(*be, std::vector<float>(B * C, 7.f), Shape{B, H, D}, dt);
      be->attention_decode(QKV1, KC, VC, t, out);
      Vec want(B * C);
      for (int b = 0; b < B; ++b)
        for (size_t i = 0; i < C; ++i) want[b * C + i] = want_all[(size_t(b) * T + t) * C + i];
      const Vec got = download(*be, out);
      expect_close(got, want, atol, rtol, "decode step vs attention_forward row");
      worst.add(got, want);
      if (::testing::Test::HasFailure()) return;
    }
    // The caches now hold the sequence's K and V at rows 0..T-1 and the untouched NaN after.
    std::vector<char> want_k = nan_cache, want_v = nan_cache;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const char* row = seq.data() + (size_t(b) * T + t) * 3 * C * es;
        std::memcpy(want_k.data() + (size_t(b) * Tmax + t) * C * es, row + C * es, C * es);
        std::memcpy(want_v.data() + (size_t(b) * Tmax + t) * C * es, row + 2 * C * es, C * es);
      }
    expect_same_cache(bytes(*be, KC), want_k, dt, Tmax, H, D, "k_cache after T steps");
    expect_same_cache(bytes(*be, VC), want_v, dt, Tmax, H, D, "v_cache after T steps");
  }
  worst.print(std::string("decode steps vs attention_forward ") + dtype_name(dt));
}

// (d) Bad shapes, dtypes and positions throw InternalError before anything is written.
TEST_P(AttentionDecode, RejectsBadArguments) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int B = 2, Tmax = 5, H = 3, D = 8;
  Buffer qkv = upload(*be, randn(B * 3 * H * D, 1), Shape{B, 3, H, D}, dt);
  Buffer kc = upload(*be, randn(B * Tmax * H * D, 2), Shape{B, Tmax, H, D}, dt);
  Buffer vc = upload(*be, randn(B * Tmax * H * D, 3), Shape{B, Tmax, H, D}, dt);
  Buffer out = be->zeros(Shape{B, H, D}, dt);
  const std::vector<char> k0 = bytes(*be, kc), v0 = bytes(*be, vc), o0 = bytes(*be, out);
  auto view = [](const Tensor& t, Shape s) { return Tensor(t.data, s, t.dtype, t.device); };  // any shape
  Buffer big = be->zeros(Shape{4 * B * Tmax * H * D}, dt);  // room for oversized views
  Buffer ints = be->zeros(Shape{4 * B * Tmax * H * D}, DType::I32);

  // Positions outside [0, Tmax).
  for (int pos : {-1, Tmax, Tmax + 1, 1 << 30, std::numeric_limits<int>::min()})
    EXPECT_THROW(be->attention_decode(qkv, kc, vc, pos, out), InternalError) << "pos " << pos;
  // qkv not [B, 3, H, D].
  EXPECT_THROW(be->attention_decode(view(big, Shape{B, 3 * H, D}), kc, vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(view(big, Shape{B, 2, H, D}), kc, vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(view(big, Shape{B, 4, H, D}), kc, vc, 0, out), InternalError);
  // Caches not [B, Tmax, H, D] of qkv's B, H, D, or not the same shape.
  EXPECT_THROW(be->attention_decode(qkv, view(big, Shape{B + 1, Tmax, H, D}), vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, view(big, Shape{B, Tmax, H + 1, D}), vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, view(big, Shape{B, Tmax, H, 2 * D}), vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, view(big, Shape{B, Tmax, H * D}), vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, view(big, Shape{B, Tmax + 1, H, D}), vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, kc, view(big, Shape{B, Tmax + 1, H, D}), 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, kc, view(big, Shape{B, Tmax, H * D}), 0, out), InternalError);
  // out not B*H*D elements.
  EXPECT_THROW(be->attention_decode(qkv, kc, vc, 0, view(big, Shape{B, H, D - 1})), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, kc, vc, 0, view(big, Shape{B, H + 1, D})), InternalError);
  // Several tokens: positions past the cache's end, out not [B, T, H, D], qkv [B, T, 2, H, D].
  const Tensor qkv3 = view(big, Shape{B, 3, 3, H, D}), out3 = view(big, Shape{B, 3, H, D});
  EXPECT_THROW(be->attention_decode(qkv3, kc, vc, Tmax - 2, out3), InternalError);
  EXPECT_THROW(be->attention_decode(qkv3, kc, vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(view(big, Shape{B, 3, 2, H, D}), kc, vc, 0, out3), InternalError);
  EXPECT_THROW(be->attention_decode(view(big, Shape{B, 0, 3, H, D}), kc, vc, 0, view(big, Shape{B, 0, H, D})),
               InternalError);
  // Integer tensors.
  EXPECT_THROW(be->attention_decode(view(ints, Shape{B, 3, H, D}), kc, vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, view(ints, Shape{B, Tmax, H, D}), vc, 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, kc, view(ints, Shape{B, Tmax, H, D}), 0, out), InternalError);
  EXPECT_THROW(be->attention_decode(qkv, kc, vc, 0, view(ints, Shape{B, H, D})), InternalError);

  EXPECT_EQ(bytes(*be, kc), k0) << "a rejected call wrote k_cache";
  EXPECT_EQ(bytes(*be, vc), v0) << "a rejected call wrote v_cache";
  EXPECT_EQ(bytes(*be, out), o0) << "a rejected call wrote out";
  // The valid call right after works (the checks above were not all failing for one reason).
  EXPECT_NO_THROW(be->attention_decode(qkv, kc, vc, Tmax - 1, out));
  EXPECT_NE(bytes(*be, out), o0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionDecode, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
