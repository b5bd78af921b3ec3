// kernels/cuda/cuda_layernorm.cu on the CPU emulator vs the CPU backend: the forward (out,
// mean, rstd), its fusion with the residual add (resid, also in place over x; also with
// the branch's dropout, which must draw dropout_forward's mask; the row-in-registers
// forward both as the walking kernel, several rows per warp on an emulated GPU of 3 blocks,
// with the plain forward's next rows in shared memory (the default) or in registers
// (TRIDENT_LN_FWD_RING=0), and one row
// per warp (TRIDENT_LN_FWD_ROWS_PER_WARP=1), which must all give the same bits), and
// the backward (dx, dgamma, dbeta, all +=), for awkward row counts and widths, every float
// dtype, 16-byte vectorised and scalar paths (aligned widths with matching dtypes vs odd
// widths, mixed dtypes and misaligned pointers), and fp32 gradients for 16-bit
// activations. The backward's fused kernel (a block per chunk of rows) is checked at GPT-2's
// widths and at the limits of its geometry, its fallback on what it does not cover (mixed
// dtypes, misalignment, odd or too wide rows); each test also checks which path was taken.
// The backward is run twice under different thread schedules and must give the same bits.
//
// What it cannot check: device math precision (rsqrtf is the host's 1/sqrtf here), nvcc's
// fused multiply-adds.
#include "emu_cuda_layernorm.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"
#include "launch_reduce.h"
#include "tests/scoped_env.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <string>

namespace trident::cuda {
// The fallback backward's chunk count comes from cuda_reduce.cu's host function, which this
// binary does not link: the emulated twin stands in for it.
int column_chunks(int64_t rows, int64_t cols, int vector) { return emu_reduce::column_chunks(rows, cols, vector); }
}  // namespace trident::cuda

namespace trident::cuda::emu_layernorm {
namespace {

// The launchers' kernel choices are the file's own (forward_typed, backward_typed, extracted
// with the kernels), with host vectors for the scratch memory. The forward's walking kernel
// sees a GPU that holds `resident_blocks` of its blocks at once (3 blocks, 24 warps: rows
// past 24 are a warp's second, third ... row).
int64_t resident_blocks = 3;
ForwardPath launch_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                           const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd, int T = 1,
                           const DropoutKey& branch_drop = DropoutKey{}) {
  if (x.rows() == 0 || x.cols() == 0) return ForwardPath{};
  return forward_typed(x, branch, resid, gamma, beta, out, mean, rstd, T, branch_drop, nullptr,
                       [](const void*, int) { return resident_blocks; });
}

BackwardPath layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  if (x.rows() == 0 || x.cols() == 0) return BackwardPath{};
  std::deque<std::vector<float>> partials;
  return backward_typed(
      dout, x, gamma, mean, rstd, dx, dgamma, dbeta, nullptr,
      [&](size_t bytes) { return partials.emplace_back(emu_reduce::nan_scratch<float>(bytes / sizeof(float))).data(); },
      [&](const float* pg, const float* pb, int64_t chunks, const Tensor& dg, const Tensor& db) {
        emu_reduce::column_partials_accumulate(pg, dg.data, dg.dtype, pb, db.data, db.dtype, chunks, x.cols());
      });
}

}  // namespace
}  // namespace trident::cuda::emu_layernorm

namespace trident::emu_test {
namespace {

namespace kl = ::trident::cuda::emu_layernorm;

class EmulatedLayerNorm : public EmuVsCpuDtype {
 protected:
  // A tensor whose data starts one element past a 64-byte boundary (no 16-byte vectors).
  Tensor misaligned(Buffer& storage, const Buffer& src) {
    const Tensor& s = src.t();
    storage = cpu().empty(Shape{s.numel() + 1}, s.dtype);
    Tensor t(static_cast<char*>(storage.t().data) + dtype_size(s.dtype), s.shape, s.dtype, Device::Cpu);
    std::memcpy(t.data, s.data, s.nbytes());
    return t;
  }

  // drop_T > 0: the branch's dropout (p 0.3) with drop_T rows per sample.
  void forward(int64_t N, int64_t C, DType param_dt, bool misalign, bool residual, bool in_place, int drop_T = 0) {
    SCOPED_TRACE(shape_label(N, C, dt()) + " params " + dtype_name(param_dt) + (misalign ? " misaligned" : "") +
                 (residual ? (in_place ? " residual in place" : " residual") : "") +
                 (drop_T > 0 ? " dropout T=" + std::to_string(drop_T) : ""));
    Buffer xb = random(Shape{N, C}, dt(), -1.f, 3.f), keep;  // non-zero mean
    const Tensor x = misalign ? misaligned(keep, xb) : xb.t();
    Buffer gamma = random(Shape{C}, param_dt, 0.5f, 1.5f), beta = random(Shape{C}, param_dt, -0.5f, 0.5f);
    Buffer branch = random(Shape{N, C}, dt());
    Buffer out = filled(Shape{N, C}, param_dt, NAN), mean = filled(Shape{N}, DType::F32, NAN),
           rstd = filled(Shape{N}, DType::F32, NAN);
    Buffer e_out = clone(out), e_mean = clone(mean), e_rstd = clone(rstd);
    if (!residual) {
      cpu().layernorm_forward(x, gamma, beta, out, mean, rstd);
      kl::launch_forward(x, Tensor(), Tensor(), gamma, beta, e_out, e_mean, e_rstd);
    } else {
      // In place, each side works on its own copy of x; otherwise both read x itself.
      Buffer x2 = clone(x), resid = filled(Shape{N, C}, dt(), NAN), e_resid = clone(resid);
      const Tensor ex = in_place ? x2.t() : x;
      const Tensor r = in_place ? x : resid.t(), e_r = in_place ? x2.t() : e_resid.t();
      if (drop_T > 0) {
        DropoutKey drop;
        drop.p = 0.3f;
        drop.seed = 0xD20Full;
        drop.site = 5 * kSitesPerLayer + kDropMlpOut;
        drop.sample_base = 77;
        Buffer dropped = clone(branch);  // the CPU's composition drops its branch in place
        cpu().dropout_residual_layernorm_forward(x, dropped, drop_T, drop, r, gamma, beta, out, mean, rstd);
        kl::launch_forward(ex, branch, e_r, gamma, beta, e_out, e_mean, e_rstd, drop_T, drop);
        int zeros = 0;  // about p of the branch is dropped: resid = x exactly there
        for (int64_t i = 0; i < N * C; ++i) zeros += load_as_float(dropped.t().data, dt(), static_cast<size_t>(i)) == 0.f;
        EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(N * C), 0.3, N * C > 500 ? 0.08 : 0.3);
      } else {
        cpu().residual_layernorm_forward(x, branch, r, gamma, beta, out, mean, rstd);
        kl::launch_forward(ex, branch, e_r, gamma, beta, e_out, e_mean, e_rstd);
      }
      // The residual is one rounded add on both sides (after the same dropout): the same bits.
      EXPECT_TRUE(same_bytes(e_r, r)) << "resid";
      expect_close(e_r, r, Tol{0, 0}, "residual_layernorm resid");
    }
    expect_close(e_mean, mean, Tol{1e-5, 1e-6}, "layernorm mean");
    expect_close(e_rstd, rstd, Tol{1e-5, 1e-6}, "layernorm rstd");
    expect_close(e_out, out, storage_tol(param_dt, 1e-5, 1e-5), std::string("layernorm out ") + dtype_name(param_dt));
  }

  // The backward from the CPU's saved statistics on both sides; gradients start non-zero.
  // dx_dt: dx's dtype, param_dt: dgamma's and dbeta's. Returns the path the launcher took.
  kl::BackwardPath backward(int64_t N, int64_t C, DType dx_dt, DType param_dt, bool misalign) {
    SCOPED_TRACE(shape_label(N, C, dt()) + " dx " + dtype_name(dx_dt) + " dgamma/dbeta " + dtype_name(param_dt) +
                 (misalign ? " misaligned" : ""));
    Buffer xb = random(Shape{N, C}, dt(), -1.f, 3.f), keep;
    const Tensor x = misalign ? misaligned(keep, xb) : xb.t();
    Buffer gamma = random(Shape{C}, dt(), 0.5f, 1.5f), beta = random(Shape{C}, dt(), -0.5f, 0.5f);
    Buffer out = cpu().empty(Shape{N, C}, dt()), mean = cpu().empty(Shape{N}, DType::F32),
           rstd = cpu().empty(Shape{N}, DType::F32);
    cpu().layernorm_forward(x, gamma, beta, out, mean, rstd);
    Buffer dout = random(Shape{N, C}, dt());
    Buffer dx = random(Shape{N, C}, dx_dt), dgamma = random(Shape{C}, param_dt), dbeta = random(Shape{C}, param_dt);
    Buffer e_dx = clone(dx), e_dgamma = clone(dgamma), e_dbeta = clone(dbeta);
    cpu().layernorm_backward(dout, x, gamma, mean, rstd, dx, dgamma, dbeta);
    const kl::BackwardPath path = kl::layernorm_backward(dout, x, gamma, mean, rstd, e_dx, e_dgamma, e_dbeta);
    const std::string path_name = path.fused ? " fused" : " fallback";
    const std::string g = std::string(" ") + dtype_name(dx_dt) + path_name;
    const std::string pgn = std::string(" ") + dtype_name(param_dt) + path_name;
    expect_close(e_dx, dx, storage_tol(dx_dt, 1e-4, 1e-5), "layernorm dx" + g);
    expect_close(e_dgamma, dgamma, storage_tol(param_dt, 1e-4, 1e-4), "layernorm dgamma" + pgn);
    expect_close(e_dbeta, dbeta, storage_tol(param_dt, 1e-4, 1e-4), "layernorm dbeta" + pgn);
    return path;
  }
  kl::BackwardPath backward(int64_t N, int64_t C, DType grad_dt, bool misalign) {
    return backward(N, C, grad_dt, grad_dt, misalign);
  }
  bool is_16bit() const { return dt() != DType::F32; }
};

// Rows whose variance (~3e-7) is far below LayerNorm's eps (1e-5): rstd = 1/sqrt(var + eps)
// is ~310 there, where a kernel without eps (or with 1e-12) gives ~1700. The other tests'
// rows (variance ~1.3) hide eps below their tolerances. The kernel and the CPU backend, each
// against a double-precision reference from the stored x.
TEST_P(EmulatedLayerNorm, TinyVarianceRowsTakeEps) {
  const int64_t N = 9, C = 136;
  Buffer x = random(Shape{N, C}, dt(), -1e-3f, 1e-3f);
  Buffer gamma = random(Shape{C}, dt(), 0.5f, 1.5f), beta = random(Shape{C}, dt(), -0.5f, 0.5f);
  const std::vector<double> xv = values(x.t());
  for (const bool on_emulator : {false, true}) {
    SCOPED_TRACE(on_emulator ? "emulated kernel" : "CPU backend");
    Buffer out = filled(Shape{N, C}, dt(), NAN), mean = filled(Shape{N}, DType::F32, NAN),
           rstd = filled(Shape{N}, DType::F32, NAN);
    if (on_emulator) {
      kl::launch_forward(x.t(), Tensor(), Tensor(), gamma, beta, out, mean, rstd);
    } else {
      cpu().layernorm_forward(x, gamma, beta, out, mean, rstd);
    }
    const std::vector<double> got = values(rstd.t());
    for (int64_t r = 0; r < N; ++r) {
      double mu = 0, var = 0;
      for (int64_t c = 0; c < C; ++c) mu += xv[static_cast<size_t>(r * C + c)];
      mu /= static_cast<double>(C);
      for (int64_t c = 0; c < C; ++c) var += std::pow(xv[static_cast<size_t>(r * C + c)] - mu, 2);
      var /= static_cast<double>(C);  // biased, as PyTorch
      const double want = 1.0 / std::sqrt(var + 1e-5);
      EXPECT_NEAR(got[static_cast<size_t>(r)], want, 1e-4 * want) << "row " << r << " variance " << var;
    }
  }
}

TEST_P(EmulatedLayerNorm, Forward) {
  for (int64_t N : awkward_rows())
    for (int64_t C : awkward_cols()) forward(N, C, dt(), false, false, false);
  forward(9, 136, DType::F32, false, false, false);  // fp32 parameters and output: scalar path
  forward(9, 136, dt(), true, false, false);         // misaligned x: scalar path
}

TEST_P(EmulatedLayerNorm, ResidualForward) {
  for (int64_t N : awkward_rows())
    for (int64_t C : {int64_t{3}, int64_t{65}, int64_t{136}}) forward(N, C, dt(), false, true, false);
  forward(7, 136, dt(), false, true, true);  // resid aliases x
  forward(7, 136, dt(), true, true, false);  // misaligned x: scalar path
}

// Dropout on the branch in the same pass, the mask of dropout_forward: several samples
// (rows per sample T), vector and scalar paths (odd C, misaligned x), resid aliasing x.
TEST_P(EmulatedLayerNorm, DropoutResidualForward) {
  for (int T : {1, 3, 12}) forward(12, 136, dt(), false, true, false, T);
  forward(12, 65, dt(), false, true, false, 4);  // scalar path: one Philox block per element
  forward(12, 136, dt(), true, true, false, 6);  // misaligned x: scalar path
  forward(12, 136, dt(), false, true, true, 6);  // resid aliases x
}

// Rows of 6, 10 and 17 vectors per lane: the forward with the row in registers at 8 and 16
// vectors per lane, and the three-pass kernel past 16; plain, residual and with dropout.
TEST_P(EmulatedLayerNorm, ForwardRowWidths) {
  const int64_t kv = 16 / static_cast<int64_t>(dtype_size(dt()));
  for (int64_t per_lane : {5, 9, 16}) {
    const int64_t C = kv * (32 * per_lane + 1);
    forward(5, C, dt(), false, false, false);
    forward(6, C, dt(), false, true, false);
    forward(6, C, dt(), false, true, false, 3);
  }
}

// The row-in-registers kernel sums in the three-pass kernel's order: the same bits for
// out, mean and rstd (and resid).
TEST_P(EmulatedLayerNorm, RowKernelsAgreeBitForBit) {
  cuda::dispatch_float(dt(), "test", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = cuda::kVec16<T>;
    const int64_t N = 9, C = kV * (32 * 7 + 3);  // 8 vectors per lane at most
    Buffer x = random(Shape{N, C}, dt(), -1.f, 3.f), branch = random(Shape{N, C}, dt());
    Buffer g = random(Shape{C}, dt(), 0.5f, 1.5f), b = random(Shape{C}, dt(), -0.5f, 0.5f);
    Buffer out[2], resid[2], mean[2], rstd[2];
    cuda::DropoutParams drop = cuda::dropout_params(DropoutKey{0.25f, 5, 9, 11});
    for (int k = 0; k < 2; ++k) {
      out[k] = filled(Shape{N, C}, dt(), NAN);
      resid[k] = filled(Shape{N, C}, dt(), NAN);
      mean[k] = filled(Shape{N}, DType::F32, NAN);
      rstd[k] = filled(Shape{N}, DType::F32, NAN);
    }
    const dim3 grid(static_cast<unsigned>((N + kl::kRowsPerBlock - 1) / kl::kRowsPerBlock)), block(32 * kl::kRowsPerBlock);
    emu::launch(grid, block, 0, kl::layernorm_forward_kernel<T, kV, true>, x.t().template ptr<T>(),
                branch.t().template ptr<T>(), resid[0].t().template ptr<T>(), cuda::any_ptr(g), cuda::any_ptr(b), cuda::any_ptr(out[0]),
                mean[0].t().template ptr<float>(), rstd[0].t().template ptr<float>(), N, C, drop, int64_t{3});
    emu::launch(grid, block, 0, kl::layernorm_forward_rows_kernel<T, 8, true>, x.t().template ptr<T>(),
                branch.t().template ptr<T>(), resid[1].t().template ptr<T>(), g.t().template ptr<T>(),
                b.t().template ptr<T>(), out[1].t().template ptr<T>(), mean[1].t().template ptr<float>(),
                rstd[1].t().template ptr<float>(), N, C, drop, int64_t{3});
    EXPECT_TRUE(same_bytes(resid[1], resid[0])) << "resid";
    EXPECT_TRUE(same_bytes(out[1], out[0])) << "out";
    EXPECT_TRUE(same_bytes(mean[1], mean[0])) << "mean";
    EXPECT_TRUE(same_bytes(rstd[1], rstd[0])) << "rstd";
  });
}

using ::trident::test::ScopedEnv;
// TRIDENT_LN_FWD_ROWS_PER_WARP, and TRIDENT_LN_FWD_RING (the plain forward's rows in flight
// to shared memory).
struct ScopedRowsPerWarp : ScopedEnv {
  explicit ScopedRowsPerWarp(const char* value) : ScopedEnv(kl::kRowsPerWarpEnv, value) {}
};
struct ScopedRing : ScopedEnv {
  explicit ScopedRing(const char* value) : ScopedEnv("TRIDENT_LN_FWD_RING", value) {}
};

// The walking forward (several rows per warp) against the one-row-per-warp kernel
// (TRIDENT_LN_FWD_ROWS_PER_WARP=1): the same bits of out, mean, rstd and resid for every
// setting, and the grid each setting asks for; each setting with TRIDENT_LN_FWD_RING unset,
// which takes the ring kernel for the plain forward (not "1" rows per warp), and 0, which
// takes the register-walking kernel; neither changes anything with a residual. drop_T > 0: the branch's dropout.
struct RowsPerWarpCase {
  const char* setting;  // nullptr: unset
  int64_t resident;     // blocks the emulated GPU holds
};
class EmulatedLayerNormWalk : public EmulatedLayerNorm {
 protected:
  void walk_matches_rows(int64_t N, int64_t C, bool residual, int drop_T, bool in_place = false) {
    SCOPED_TRACE(shape_label(N, C, dt()) + (residual ? (in_place ? " residual in place" : " residual") : "") +
                 (drop_T > 0 ? " dropout T=" + std::to_string(drop_T) : ""));
    Buffer x = random(Shape{N, C}, dt(), -1.f, 3.f), branch = random(Shape{N, C}, dt());
    Buffer g = random(Shape{C}, dt(), 0.5f, 1.5f), b = random(Shape{C}, dt(), -0.5f, 0.5f);
    DropoutKey drop;
    if (drop_T > 0) {
      drop.p = 0.3f;
      drop.seed = 0xD20Full;
      drop.site = 3;
      drop.sample_base = 5;
    }
    struct Result {
      Buffer x, out, resid, mean, rstd;
      kl::ForwardPath path;
    };
    auto run = [&](const char* setting, int64_t resident, const char* ring = nullptr) {
      ScopedRowsPerWarp env(setting);
      ScopedRing ring_env(ring);
      const int64_t keep_resident = kl::resident_blocks;
      kl::resident_blocks = resident;
      Result r;
      r.x = clone(x);  // in place: the residual overwrites it
      r.out = filled(Shape{N, C}, dt(), NAN);
      r.resid = filled(Shape{N, C}, dt(), NAN);
      r.mean = filled(Shape{N}, DType::F32, NAN);
      r.rstd = filled(Shape{N}, DType::F32, NAN);
      const Tensor br = residual ? branch.t() : Tensor(), rs = residual ? (in_place ? r.x.t() : r.resid.t()) : Tensor();
      r.path = kl::launch_forward(r.x, br, rs, g, b, r.out, r.mean, r.rstd, drop_T > 0 ? drop_T : 1, drop);
      kl::resident_blocks = keep_resident;
      return r;
    };
    const Result want = run("1", 3);
    const int64_t blocks = (N + kl::kRowsPerBlock - 1) / kl::kRowsPerBlock;
    const int64_t kv = 16 / static_cast<int64_t>(dtype_size(dt()));
    const bool in_registers = (C / kv + 31) / 32 <= kl::kMaxRowVectors;
    EXPECT_EQ(want.path.in_registers, in_registers);
    EXPECT_FALSE(want.path.walk);
    EXPECT_EQ(want.path.grid, static_cast<unsigned>(blocks));
    const std::vector<RowsPerWarpCase> cases = {
        {nullptr, 3}, {"", 1}, {"0", 2}, {"0", 0}, {"0", 1000}, {"2", 3}, {"5", 3}, {"65536", 3}};
    for (const RowsPerWarpCase& c : cases)
      for (const char* ring : {static_cast<const char*>(nullptr), "0"}) {
        SCOPED_TRACE(std::string(kl::kRowsPerWarpEnv) + "=" + (c.setting ? c.setting : "(unset)") + ", " +
                     std::to_string(c.resident) + " resident blocks" + (ring ? ", TRIDENT_LN_FWD_RING=0" : ""));
        const Result got = run(c.setting, c.resident, ring);
        EXPECT_EQ(got.path.in_registers, in_registers);
        if (in_registers) {  // unset or empty: walking on the warps that fit (the default)
          const int per_warp = c.setting == nullptr || c.setting[0] == '\0' ? 0 : std::atoi(c.setting);
          EXPECT_EQ(got.path.walk, per_warp != 1);
          // Resident 0 stands for a GPU whose blocks cannot hold the ring: the walking kernel.
          EXPECT_EQ(got.path.ring, ring == nullptr && !residual && per_warp != 1 && c.resident > 0);
          const int64_t want_grid = per_warp == 0 ? std::max<int64_t>(1, std::min(blocks, c.resident))
                                                  : (N + 8 * per_warp - 1) / (8 * per_warp);
          EXPECT_EQ(got.path.grid, static_cast<unsigned>(want_grid));
        }
        EXPECT_TRUE(same_bytes(got.out, want.out)) << "out";
        EXPECT_TRUE(same_bytes(got.mean, want.mean)) << "mean";
        EXPECT_TRUE(same_bytes(got.rstd, want.rstd)) << "rstd";
        if (residual) {
          EXPECT_TRUE(same_bytes(in_place ? got.x : got.resid, in_place ? want.x : want.resid)) << "resid";
        }
      }
  }
};

// GPT-2's widths (768, 1600, 2048), 4096 (16 vectors per lane of 16-bit values; fp32 takes
// the three-pass kernel), odd vector counts (101 and 289: partly used vectors per lane),
// and row counts below the warps of a block, between blocks and past what the emulated GPU
// holds; plain, residual (also in place) and with the dropout.
TEST_P(EmulatedLayerNormWalk, SameBitsAsOneRowPerWarp) {
  const int64_t kv = 16 / static_cast<int64_t>(dtype_size(dt()));
  for (int64_t C : {int64_t{768}, int64_t{1600}, int64_t{2048}, int64_t{4096}, kv * 101, kv * 289})
    for (int64_t N : {int64_t{1}, int64_t{5}, int64_t{37}}) {
      walk_matches_rows(N, C, false, 0);
      walk_matches_rows(N, C, true, 0);
      walk_matches_rows(N, C, true, N == 37 ? 37 : 1);
    }
  walk_matches_rows(100, 768, true, 4);         // 4 or 5 rows per warp, 25 samples
  walk_matches_rows(36, kv * 101, true, 3, true);  // resid aliases x
  walk_matches_rows(36, 2048, true, 0, true);
}

// The walking kernel against the CPU backend at the bench's shape class, also with the rows
// spread over one block, and bad settings of the variable are errors.
TEST_P(EmulatedLayerNormWalk, AgainstCpu) {
  for (const char* setting : {"0", "1", "3"}) {
    ScopedRowsPerWarp env(setting);
    SCOPED_TRACE(std::string(kl::kRowsPerWarpEnv) + "=" + setting);
    forward(41, 2048, dt(), false, false, false);
    forward(41, 2048, dt(), false, true, false);
    forward(42, 1600, dt(), false, true, false, 6);
  }
  forward(300, 768, dt(), false, false, false);  // the ring: 12 or 13 rows a warp through its 3 buffers
  {
    ScopedRing ring("0");  // the register-walking kernel
    SCOPED_TRACE("TRIDENT_LN_FWD_RING=0");
    forward(41, 2048, dt(), false, false, false);
    forward(300, 768, dt(), false, false, false);
  }
  const int64_t keep = kl::resident_blocks;
  kl::resident_blocks = 1;
  forward(41, 768, dt(), false, true, false, 41);
  kl::resident_blocks = keep;
}

TEST_P(EmulatedLayerNormWalk, BadSettingIsAnError) {
  for (const char* bad : {"abc", "-1", "1.5", "2x", "65537"}) {
    ScopedRowsPerWarp env(bad);
    Buffer x = random(Shape{2, 64}, dt()), g = random(Shape{64}, dt()), b = random(Shape{64}, dt());
    Buffer out = filled(Shape{2, 64}, dt(), 0.f), mean = filled(Shape{2}, DType::F32, 0.f),
           rstd = filled(Shape{2}, DType::F32, 0.f);
    EXPECT_THROW(kl::launch_forward(x, Tensor(), Tensor(), g, b, out, mean, rstd), std::exception) << bad;
    try {
      kl::launch_forward(x, Tensor(), Tensor(), g, b, out, mean, rstd);
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("TRIDENT_LN_FWD_ROWS_PER_WARP"), std::string::npos) << e.what();
    }
  }
}

// Awkward shapes. C = 136 (a multiple of 8) takes the fused path (17 or 34 vectors: one
// partly used warp); 33 rows are two full 16-row chunks and one of a single row.
TEST_P(EmulatedLayerNorm, Backward) {
  for (int64_t N : awkward_rows())
    for (int64_t C : awkward_cols()) EXPECT_EQ(backward(N, C, dt(), false).fused, C == 136) << N << "x" << C;
  EXPECT_FALSE(backward(33, 130, DType::F32, false).fused);  // fp32 gradients for 16-bit activations
  // ... with a vector-friendly width: the fallback's vector path for fp32 dx of 16-bit x.
  EXPECT_EQ(backward(33, 136, DType::F32, false).fused, !is_16bit());
  EXPECT_FALSE(backward(100, 17, dt(), false).fused);  // several row chunks in the dgamma/dbeta pass
  EXPECT_FALSE(backward(9, 136, dt(), true).fused);    // misaligned x: scalar path
  // Rows too wide for one block of the fused kernel (C > 8192): the fallback's vector path.
  EXPECT_FALSE(backward(3, 8200, dt(), false).fused);
}

// The fused backward at GPT-2's widths (768, 1600, 2048, 5760) and its limits (4096: 512
// threads of one vector; 8192: 512 threads of 2 vectors (16-bit) or 4 (fp32)); 1600 and
// 5760 leave threads of the last warp or vectors of the last pass unused. 37 rows: chunks
// of 16, 16 and 5 rows. dgamma/dbeta in fp32 (master gradients) or in the model dtype.
TEST_P(EmulatedLayerNorm, BackwardFused) {
  const int kv = is_16bit() ? 8 : 4;
  for (int64_t C : {int64_t{768}, int64_t{1600}, int64_t{2048}, int64_t{4096}, int64_t{5760}, int64_t{8192}}) {
    const kl::BackwardPath p = backward(37, C, dt(), dt(), false);
    EXPECT_TRUE(p.fused) << "C=" << C;
    EXPECT_EQ(p.chunks, 3) << "C=" << C;
    const int64_t vectors = C / kv;
    const int64_t want_vpt = vectors <= 512 ? 1 : vectors <= 1024 ? 2 : 4;
    EXPECT_EQ(p.vpt, want_vpt) << "C=" << C;
    EXPECT_EQ(p.threads, ((vectors + want_vpt - 1) / want_vpt + 31) / 32 * 32) << "C=" << C;
  }
  EXPECT_TRUE(backward(37, 2048, dt(), DType::F32, false).fused);
  EXPECT_TRUE(backward(16, 1600, dt(), DType::F32, false).fused);  // exactly one chunk
  EXPECT_TRUE(backward(1, 768, dt(), dt(), false).fused);          // one row
}

// The fused geometry depends on the shape only; rows per chunk grow once the partials
// would pass 16 MiB or the chunks 512.
TEST(EmulatedLayerNormGeometry, FusedGeometry) {
  const kl::FusedGeometry a = kl::fused_geometry(8192, 2048, 8);  // gpt2-1.3b, bf16
  EXPECT_EQ(a.vpt, 1);
  EXPECT_EQ(a.threads, 256);
  EXPECT_EQ(a.rows_per_chunk, 16);
  EXPECT_EQ(a.chunks, 512);
  const kl::FusedGeometry b = kl::fused_geometry(8192, 5760, 8);  // gpt2-16b, bf16
  EXPECT_EQ(b.vpt, 2);
  EXPECT_EQ(b.threads, 384);
  EXPECT_EQ(b.rows_per_chunk, 23);  // at most 16 MiB / (8 * 5760) = 364 chunks
  EXPECT_EQ(b.chunks, 357);
  const kl::FusedGeometry c = kl::fused_geometry(100000, 8192, 4);  // fp32, 4 vectors per thread
  EXPECT_EQ(c.vpt, 4);
  EXPECT_EQ(c.threads, 512);
  EXPECT_EQ(c.rows_per_chunk, 391);
  EXPECT_EQ(c.chunks, 256);
  const kl::FusedGeometry d = kl::fused_geometry(32768, 2048, 8);  // the bench's shape: 512, not 1024
  EXPECT_EQ(d.rows_per_chunk, 64);
  EXPECT_EQ(d.chunks, 512);
  const kl::FusedGeometry e = kl::fused_geometry(100000, 768, 8);  // gpt2-124m, many rows
  EXPECT_EQ(e.rows_per_chunk, 196);
  EXPECT_EQ(e.chunks, 511);
  EXPECT_EQ(kl::fused_geometry(10, 8200, 8).vpt, 0);  // too wide: fallback
  EXPECT_EQ(kl::fused_geometry(10, 8200, 4).vpt, 0);
  EXPECT_EQ(kl::fused_geometry(10, 16384, 8).vpt, 0);
}

// Two thread schedules, the same bits: the fused path (dx in the model dtype; 100 rows are
// 7 chunks, C = 1600 leaves threads idle) and the fallback (fp32 dx of 16-bit activations,
// misaligned x).
TEST_P(EmulatedLayerNorm, BackwardIsDeterministic) {
  struct Case {
    int64_t N, C;
    DType dx_dt;
    bool misalign, fused;
  };
  const std::vector<Case> cases = {{100, 136, dt(), false, true},
                                   {100, 1600, dt(), false, true},
                                   {100, 136, DType::F32, false, !is_16bit()},
                                   {100, 136, dt(), true, false}};
  for (const Case& c : cases) {
    const int64_t N = c.N, C = c.C;
    SCOPED_TRACE(shape_label(N, C, dt()) + " dx " + dtype_name(c.dx_dt) + (c.misalign ? " misaligned" : ""));
    Buffer xb = random(Shape{N, C}, dt()), keep, gamma = random(Shape{C}, dt()), beta = random(Shape{C}, dt());
    const Tensor x = c.misalign ? misaligned(keep, xb) : xb.t();
    Buffer dout = random(Shape{N, C}, dt());
    Buffer out = cpu().empty(Shape{N, C}, dt()), mean = cpu().empty(Shape{N}, DType::F32),
           rstd = cpu().empty(Shape{N}, DType::F32);
    cpu().layernorm_forward(x, gamma, beta, out, mean, rstd);
    std::vector<Buffer> first;
    for (int rep = 0; rep < 2; ++rep) {
      emu::set_schedule_seed(100 + rep);
      Buffer dx = filled(Shape{N, C}, c.dx_dt, 0.f), dg = filled(Shape{C}, DType::F32, 0.f),
             db = filled(Shape{C}, DType::F32, 0.f);
      EXPECT_EQ(kl::layernorm_backward(dout, x, gamma, mean, rstd, dx, dg, db).fused, c.fused);
      if (rep == 0) {
        first.push_back(std::move(dx));
        first.push_back(std::move(dg));
        first.push_back(std::move(db));
      } else {
        EXPECT_TRUE(same_bytes(dx, first[0])) << "dx differs between two thread schedules";
        EXPECT_TRUE(same_bytes(dg, first[1])) << "dgamma differs between two thread schedules";
        EXPECT_TRUE(same_bytes(db, first[2])) << "dbeta differs between two thread schedules";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedLayerNorm, TRIDENT_EMU_DTYPES, dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedLayerNormWalk, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
