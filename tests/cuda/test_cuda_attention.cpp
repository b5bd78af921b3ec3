// Fused causal attention: the CUDA kernels (kernels/cuda/cuda_attention.cu) against the CPU
// reference (kernels/cpu/cpu_attention.cpp) on awkward shapes: T not a multiple of the
// 64-row tiles, T = 1, head dims 8..128 (with and without zero padding to the 32/64/128
// tile width), B*H odd, head_offset > 0, with and without attention dropout.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|), per dtype:
// - out, dqkv: rtol = storage_tol's (two ulps of the format + fp32 error); atol = a fixed
//   floor plus a fraction of the largest reference magnitude of that tensor:
//     fp32 1e-5 + 1e-5 max|ref|   (CUDA-core path, only the summation order differs)
//     fp16 2e-3 + 2e-3 max|ref|   (tensor cores: P and dS are rounded to fp16 for the
//     bf16 1e-2 + 1e-2 max|ref|    products, delta uses the rounded O; 2-4 ulps of P)
// - lse (f32 from the same rounded inputs): rtol 1e-5, atol 1e-4 for every dtype.
// With dropout (p up to 0.5) the same tolerances apply: the kernels draw the mask of
// philox.h's attn_dropout_keep, as the CPU does, so the masks are identical; a differing
// mask element would move an output by about p_ij / (1 - p), far outside them.
// The CPU-emulated run of the same kernels (test_cuda_attention_emulated.cpp, no GPU
// needed) stays within these tolerances with a margin of 3x or more.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>

#include "attention_test_inputs.h"
#include "core/attn_dropout_mask.h"
#include "cuda_test_util.h"
#include "tests/attn_mask_test_util.h"

namespace trident::cuda_test {
namespace {

struct AttnCase {
  int B, T, H, D;
  int head_offset = 0, heads_total = 0;
  float p = 0.f;
  float sharp = 0.f;  // > 0: large, growing scores (sharp_input_factor)
  float eod = 0.f;    // > 0: random documents (random_document_starts, --reset-attention-mask)
};

std::string describe(const AttnCase& c) {
  std::ostringstream os;
  os << "B=" << c.B << " T=" << c.T << " H=" << c.H << " D=" << c.D << " head_offset=" << c.head_offset
     << " p=" << c.p << " sharp=" << c.sharp << " eod=" << c.eod;
  return os.str();
}

// Awkward sizes: tails in the query and key tiles, every head-dim bucket, padding.
const std::vector<AttnCase>& cases() {
  static const std::vector<AttnCase> v = {
      {2, 37, 3, 64, 0, 0, 0.f},      // GPT-2 head dim, one partial tile
      {2, 37, 3, 64, 2, 8, 0.5f},     // same with dropout and TP head offset
      {1, 129, 2, 120, 0, 0, 0.f},    // 16B config head dim (padded to 128), 3 query tiles
      {1, 129, 2, 120, 5, 10, 0.5f},  //   with dropout
      {2, 45, 1, 8, 0, 0, 0.f},       // smallest head dim (padded to 32)
      {1, 100, 2, 128, 0, 0, 0.f},    // largest head dim: 32-key tiles, masked warps
      {1, 100, 2, 128, 1, 3, 0.1f},   //   with dropout
      {1, 200, 1, 40, 0, 0, 0.2f},    // D padded to 64, four query tiles, dropout
      {3, 64, 1, 24, 0, 0, 0.f},      // exactly one tile
      {2, 1, 2, 64, 0, 0, 0.5f},      // T = 1
      {2, 300, 2, 64, 4, 12, 0.1f},   // many tiles in both directions
      {1, 257, 1, 128, 0, 0, 0.f},    // many 32-key tiles, one row past a tile
      {2, 300, 2, 64, 0, 0, 0.f, 4.f},     // large, growing scores (forward rescaling)
      {1, 257, 2, 128, 0, 0, 0.1f, 4.f},   //   with dropout
      // Documents: boundaries inside tiles, several in one tile, long ones across tiles.
      {2, 300, 2, 64, 0, 0, 0.1f, 0.f, 0.02f}, {1, 257, 2, 128, 1, 3, 0.f, 4.f, 0.05f},
      {2, 100, 1, 40, 0, 0, 0.f, 0.f, 0.2f},
  };
  return v;
}

DropoutKey drop_key(float p) {
  DropoutKey k;
  k.p = p;
  k.seed = 0x5EED1234ABCDull;
  k.site = 7 * kSitesPerLayer + kDropAttnProbs;
  k.sample_base = 1000003;
  return k;
}

// docs: the case's document starts on the backend that runs it (empty without documents).
AttentionShape shape_of(const AttnCase& c, const Tensor& docs = Tensor()) {
  AttentionShape s;
  s.B = c.B;
  s.T = c.T;
  s.H = c.H;
  s.D = c.D;
  s.head_offset = c.head_offset;
  s.heads_total = c.heads_total;
  s.document_starts = docs;
  return s;
}

class CudaAttention : public CudaVsCpuDtype {
 protected:
  // Output tolerance for a tensor whose CPU values are `ref`.
  Tol out_tol(const std::vector<float>& ref) const {
    double mx = 0;
    for (float x : ref) mx = std::max(mx, static_cast<double>(std::fabs(x)));
    const Tol base = storage_tol(dt(), 1e-4);
    switch (dt()) {
      case DType::F16: return {base.rtol, 2e-3 + 2e-3 * mx};
      case DType::BF16: return {base.rtol, 1e-2 + 1e-2 * mx};
      default: return {base.rtol, 1e-5 + 1e-5 * mx};
    }
  }
  void expect_out_close(const Pair& p, const std::string& what) { expect_close(p, out_tol(host_cpu(p)), what); }

  struct Run {
    Pair qkv, out, lse;
    Pair docs;  // the case's document starts (random_document_starts), or empty
    AttentionShape cpu_shape, gpu_shape;
  };
  // Uniform [-1, 1) inputs, scaled as c.sharp asks.
  Pair qkv_of(const AttnCase& c) {
    std::mt19937_64 rng(static_cast<uint64_t>(c.T) * 131 + c.D);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> v(static_cast<size_t>(c.B) * c.T * 3 * c.H * c.D);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = dist(rng) * sharp_input_factor(i, c.T, c.H, c.D, c.sharp);
    }
    return upload(Shape{c.B, c.T, 3 * c.H, c.D}, dt(), v);
  }
  // Forward on both backends with identical inputs.
  Run forward(const AttnCase& c) {
    const DType t = dt();
    Run r{qkv_of(c),
          upload(Shape{c.B, c.T, c.H, c.D}, t, std::vector<float>(static_cast<size_t>(c.B) * c.T * c.H * c.D, 7.f)),
          filled(Shape{c.B, c.H, c.T}, DType::F32, 7.f), Pair{}, AttentionShape{}, AttentionShape{}};
    const std::vector<int32_t> docs = random_document_starts(c.B, c.T, c.eod, static_cast<uint64_t>(c.T));
    if (!docs.empty()) r.docs = ints(Shape{c.B * c.T}, docs);
    r.cpu_shape = shape_of(c, docs.empty() ? Tensor() : r.docs.cpu.t());
    r.gpu_shape = shape_of(c, docs.empty() ? Tensor() : r.docs.gpu.t());
    cpu().attention_forward(r.qkv.cpu, r.out.cpu, r.lse.cpu, r.cpu_shape, drop_key(c.p));
    gpu().attention_forward(r.qkv.gpu, r.out.gpu, r.lse.gpu, r.gpu_shape, drop_key(c.p));
    gpu().synchronize();
    return r;
  }

  // before_each(c), when given, runs before each case (e.g. to set tile variables for its D).
  void check_forward(const std::string& tag, const std::function<void(const AttnCase&)>& before_each = {}) {
    for (const AttnCase& c : cases()) {
      if (before_each) before_each(c);
      SCOPED_TRACE(tag + describe(c));
      Run r = forward(c);
      expect_out_close(r.out, "out");
      expect_close(r.lse, Tol{1e-5, 1e-4}, "lse");
    }
  }

  void check_backward(const std::string& tag, const std::function<void(const AttnCase&)>& before_each = {}) {
    for (const AttnCase& c : cases()) {
      if (before_each) before_each(c);
      SCOPED_TRACE(tag + describe(c));
      Run r = forward(c);
      const DType t = dt();
      Pair dout = random(Shape{c.B, c.T, c.H, c.D}, t);
      Pair dqkv = filled(Shape{c.B, c.T, 3 * c.H, c.D}, t, 7.f);  // "=": the 7s must all go
      // Each backend's own forward results, as in training (out and lse are close, above).
      cpu().attention_backward(dout.cpu, r.qkv.cpu, r.out.cpu, r.lse.cpu, dqkv.cpu, r.cpu_shape, drop_key(c.p));
      gpu().attention_backward(dout.gpu, r.qkv.gpu, r.out.gpu, r.lse.gpu, dqkv.gpu, r.gpu_shape, drop_key(c.p));
      gpu().synchronize();
      expect_out_close(dqkv, "dqkv");
    }
  }

  template <typename T>
  static std::vector<T> raw(Backend& be, const Tensor& t) {
    std::vector<T> v(t.nbytes() / sizeof(T));
    be.copy_to_host(v.data(), t);
    return v;
  }
  // The saved dropout mask (AttentionShape::dropout_mask) on the cases with dropout: the GPU
  // forward's bits equal the CPU's at every element a query sees, its output is the forward's
  // without the mask, bit for bit, and the backward reads the bits: given another seed, it
  // gives the gradients of the first seed's drawn mask, bit for bit.
  // ahead: with TRIDENT_ATTN_MASK_AHEAD=1, the mask drawn by its own kernel and read by the forward.
  void check_saved_mask(const std::string& tag, bool ahead = false) {
    for (const AttnCase& c : cases()) {
      if (c.p == 0.f) continue;
      SCOPED_TRACE(tag + describe(c));
      Run r = forward(c);
      const int64_t words = attn_mask_words(c.B, c.H, c.T);
      Pair mask = ints(Shape{words}, std::vector<int32_t>(static_cast<size_t>(words), 0x5A5AA5A5));
      AttentionShape cs = r.cpu_shape, gs = r.gpu_shape;
      cs.dropout_mask = mask.cpu.t();
      gs.dropout_mask = mask.gpu.t();
      Pair out = filled(Shape{c.B, c.T, c.H, c.D}, dt(), 7.f), lse = filled(Shape{c.B, c.H, c.T}, DType::F32, 7.f);
      cpu().attention_forward(r.qkv.cpu, out.cpu, lse.cpu, cs, drop_key(c.p));
      {
        const ScopedEnv mask_ahead("TRIDENT_ATTN_MASK_AHEAD", ahead ? "1" : nullptr);
        gpu().attention_forward(r.qkv.gpu, out.gpu, lse.gpu, gs, drop_key(c.p));
      }
      EXPECT_EQ(raw<uint16_t>(gpu(), out.gpu), raw<uint16_t>(gpu(), r.out.gpu)) << "out with the saved mask";
      const std::vector<uint16_t> want = raw<uint16_t>(cpu(), mask.cpu), got = raw<uint16_t>(gpu(), mask.gpu);
      const std::vector<int32_t> docs = random_document_starts(c.B, c.T, c.eod, static_cast<uint64_t>(c.T));
      const int64_t blocks = attn_mask_blocks(c.T);
      EXPECT_EQ(test::count_visible(c.B, c.H, c.T, docs,
                                    [&](int b, int h, int i, int j) {
                                      return attn_mask_kept(want.data(), blocks, b * c.H + h, i, j) !=
                                             attn_mask_kept(got.data(), blocks, b * c.H + h, i, j);
                                    }),
                0)
          << "mask bits differing from the CPU's";
      Pair dout = random(Shape{c.B, c.T, c.H, c.D}, dt());
      Buffer drawn = gpu().empty(Shape{c.B, c.T, 3 * c.H, c.D}, dt()), saved = gpu().empty(Shape{c.B, c.T, 3 * c.H, c.D}, dt());
      DropoutKey other = drop_key(c.p);
      other.seed += 1;
      gpu().attention_backward(dout.gpu, r.qkv.gpu, r.out.gpu, r.lse.gpu, drawn, r.gpu_shape, drop_key(c.p));
      gpu().attention_backward(dout.gpu, r.qkv.gpu, r.out.gpu, r.lse.gpu, saved, gs, other);
      EXPECT_EQ(raw<uint16_t>(gpu(), saved), raw<uint16_t>(gpu(), drawn)) << "dqkv from the saved mask";
    }
  }
};

TEST_P(CudaAttention, ForwardMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check_forward("");
}

TEST_P(CudaAttention, BackwardMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check_backward("");
}

// The mma.sync kernels' tile shapes (AttnTiles in attention/attn_plans.cuh, chosen by environment
// variables; on an H100/H200 the defaults are the wgmma kernels, turned off here): their
// defaults; the forward with two K/V buffers, alone and with two 16-row tiles per warp
// (128-row blocks); the backward with dQ added by atomics, with one and two dK/dV buffers,
// and the double-buffered dK/dV kernel; then, for head dims above 32, the forward's key
// tiles doubled, the other dK/dV query tiles and (D 128) the dQ key tiles doubled; last,
// atomic dQ with the other dK/dV query tiles.
TEST_P(CudaAttention, TunedVariantsMatchCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ::setenv("TRIDENT_ATTN_FWD_WGMMA", "0", 1);
  ::setenv("TRIDENT_ATTN_BWD_WGMMA", "0", 1);
  check_forward("mma ");
  check_backward("mma ");
  ::setenv("TRIDENT_ATTN_FWD_DB", "1", 1);
  ::setenv("TRIDENT_ATTN_BWD_ATOMIC", "1", 1);
  check_forward("fwd db ");
  check_backward("atomic dq ");
  ::setenv("TRIDENT_ATTN_FWD_WM", "2", 1);
  ::setenv("TRIDENT_ATTN_BWD_DB", "1", 1);
  check_forward("wm2+db ");
  check_backward("atomic dq, db ");
  ::unsetenv("TRIDENT_ATTN_BWD_ATOMIC");
  check_backward("wm2+db ");
  ::unsetenv("TRIDENT_ATTN_FWD_WM");
  ::unsetenv("TRIDENT_ATTN_FWD_DB");
  ::unsetenv("TRIDENT_ATTN_BWD_DB");
  const auto other_tiles = [](const AttnCase& c) {
    for (const char* v : {"TRIDENT_ATTN_FWD_BK", "TRIDENT_ATTN_DKDV_BQ", "TRIDENT_ATTN_DQ_BK"}) ::unsetenv(v);
    if (c.D <= 32) return;  // the default tiles only
    const bool d128 = c.D > 64;
    ::setenv("TRIDENT_ATTN_FWD_BK", d128 ? "64" : "128", 1);
    ::setenv("TRIDENT_ATTN_DKDV_BQ", d128 ? "16" : "64", 1);  // the defaults: 32
    if (d128) ::setenv("TRIDENT_ATTN_DQ_BK", "64", 1);
  };
  check_forward("tiles ", other_tiles);
  check_backward("tiles ", other_tiles);
  for (const char* v : {"TRIDENT_ATTN_FWD_BK", "TRIDENT_ATTN_DKDV_BQ", "TRIDENT_ATTN_DQ_BK"}) ::unsetenv(v);
  const auto other_query_tiles = [](const AttnCase& c) {
    ::unsetenv("TRIDENT_ATTN_DKDV_BQ");
    if (c.D > 32) ::setenv("TRIDENT_ATTN_DKDV_BQ", c.D > 64 ? "16" : "64", 1);
  };
  ::setenv("TRIDENT_ATTN_BWD_ATOMIC", "1", 1);
  check_backward("atomic dq, other tiles ", other_query_tiles);
  for (const char* v : {"TRIDENT_ATTN_BWD_ATOMIC", "TRIDENT_ATTN_DKDV_BQ", "TRIDENT_ATTN_FWD_WGMMA",
                        "TRIDENT_ATTN_BWD_WGMMA"})
    ::unsetenv(v);
}

// Skips unless the GPU has compute capability 9.0 (the wgmma kernels).
#define TRIDENT_SKIP_WITHOUT_SM90()                                                                   \
  do {                                                                                              \
    int dev = 0, major = 0, minor = 0;                                                              \
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);                                                    \
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess); \
    ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), cudaSuccess); \
    if (major != 9 || minor != 0) GTEST_SKIP() << "the wgmma kernels need an sm_90 GPU";            \
  } while (0)

// The wgmma tests' variables: whatever a check sets, the next tests see the environment as
// it was (even on a throw).
constexpr const char* kWgmmaVars[] = {"TRIDENT_ATTN_FWD_WGMMA", "TRIDENT_ATTN_BWD_WGMMA", "TRIDENT_ATTN_FWD_BK",
                                      "TRIDENT_ATTN_DKDV_BQ",   "TRIDENT_ATTN_BWD_ATOMIC", "TRIDENT_ATTN_FWD_WG",
                                      "TRIDENT_ATTN_BWD_WG",    "TRIDENT_ATTN_DQ_WG",      "TRIDENT_ATTN_FWD_WS",
                                      "TRIDENT_ATTN_BWD_WS",    "TRIDENT_ATTN_DQ_WS"};
struct RestoreWgmmaVars {
  const ScopedEnv vars[11] = {{kWgmmaVars[0], nullptr}, {kWgmmaVars[1], nullptr}, {kWgmmaVars[2], nullptr},
                              {kWgmmaVars[3], nullptr}, {kWgmmaVars[4], nullptr}, {kWgmmaVars[5], nullptr},
                              {kWgmmaVars[6], nullptr}, {kWgmmaVars[7], nullptr}, {kWgmmaVars[8], nullptr},
                              {kWgmmaVars[9], nullptr}, {kWgmmaVars[10], nullptr}};
};

// The sm_90a kernels (warpgroup MMA from swizzled shared memory; the defaults there for
// both directions above head dim 32): the forward (TRIDENT_ATTN_FWD_WGMMA=1) with its
// default and its other key tile, and the backward (TRIDENT_ATTN_BWD_WGMMA=1) from its out
// and lse, for every head dim above 32 (up to 32 there are no wgmma kernels: the defaults).
TEST_P(CudaAttention, WgmmaMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels";
  TRIDENT_SKIP_WITHOUT_SM90();
  const RestoreWgmmaVars restore;
  for (const bool other_tile : {false, true}) {
    const auto wgmma = [other_tile](const AttnCase& c) {
      for (const char* v : kWgmmaVars) ::unsetenv(v);
      if (c.D <= 32) return;
      ::setenv("TRIDENT_ATTN_FWD_WGMMA", "1", 1);
      ::setenv("TRIDENT_ATTN_BWD_WGMMA", "1", 1);
      if (other_tile) ::setenv("TRIDENT_ATTN_FWD_BK", "128", 1);
      if (other_tile && c.D <= 64) ::setenv("TRIDENT_ATTN_DKDV_BQ", "32", 1);  // D 64's other tile
    };
    check_forward(other_tile ? "wgmma, other tile " : "wgmma ", wgmma);
    check_backward(other_tile ? "wgmma, other tile " : "wgmma ", wgmma);
  }
}

// The wgmma dK/dV kernel adding dQ by float atomics (TRIDENT_ATTN_BWD_WGMMA=1
// TRIDENT_ATTN_BWD_ATOMIC=1, head dims 33-64 only; the others run the defaults), apart from
// WgmmaMatchesCpu so that gpu-check can tell this opt-in's result from the defaults'.
TEST_P(CudaAttention, WgmmaAtomicDqMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels";
  TRIDENT_SKIP_WITHOUT_SM90();
  const RestoreWgmmaVars restore;
  check_backward("wgmma, atomic dq ", [](const AttnCase& c) {
    for (const char* v : kWgmmaVars) ::unsetenv(v);
    if (c.D <= 32 || c.D > 64) return;
    ::setenv("TRIDENT_ATTN_BWD_WGMMA", "1", 1);
    ::setenv("TRIDENT_ATTN_BWD_ATOMIC", "1", 1);
  });
}

// The wgmma kernels with two warpgroups a block (128 rows; head dims above 32, the dK/dV
// kernel's up to 64; the others run the defaults): the forward (TRIDENT_ATTN_FWD_WG=2) with
// both key tiles, the dQ pass (TRIDENT_ATTN_DQ_WG=2), the dK/dV kernel (TRIDENT_ATTN_BWD_WG=2)
// with 64- and 32-query tiles and with atomic dQ, whose two warpgroups sum their partials in
// shared memory first. Apart from WgmmaMatchesCpu so that gpu-check can tell these opt-ins'
// results from the defaults'.
TEST_P(CudaAttention, WgmmaTwoWarpgroupsMatchCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels";
  TRIDENT_SKIP_WITHOUT_SM90();
  const RestoreWgmmaVars restore;
  for (const char* variant : {"64", "32", "atomic"}) {
    const auto two = [variant](const AttnCase& c) {
      for (const char* v : kWgmmaVars) ::unsetenv(v);
      if (c.D <= 32) return;
      const bool atomic = std::strcmp(variant, "atomic") == 0;
      ::setenv("TRIDENT_ATTN_FWD_WGMMA", "1", 1);
      ::setenv("TRIDENT_ATTN_BWD_WGMMA", "1", 1);
      ::setenv("TRIDENT_ATTN_FWD_WG", "2", 1);
      if (!atomic) ::setenv("TRIDENT_ATTN_DQ_WG", "2", 1);
      if (std::strcmp(variant, "32") == 0) ::setenv("TRIDENT_ATTN_FWD_BK", "128", 1);
      if (c.D > 64) return;
      ::setenv("TRIDENT_ATTN_BWD_WG", "2", 1);
      if (atomic) {
        ::setenv("TRIDENT_ATTN_BWD_ATOMIC", "1", 1);
      } else {
        ::setenv("TRIDENT_ATTN_DKDV_BQ", variant, 1);
      }
    };
    check_forward(std::string("wgmma, two warpgroups, ") + variant + " ", two);
    check_backward(std::string("wgmma, two warpgroups, ") + variant + " ", two);
  }
}

// The warp-specialized wgmma forward (TRIDENT_ATTN_FWD_WS=1: one thread loads a ring of K/V
// stages by TMA, P V runs under the next tile's softmax; head dims above 32, 64-key tiles and
// at D 64 also 128, an opt-in; the others run the defaults), the warp-specialized dQ kernel
// (TRIDENT_ATTN_DQ_WS=1), and at D <= 64 the warp-specialized dK/dV kernel
// (TRIDENT_ATTN_BWD_WS=1, with 64- and 32-query steps) with it, the dK/dV kernel with dQ
// by bulk adds (TRIDENT_ATTN_BWD_ATOMIC=1 with it), and at D 64 and 128 the two-consumer dK/dV
// kernel (TRIDENT_ATTN_BWD_WS=1 TRIDENT_ATTN_BWD_WG=2; at D 64 also with dQ by bulk adds)
// (opt-ins). The forward is the default
// on sm_90a, which ForwardMatchesCpu checks too; asked for here by name, so that gpu-check can
// tell these kernels' results from the one-warpgroup kernels' in WgmmaMatchesCpu.
TEST_P(CudaAttention, WgmmaWarpSpecializedMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels";
  TRIDENT_SKIP_WITHOUT_SM90();
  const RestoreWgmmaVars restore;
  for (const bool other_tile : {false, true}) {
    const auto ws = [other_tile](const AttnCase& c) {
      for (const char* v : kWgmmaVars) ::unsetenv(v);
      if (c.D <= 32) return;
      ::setenv("TRIDENT_ATTN_FWD_WS", "1", 1);
      if (other_tile && c.D <= 64) ::setenv("TRIDENT_ATTN_FWD_BK", "128", 1);
    };
    check_forward(other_tile ? "warp-specialized, 128 keys " : "warp-specialized ", ws);
  }
  check_backward("warp-specialized dQ ", [](const AttnCase& c) {
    for (const char* v : kWgmmaVars) ::unsetenv(v);
    if (c.D > 32) ::setenv("TRIDENT_ATTN_DQ_WS", "1", 1);
  });
  for (const bool halves : {false, true}) {  // the dK/dV kernel a stage a step, or by pipelined halves
    check_backward(halves ? "warp-specialized dK/dV by halves, and dQ " : "warp-specialized dK/dV and dQ ",
                   [halves](const AttnCase& c) {
                     for (const char* v : kWgmmaVars) ::unsetenv(v);
                     if (c.D > 32 && c.D <= 64) {
                       ::setenv("TRIDENT_ATTN_BWD_WS", "1", 1);
                       ::setenv("TRIDENT_ATTN_DQ_WS", "1", 1);
                       if (halves) ::setenv("TRIDENT_ATTN_DKDV_BQ", "32", 1);
                     }
                   });
  }
  // FlashAttention-3's dK/dV block (two consumer warpgroups with 240 registers, setmaxnreg;
  // D 64 pipelined), D 64 and 128; the warp-specialized dQ kernel after it.
  check_backward("two-consumer dK/dV and dQ ", [](const AttnCase& c) {
    for (const char* v : kWgmmaVars) ::unsetenv(v);
    if (c.D > 32) {
      ::setenv("TRIDENT_ATTN_BWD_WS", "1", 1);
      ::setenv("TRIDENT_ATTN_BWD_WG", "2", 1);
      ::setenv("TRIDENT_ATTN_DQ_WS", "1", 1);
    }
  });
  // dQ by the dK/dV kernel, added to an f32 dQ by the copy engine's bulk reduces (not bitwise
  // reproducible: the CPU comparison's tolerances cover the order of the adds), with one
  // consumer warpgroup and with two.
  for (const bool two : {false, true}) {
    check_backward(two ? "two-consumer dK/dV with dQ by bulk adds " : "warp-specialized dK/dV with dQ by bulk adds ",
                   [two](const AttnCase& c) {
                     for (const char* v : kWgmmaVars) ::unsetenv(v);
                     if (c.D > 32 && c.D <= 64) {
                       ::setenv("TRIDENT_ATTN_BWD_WS", "1", 1);
                       ::setenv("TRIDENT_ATTN_BWD_ATOMIC", "1", 1);
                       if (two) ::setenv("TRIDENT_ATTN_BWD_WG", "2", 1);
                     }
                   });
  }
}

// A tile size that the head dim has no kernel for is a clear error, not a silent default.
TEST_P(CudaAttention, MissingTileIsAnError) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels, which have no tiles";
  const AttnCase c{1, 64, 1, 64, 0, 0, 0.f};
  ::setenv("TRIDENT_ATTN_FWD_BK", "48", 1);
  EXPECT_THROW(forward(c), Error);
  ::unsetenv("TRIDENT_ATTN_FWD_BK");
}

// The CUDA-core fallback (the fp32 path; for 16-bit it serves D % 8 != 0 and unaligned
// views) forced with TRIDENT_ATTN_SIMT=1, so the 16-bit types test it too.
TEST_P(CudaAttention, FallbackPathMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ::setenv("TRIDENT_ATTN_SIMT", "1", 1);
  check_forward("simt ");
  check_backward("simt ");
  ::unsetenv("TRIDENT_ATTN_SIMT");
}

// The saved dropout mask with the default kernels (the wgmma and warp-specialized ones on an
// H100/H200), the mma.sync kernels and the CUDA-core fallback; then, on an H100/H200, the
// warp-specialized backward (FlashAttention-3's dK/dV block and the warp-specialized dQ kernel).
TEST_P(CudaAttention, SavedDropoutMaskIsTheDrawnMask) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check_saved_mask("");
  {
    const ScopedEnv fwd("TRIDENT_ATTN_FWD_WGMMA", "0"), bwd("TRIDENT_ATTN_BWD_WGMMA", "0");
    check_saved_mask("mma ");
  }
  {
    const ScopedEnv simt("TRIDENT_ATTN_SIMT", "1");
    check_saved_mask("simt ");
  }
}
// The same with the mask drawn ahead by its own kernel (TRIDENT_ATTN_MASK_AHEAD=1) and read
// by the forward (the mask kernel and the forward take the same key here, so only the emulated
// test, which changes the seed between them, shows that the forward reads the bits). A call
// without a mask draws in the forward as without the variable.
TEST_P(CudaAttention, MaskDrawnAheadIsTheDrawnMask) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check_saved_mask("ahead ", true);
  {
    const ScopedEnv fwd("TRIDENT_ATTN_FWD_WGMMA", "0");
    check_saved_mask("ahead, mma forward ", true);
  }
  {
    const ScopedEnv simt("TRIDENT_ATTN_SIMT", "1");
    check_saved_mask("ahead, simt ", true);
  }
  const AttnCase c{1, 40, 1, 64, 0, 0, 0.1f};
  Run drawn = forward(c);
  Buffer out = gpu().empty(Shape{c.B, c.T, c.H, c.D}, dt()), lse = gpu().empty(Shape{c.B, c.H, c.T}, DType::F32);
  const ScopedEnv mask_ahead("TRIDENT_ATTN_MASK_AHEAD", "1");
  gpu().attention_forward(drawn.qkv.gpu, out, lse, drawn.gpu_shape, drop_key(c.p));
  EXPECT_EQ(raw<uint16_t>(gpu(), out), raw<uint16_t>(gpu(), drawn.out.gpu)) << "out without a mask";
}
// On an H100/H200 also the one-warpgroup wgmma forward and its two-warpgroup blocks.
TEST_P(CudaAttention, MaskDrawnAheadWgmmaForwards) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels";
  TRIDENT_SKIP_WITHOUT_SM90();
  {
    const ScopedEnv ws("TRIDENT_ATTN_FWD_WS", "0");
    check_saved_mask("ahead, one-warpgroup wgmma forward ", true);
  }
  const ScopedEnv wgmma("TRIDENT_ATTN_FWD_WGMMA", "1"), wg("TRIDENT_ATTN_FWD_WG", "2");
  check_saved_mask("ahead, two-warpgroup wgmma forward ", true);
}
TEST_P(CudaAttention, SavedDropoutMaskWarpSpecializedBackward) {
  TRIDENT_SKIP_WITHOUT_GPU();
  if (dt() == DType::F32) GTEST_SKIP() << "fp32 runs the CUDA-core kernels";
  TRIDENT_SKIP_WITHOUT_SM90();
  const ScopedEnv ws("TRIDENT_ATTN_BWD_WS", "1"), wg("TRIDENT_ATTN_BWD_WG", "2"), dq("TRIDENT_ATTN_DQ_WS", "1");
  check_saved_mask("two-consumer dK/dV and dQ ");
}

// Head dims that are not multiples of 8 take the fallback path on every dtype.
TEST_P(CudaAttention, OddHeadDimMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const AttnCase c{2, 33, 2, 20 + 1, 1, 4, 0.3f};
  SCOPED_TRACE(describe(c));
  Run r = forward(c);
  expect_out_close(r.out, "out");
  expect_close(r.lse, Tol{1e-5, 1e-4}, "lse");
}

// Same inputs twice: bit-identical gradients (no atomics, fixed summation order).
TEST_P(CudaAttention, BackwardIsDeterministic) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const AttnCase c{2, 150, 3, 64, 0, 0, 0.1f};
  Run r = forward(c);
  const DType t = dt();
  Pair dout = random(Shape{c.B, c.T, c.H, c.D}, t);
  Buffer d1 = gpu().empty(Shape{c.B, c.T, 3 * c.H, c.D}, t), d2 = gpu().empty(Shape{c.B, c.T, 3 * c.H, c.D}, t);
  gpu().attention_backward(dout.gpu, r.qkv.gpu, r.out.gpu, r.lse.gpu, d1, shape_of(c), drop_key(c.p));
  gpu().attention_backward(dout.gpu, r.qkv.gpu, r.out.gpu, r.lse.gpu, d2, shape_of(c), drop_key(c.p));
  std::vector<unsigned char> b1(d1.t().nbytes()), b2(d2.t().nbytes());
  gpu().copy_to_host(b1.data(), d1);
  gpu().copy_to_host(b2.data(), d2);
  EXPECT_EQ(0, std::memcmp(b1.data(), b2.data(), b1.size())) << "dqkv differs between two identical runs";
}

// Dropout really drops (p = 0.5 changes the output) and only the key decides: the same key
// gives the same output, a different sample_base a different one.
TEST_P(CudaAttention, DropoutMaskFollowsTheKey) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const AttnCase c{1, 70, 2, 64, 0, 0, 0.5f};
  Pair qkv = random(Shape{c.B, c.T, 3 * c.H, c.D}, dt());
  Buffer o0 = gpu().empty(Shape{c.B, c.T, c.H, c.D}, dt()), o1 = gpu().empty(Shape{c.B, c.T, c.H, c.D}, dt()),
         o2 = gpu().empty(Shape{c.B, c.T, c.H, c.D}, dt()), lse = gpu().empty(Shape{c.B, c.H, c.T}, DType::F32);
  gpu().attention_forward(qkv.gpu, o0, lse, shape_of(c), drop_key(0.f));
  gpu().attention_forward(qkv.gpu, o1, lse, shape_of(c), drop_key(0.5f));
  DropoutKey other = drop_key(0.5f);
  other.sample_base += 1;
  gpu().attention_forward(qkv.gpu, o2, lse, shape_of(c), other);
  const std::vector<float> v0 = host(gpu(), o0), v1 = host(gpu(), o1), v2 = host(gpu(), o2);
  EXPECT_NE(v0, v1);
  EXPECT_NE(v1, v2);
}

TEST_P(CudaAttention, RejectsBadShapes) {
  TRIDENT_SKIP_WITHOUT_GPU();
  AttentionShape s;
  s.B = 1;
  s.T = 8;
  s.H = 1;
  s.D = 136;  // > 128
  Buffer qkv = gpu().zeros(Shape{1, 8, 3, 136}, dt());
  Buffer out = gpu().empty(Shape{1, 8, 1, 136}, dt());
  Buffer lse = gpu().empty(Shape{1, 1, 8}, DType::F32);
  EXPECT_THROW(gpu().attention_forward(qkv, out, lse, s, DropoutKey{}), InternalError);
  s.D = 64;  // numel mismatch
  EXPECT_THROW(gpu().attention_forward(qkv, out, lse, s, DropoutKey{}), InternalError);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
