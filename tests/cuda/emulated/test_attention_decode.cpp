// kernels/cuda/cuda_attention_decode.cu on the CPU emulator vs the CPU backend: attention of
// new tokens over a KV cache, every float dtype, one position (pos 0, Tmax 1), positions on
// both sides of the 128-thread stride of the score loop (127, 128, 299) and up to 2099, the
// 16B config's head dim (120) and the largest (128, every thread accumulates an output),
// D = 8 (most threads idle in the output loop), several (batch, head) blocks; and T > 1 new
// tokens a sequence (prefill): a whole prompt from position 0, a chunk after cached
// positions, a chunk that fills the cache, chunks across the 128-thread stride.
// Cache rows from `pos` on hold NaN and the dynamic shared memory is poisoned (NaN) by the
// emulator, so reading a row or a score no thread wrote shows up in the output. Checked:
// out within tolerance, both caches byte-identical to the CPU's, the same bytes under two
// thread schedules.
//
// Tolerances (|emu - cpu| <= atol + rtol |cpu|): fp32 rtol 1e-5, atol 1e-6 (the same fp32
// algorithm with host expf; only the order of the sum of exponentials differs: the block's
// tree vs the CPU's loop); fp16 / bf16 storage_tol (two ulps of the output format). The
// worst errors are printed per test.
//
// What it cannot check: device expf precision and nvcc's fused multiply-adds (the GPU test
// test_cuda_attention_decode.cpp covers those), the 48 KiB shared-memory limit.
#include "emu_cuda_attention_decode.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_attention_decode {
namespace {

// Mirror of the host launcher attention_decode in kernels/cuda/cuda_attention_decode.cu: one
// block of kThreads per (batch, token, head), dynamic shared memory for pos + T scores and
// the D query values, the same kernel arguments. KEEP IN SYNC with cuda_attention_decode.cu.
void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int pos, const Tensor& out) {
  const DecodeShape d = check_decode_shapes("attention_decode", qkv, k_cache, v_cache, pos, out);
  if (d.B == 0 || d.H == 0) return;
  const size_t smem = sizeof(float) * static_cast<size_t>(pos + d.T + d.D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  dispatch_float(qkv.dtype, "attention_decode", [&](auto tag) {
    using T = decltype(tag);
    emu::launch(dim3(static_cast<unsigned>(d.B * d.T * d.H)), dim3(kThreads), smem, attention_decode_kernel<T>,
                qkv.ptr<T>(), k_cache.ptr<T>(), v_cache.ptr<T>(), any_ptr(out), pos, static_cast<int>(d.T), d.Tmax,
                static_cast<int>(d.H), static_cast<int>(d.D), scale);
  });
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
  Tol out_tol() const { return storage_tol(dt(), 1e-5, 1e-6); }

  struct Inputs {
    Buffer qkv, kc, vc, out;
  };
  // Random qkv of T tokens and history (uniform in [-2, 2]), NaN cache rows from pos on,
  // out full of 7s. T = 1 has the decoding step's shapes ([B, 3, H, D], [B, H, D]).
  Inputs make(int B, int Tmax, int H, int D, int pos, int T = 1) {
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    const size_t C = static_cast<size_t>(H) * D;
    std::vector<float> q(static_cast<size_t>(B) * T * 3 * C), k(static_cast<size_t>(B) * Tmax * C), v(k.size());
    for (float& x : q) x = dist(rng_);
    for (size_t i = 0; i < k.size(); ++i) {
      const bool unwritten = static_cast<int>(i / C % Tmax) >= pos;
      k[i] = unwritten ? NAN : dist(rng_);
      v[i] = unwritten ? NAN : dist(rng_);
    }
    const Shape qkv = T == 1 ? Shape{B, 3, H, D} : Shape{B, T, 3, H, D};
    const Shape out = T == 1 ? Shape{B, H, D} : Shape{B, T, H, D};
    return Inputs{from_floats(qkv, dt(), q), from_floats(Shape{B, Tmax, H, D}, dt(), k),
                  from_floats(Shape{B, Tmax, H, D}, dt(), v), filled(out, dt(), 7.f)};
  }

  void check(const DecodeCase& c, int pos) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " Tmax=" + std::to_string(c.Tmax) + " H=" + std::to_string(c.H) +
                 " D=" + std::to_string(c.D) + " pos=" + std::to_string(pos) + " T=" + std::to_string(c.T) + " " +
                 dtype_name(dt()));
    Inputs in = make(c.B, c.Tmax, c.H, c.D, pos, c.T);
    Buffer e_kc = clone(in.kc), e_vc = clone(in.vc), e_out = clone(in.out);
    cpu().attention_decode(in.qkv, in.kc, in.vc, pos, in.out);
    kd::attention_decode(in.qkv, e_kc, e_vc, pos, e_out);
    expect_close(e_out, in.out, out_tol(), "attention_decode out");
    EXPECT_TRUE(same_bytes(e_kc, in.kc)) << "k_cache";
    EXPECT_TRUE(same_bytes(e_vc, in.vc)) << "v_cache";
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
  };
  for (const DecodeCase& c : cases)
    for (int pos : c.positions) check(c, pos);
}

// Two thread schedules, the same bytes (fixed-order block reductions).
TEST_P(EmulatedAttentionDecode, IsDeterministicAcrossSchedules) {
  const int B = 2, Tmax = 260, H = 2, D = 120, pos = 259;
  Inputs in = make(B, Tmax, H, D, pos);
  std::vector<Buffer> outs;
  for (uint32_t seed : {7u, 8u}) {
    emu::set_schedule_seed(seed);
    Buffer kc = clone(in.kc), vc = clone(in.vc), out = clone(in.out);
    kd::attention_decode(in.qkv, kc, vc, pos, out);
    outs.push_back(std::move(out));
  }
  EXPECT_TRUE(same_bytes(outs[0], outs[1])) << "out differs between two thread schedules";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedAttentionDecode, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
