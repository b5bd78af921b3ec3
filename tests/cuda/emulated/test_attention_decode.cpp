// kernels/cuda/cuda_attention_decode.cu on the CPU emulator vs the CPU backend: attention of
// new tokens over a KV cache, every float dtype, one position (pos 0, Tmax 1), positions on
// both sides of the scalar kernel's 128-thread stride (127, 128, 299) and up to 2099, the
// 16B config's head dim (120: the vector kernel's last lane idle) and the largest (128, every
// thread accumulates an output), D = 8 (one lane a key in 16-bit types, most threads idle in
// the scalar kernel's output loop), several (batch, head) blocks; and T > 1 new tokens a
// sequence (prefill): a whole prompt from position 0, a chunk after cached positions, a chunk
// that fills the cache, chunks across the 128-thread stride. Each case runs the scalar kernel
// and the vector kernel, the latter unsplit (no multiprocessors to fill) and as on an H200
// (132: rows of up to ~2000 keys cut into 2-33 ranges of at least 64 keys, then combined); and ranges past some
// queries' keys (a prefill split as for a 1000-multiprocessor GPU), ranges forced by shared
// memory (12000 keys), both kernels under two thread schedules, and sequences at positions
// of their own (per-row positions: the plan made for the largest).
// Cache rows from `pos` on hold NaN, the dynamic shared memory is poisoned (NaN) by the
// emulator and so are the splits' partials, so reading a row, a score or a partial no thread
// wrote shows up in the output. Checked: out within tolerance, both caches byte-identical to
// the CPU's, the same bytes under two thread schedules.
//
// Tolerances (|emu - cpu| <= atol + rtol |cpu|): fp32 rtol 1e-5, atol 5e-6 (the same fp32
// algorithm with host expf; only the order of the sums differs: the block's tree, the vector
// kernel's per-group sums and the splits' rescaled partials vs the CPU's loop. An output is
// a sum of up to ~2000 weighted values of |v| <= 2 whose weights add up to 1; near
// cancellation two orders differ by ~1e-6, e.g. 1.2e-6 on an output of 4.7e-4 after 260
// keys); fp16 / bf16 storage_tol (two ulps of the output format). The worst errors are
// printed per test.
//
// What it cannot check: device expf precision and nvcc's fused multiply-adds (the GPU test
// test_cuda_attention_decode.cpp covers those), the 48 KiB shared-memory limit.
#include "emu_cuda_attention_decode.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_attention_decode {
namespace {

// The host launcher attention_decode of kernels/cuda/cuda_attention_decode.cu, with the GPU's
// multiprocessor count `sms` and the kernel choice `vectors` given: the same plan and launches
// (plan_decode, launch_decode), the partials in host memory.
void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                      const Tensor& out, int sms, bool vectors) {
  const DecodeShape d = check_decode_shapes("attention_decode", qkv, k_cache, v_cache, at, out);
  if (d.B == 0 || d.H == 0) return;
  const DecodePlan plan = plan_decode(d, at.pos, vectors, static_cast<int>(dtype_size(qkv.dtype)), sms);
  std::vector<float> partials(static_cast<size_t>(plan.partial_floats() * (d.D + 2)), NAN);  // unwritten: NaN
  DecodeArgs a = decode_args(qkv, k_cache, v_cache, at, out, d);
  a.part_o = partials.data();
  a.part_ml = a.part_o + plan.partial_floats() * d.D;
  dispatch_float(qkv.dtype, "attention_decode", [&](auto tag) { launch_decode<decltype(tag)>(plan, a, nullptr); });
}

// The flash prefill's cache writes (launch_cache_rows): the new tokens' K and V rows only.
void write_cache_rows(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int pos, const Tensor& out) {
  const DecodeShape d = check_decode_shapes("attention_decode", qkv, k_cache, v_cache, pos, out);
  const DecodeArgs a = decode_args(qkv, k_cache, v_cache, pos, out, d);
  dispatch_float(qkv.dtype, "attention_decode", [&](auto tag) { launch_cache_rows<decltype(tag)>(a, nullptr); });
}

}  // namespace
}  // namespace trident::cuda::emu_attention_decode

namespace trident::emu_test {
namespace {

namespace kd = ::trident::cuda::emu_attention_decode;

struct DecodeCase {
  int B, Tmax, H, D;
  std::vector<int> positions;
  int T = 1;  // new tokens a sequence
};

class EmulatedAttentionDecode : public EmuVsCpuDtype {
 protected:
  Tol out_tol() const { return storage_tol(dt(), 1e-5, 5e-6); }

  struct Inputs {
    Buffer qkv, kc, vc, out;
  };
  // Random qkv of T tokens and history (uniform in [-2, 2]), NaN cache rows from pos on
  // (sequence b's from first[b] on, when given), out full of 7s. T = 1 has the decoding
  // step's shapes ([B, 3, H, D], [B, H, D]).
  Inputs make(int B, int Tmax, int H, int D, int pos, int T = 1, const std::vector<int32_t>& first = {}) {
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    const size_t C = static_cast<size_t>(H) * D;
    std::vector<float> q(static_cast<size_t>(B) * T * 3 * C), k(static_cast<size_t>(B) * Tmax * C), v(k.size());
    for (float& x : q) x = dist(rng_);
    for (size_t i = 0; i < k.size(); ++i) {
      const int b = static_cast<int>(i / C / Tmax);
      const bool unwritten = static_cast<int>(i / C % Tmax) >= (first.empty() ? pos : first[b]);
      k[i] = unwritten ? NAN : dist(rng_);
      v[i] = unwritten ? NAN : dist(rng_);
    }
    const Shape qkv = T == 1 ? Shape{B, 3, H, D} : Shape{B, T, 3, H, D};
    const Shape out = T == 1 ? Shape{B, H, D} : Shape{B, T, H, D};
    return Inputs{from_floats(qkv, dt(), q), from_floats(Shape{B, Tmax, H, D}, dt(), k),
                  from_floats(Shape{B, Tmax, H, D}, dt(), v), filled(out, dt(), 7.f)};
  }

  // Whether the launcher would take the vector kernel (the emulator's buffers are aligned).
  bool vectors_fit(int D) const { return D * static_cast<int64_t>(dtype_size(dt())) % 16 == 0; }

  void check(const DecodeCase& c, int pos, int sms, bool vectors) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " Tmax=" + std::to_string(c.Tmax) + " H=" + std::to_string(c.H) +
                 " D=" + std::to_string(c.D) + " pos=" + std::to_string(pos) + " T=" + std::to_string(c.T) + " " +
                 dtype_name(dt()) + (vectors ? " vector kernel, sms=" + std::to_string(sms) : " scalar kernel"));
    Inputs in = make(c.B, c.Tmax, c.H, c.D, pos, c.T);
    compare(in, pos, sms, vectors);
  }
  // One call on the CPU and on the emulator, each on its own copy of `in`: out within
  // tolerance, both caches byte-identical.
  void compare(Inputs& in, const DecodePositions& at, int sms, bool vectors) {
    Buffer e_kc = clone(in.kc), e_vc = clone(in.vc), e_out = clone(in.out);
    cpu().attention_decode(in.qkv, in.kc, in.vc, at, in.out);
    kd::attention_decode(in.qkv, e_kc, e_vc, at, e_out, sms, vectors);
    expect_close(e_out, in.out, out_tol(), "attention_decode out");
    EXPECT_TRUE(same_bytes(e_kc, in.kc)) << "k_cache";
    EXPECT_TRUE(same_bytes(e_vc, in.vc)) << "v_cache";
  }
  // Both kernels; the vector one unsplit and with an H200's 132 multiprocessors.
  void check_all(const DecodeCase& c) {
    for (int pos : c.positions) {
      check(c, pos, 0, false);
      if (!vectors_fit(c.D)) continue;
      for (int sms : {0, 132}) check(c, pos, sms, true);
    }
  }
  // The splits the vector kernel's plan makes for case c at pos on `sms` multiprocessors.
  int splits(const DecodeCase& c, int pos, int sms) const {
    const DecodeShape d{c.B, c.T, c.H, c.D, c.Tmax};
    return kd::plan_decode(d, pos, true, static_cast<int>(dtype_size(dt())), sms).splits;
  }
};

TEST_P(EmulatedAttentionDecode, MatchesCpu) {
  const std::vector<DecodeCase> cases = {
      {1, 1, 1, 8, {0}},              // a single position
      {2, 20, 3, 120, {0, 19}},       // the 16B config's head dim, 6 blocks
      {1, 300, 2, 128, {127, 128, 299}},  // around and past the 128-thread stride; D = 128
      {3, 40, 5, 64, {39}},           // 15 blocks
      {2, 9, 2, 8, {4}},              // D = 8: threads 8..127 idle in the output loop
      {1, 2100, 2, 120, {1999, 2099}},  // long contexts: 16-17 scores per thread
      {2, 2048, 2, 128, {2047}},      // the longest GPT-2 context at the largest head dim
      {2, 24, 3, 64, {0}, 24},        // a whole prompt from position 0 (prefill)
      {3, 40, 2, 120, {17}, 9},       // a chunk after cached positions
      {1, 20, 1, 8, {13}, 7},         // a chunk that fills the cache
      {1, 300, 2, 128, {100}, 160},   // queries on both sides of the 128-thread stride
      {2, 50, 3, 32, {49}},           // 4 lanes a key (bf16, fp16; 8 in fp32)
      {1, 70, 2, 16, {69}},           // 4 lanes a key in fp32 (2 in 16 bits)
  };
  for (const DecodeCase& c : cases) check_all(c);
  // The H200 plan splits the long rows (else the cases above would not test the combine).
  EXPECT_EQ(splits({1, 2100, 2, 120, {}}, 2099, 132), 33);  // ranges of 64 keys (the last 52)
  EXPECT_EQ(splits({2, 2048, 2, 128, {}}, 2047, 132), 32);
  EXPECT_EQ(splits({1, 300, 2, 128, {}}, 299, 132), 5);
  EXPECT_EQ(splits({1, 300, 2, 128, {}, 160}, 100, 132), 2);  // 320 rows: 2 blocks a row fill 4 an SM
  EXPECT_EQ(splits({3, 40, 5, 64, {}}, 39, 132), 1);          // 40 keys: fewer than a range holds
}

// Ranges that hold none of some queries' keys: a prefill of 300 positions split in five
// ranges of 60 (as on a GPU of 1000 multiprocessors): query t sees nothing of the ranges
// past it, whose partials for it must not count (-inf maximum, zero sum).
TEST_P(EmulatedAttentionDecode, EmptyRangesAddNothing) {
  const DecodeCase c{1, 300, 1, 64, {0}, 300};
  ASSERT_EQ(splits(c, 0, 1000), 5);
  check(c, 0, 1000, true);
}

// More keys than the shared memory holds scores for: ranges even where the GPU is full.
TEST_P(EmulatedAttentionDecode, SharedMemoryForcesRanges) {
  const DecodeCase c{1, 12000, 1, 64, {11999}};
  ASSERT_GT(splits(c, 11999, 0), 1);
  check(c, 11999, 0, true);
}

// Sequences at positions of their own (a batch of prompts of different lengths, each
// decoding at its length): the plan is the largest position's, so on an H200 the shorter
// rows leave ranges empty; every other sequence's cache rows stay as they were (NaN past its
// position). Steps and 3-token chunks, both kernels, unsplit and as on an H200.
TEST_P(EmulatedAttentionDecode, PerRowPositionsMatchCpu) {
  const int Tmax = 700, H = 2, D = 64;
  const std::vector<int32_t> first = {3, 696, 0, 250};
  const int largest = 696, B = static_cast<int>(first.size());
  for (int T : {1, 3}) {
    for (const auto& [sms, vectors] : {std::pair{0, false}, std::pair{0, true}, std::pair{132, true}}) {
      SCOPED_TRACE("T=" + std::to_string(T) + " " + dtype_name(dt()) +
                   (vectors ? " vector kernel, sms=" + std::to_string(sms) : " scalar kernel"));
      Inputs in = make(B, Tmax, H, D, largest, T, first);
      Buffer rows = ints(Shape{B}, first);
      compare(in, DecodePositions(largest, rows.t()), sms, vectors);
    }
  }
  EXPECT_EQ(splits({B, 1, H, D, {}}, largest, 132), 11);  // the short rows' later ranges are empty
}

// The flash prefill's cache writes (the GPU launcher's path for a 16-bit prompt from
// position 0; the attention itself is the training forward's, emulated in
// test_cuda_attention_emulated.cpp): the new rows as the CPU writes them, nothing else.
TEST_P(EmulatedAttentionDecode, CacheRowsMatchCpu) {
  for (const DecodeCase& c : {DecodeCase{2, 30, 3, 64, {0}, 30}, DecodeCase{3, 40, 2, 120, {17}, 9}}) {
    const int pos = c.positions[0];
    SCOPED_TRACE("B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " D=" + std::to_string(c.D) +
                 " pos=" + std::to_string(pos) + " T=" + std::to_string(c.T));
    Inputs in = make(c.B, c.Tmax, c.H, c.D, pos, c.T);
    Buffer e_kc = clone(in.kc), e_vc = clone(in.vc);
    cpu().attention_decode(in.qkv, in.kc, in.vc, pos, in.out);
    kd::write_cache_rows(in.qkv, e_kc, e_vc, pos, in.out);
    EXPECT_TRUE(same_bytes(e_kc, in.kc)) << "k_cache";
    EXPECT_TRUE(same_bytes(e_vc, in.vc)) << "v_cache";
  }
}

// Two thread schedules, the same bytes (fixed-order block reductions), for both kernels and
// the vector kernel's ranges.
TEST_P(EmulatedAttentionDecode, IsDeterministicAcrossSchedules) {
  const int B = 2, Tmax = 600, H = 2, D = 120, pos = 599;
  Inputs in = make(B, Tmax, H, D, pos);
  for (const auto& [sms, vectors] : {std::pair{0, false}, std::pair{132, true}}) {
    SCOPED_TRACE(vectors ? "vector kernel, 10 ranges" : "scalar kernel");
    if (vectors) {
      ASSERT_EQ(splits({B, Tmax, H, D, {}}, pos, sms), 10);
    }
    std::vector<Buffer> outs;
    for (uint32_t seed : {7u, 8u}) {
      emu::set_schedule_seed(seed);
      Buffer kc = clone(in.kc), vc = clone(in.vc), out = clone(in.out);
      kd::attention_decode(in.qkv, kc, vc, pos, out, sms, vectors);
      outs.push_back(std::move(out));
    }
    EXPECT_TRUE(same_bytes(outs[0], outs[1])) << "out differs between two thread schedules";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedAttentionDecode, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
