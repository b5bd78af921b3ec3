// GPU vs CPU: LayerNorm forward (out, mean, rstd) and backward (dx, dgamma, dbeta, all +=),
// for widths below a warp, awkward, and GPT-2 XL's 1600; per dtype. The backward's fused
// kernel at GPT-2's widths (768 ... 5760), its limits (8192) and many row chunks, and its
// fallback (mixed dtypes, odd or too wide rows). The residual add fused in front of it
// (residual_layernorm_forward), also with the branch's dropout. The forward's settings of
// TRIDENT_LN_FWD_ROWS_PER_WARP and TRIDENT_LN_FWD_RING give the same bits.
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

class LayerNorm : public CudaVsCpuDtype {
 protected:
  void check(int64_t N, int64_t C, DType grad_dt) { check(N, C, grad_dt, grad_dt); }
  // dx in grad_dt, dgamma/dbeta in param_grad_dt.
  void check(int64_t N, int64_t C, DType grad_dt, DType param_grad_dt) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " grads " << dtype_name(grad_dt)
                                      << " dgamma/dbeta " << dtype_name(param_grad_dt));
    Pair x = random(Shape{N, C}, dt(), -1.f, 3.f);  // non-zero mean
    Pair gamma = random(Shape{C}, dt(), 0.5f, 1.5f);
    Pair beta = random(Shape{C}, dt(), -0.5f, 0.5f);
    Pair out{cpu().empty(Shape{N, C}, dt()), gpu().empty(Shape{N, C}, dt())};
    Pair mean{cpu().empty(Shape{N}, DType::F32), gpu().empty(Shape{N}, DType::F32)};
    Pair rstd{cpu().empty(Shape{N}, DType::F32), gpu().empty(Shape{N}, DType::F32)};
    cpu().layernorm_forward(x.cpu, gamma.cpu, beta.cpu, out.cpu, mean.cpu, rstd.cpu);
    gpu().layernorm_forward(x.gpu, gamma.gpu, beta.gpu, out.gpu, mean.gpu, rstd.gpu);
    expect_close(mean, Tol{1e-5, 1e-6}, "mean");
    expect_close(rstd, Tol{1e-5, 1e-6}, "rstd");
    expect_close(out, storage_tol(dt(), 1e-5, 1e-5), "layernorm out");

    // Backward from the CPU's saved statistics on both sides, so only the backward differs.
    gpu().copy_from_host(mean.gpu, host_cpu(mean).data());
    gpu().copy_from_host(rstd.gpu, host_cpu(rstd).data());
    Pair dout = random(Shape{N, C}, dt());
    Pair dx = random(Shape{N, C}, grad_dt);  // += into existing values
    Pair dgamma = random(Shape{C}, param_grad_dt), dbeta = random(Shape{C}, param_grad_dt);
    cpu().layernorm_backward(dout.cpu, x.cpu, gamma.cpu, mean.cpu, rstd.cpu, dx.cpu, dgamma.cpu, dbeta.cpu);
    gpu().layernorm_backward(dout.gpu, x.gpu, gamma.gpu, mean.gpu, rstd.gpu, dx.gpu, dgamma.gpu, dbeta.gpu);
    expect_close(dx, storage_tol(grad_dt, 1e-4, 1e-5), "dx");
    expect_close(dgamma, storage_tol(param_grad_dt, 1e-4, 1e-4), "dgamma");
    expect_close(dbeta, storage_tol(param_grad_dt, 1e-4, 1e-4), "dbeta");
  }
};

TEST_P(LayerNorm, AwkwardShape) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(37, 129, dt());
  check(37, 129, DType::F32);  // fp32 gradient buffers for 16-bit activations
}

TEST_P(LayerNorm, NarrowAndWideRows) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(5, 3, dt());
  check(7, 1600, dt());
  check(1000, 64, DType::F32);  // many rows: several chunks in the dgamma/dbeta pass
}

// The fused backward (dx in the activations' dtype, 16-byte aligned, C a multiple of 8 and
// at most 8192): GPT-2's widths, the widest rows it takes (8192: 2 vectors per thread for
// 16-bit, 4 for fp32), rows per chunk grown by the partials' size cap (4100 x 8192: 242
// chunks of 17 rows), many chunks in the finish kernel (4103 x 1024: 257 chunks of 16 rows,
// the last one of 7), and fp32 master gradients for dgamma/dbeta.
TEST_P(LayerNorm, FusedBackwardWidths) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(37, 768, dt());
  check(37, 2048, dt());
  check(37, 2048, dt(), DType::F32);
  check(33, 5760, dt());
  check(9, 8192, dt());
  check(4103, 1024, dt());
  check(4100, 8192, dt(), DType::F32);
  check(3, 8200, dt());  // too wide for one block: the fallback
}

TEST_P(LayerNorm, BackwardIsDeterministic) {
  TRIDENT_SKIP_WITHOUT_GPU();
  // fp32 dx: the fallback for 16-bit activations (fused for fp32); dx in the activations'
  // dtype: the fused kernel (257 chunks at C = 2048).
  struct Case {
    int64_t N, C;
    DType dx_dt;
  };
  for (const Case& c : {Case{513, 96, DType::F32}, Case{4103, 2048, dt()}}) {
    const int64_t N = c.N, C = c.C;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " dx " << dtype_name(c.dx_dt));
    Pair x = random(Shape{N, C}, dt()), gamma = random(Shape{C}, dt()), beta = random(Shape{C}, dt());
    Pair dout = random(Shape{N, C}, dt());
    Buffer out = gpu().empty(Shape{N, C}, dt()), mean = gpu().empty(Shape{N}, DType::F32),
           rstd = gpu().empty(Shape{N}, DType::F32);
    gpu().layernorm_forward(x.gpu, gamma.gpu, beta.gpu, out, mean, rstd);
    std::vector<float> first;
    for (int rep = 0; rep < 3; ++rep) {
      Buffer dx = gpu().zeros(Shape{N, C}, c.dx_dt), dg = gpu().zeros(Shape{C}, DType::F32),
             db = gpu().zeros(Shape{C}, DType::F32);
      gpu().layernorm_backward(dout.gpu, x.gpu, gamma.gpu, mean, rstd, dx, dg, db);
      std::vector<float> all = host(gpu(), dx);
      for (const Buffer* b : {&dg, &db}) {
        const std::vector<float> v = host(gpu(), *b);
        all.insert(all.end(), v.begin(), v.end());
      }
      if (rep == 0) first = all;
      else EXPECT_EQ(first, all) << "repetition " << rep;
    }
  }
}

// residual_layernorm_forward: resid = x + branch (the same rounding on both sides, so
// identical bytes), then LayerNorm of resid. C = 1600 and 768 take the 16-byte vector
// path of every dtype; 129 and 3 the scalar one; `alias` writes resid over x.
class ResidualLayerNorm : public CudaVsCpuDtype {
 protected:
  // drop_T > 0: the branch's dropout (p 0.2, drop_T rows per sample) in the same pass;
  // both must draw dropout_forward's mask, so resid stays identical.
  void check(int64_t N, int64_t C, bool alias, int drop_T = 0) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << (alias ? " resid aliases x" : "")
                                      << (drop_T > 0 ? " dropout" : ""));
    Pair x = random(Shape{N, C}, dt(), -1.f, 3.f), branch = random(Shape{N, C}, dt(), -2.f, 2.f);
    Pair gamma = random(Shape{C}, dt(), 0.5f, 1.5f), beta = random(Shape{C}, dt(), -0.5f, 0.5f);
    Pair own_resid{cpu().empty(Shape{N, C}, dt()), gpu().empty(Shape{N, C}, dt())};
    const Pair& resid = alias ? x : own_resid;
    Pair out{cpu().empty(Shape{N, C}, dt()), gpu().empty(Shape{N, C}, dt())};
    Pair mean{cpu().empty(Shape{N}, DType::F32), gpu().empty(Shape{N}, DType::F32)};
    Pair rstd{cpu().empty(Shape{N}, DType::F32), gpu().empty(Shape{N}, DType::F32)};
    if (drop_T > 0) {
      DropoutKey drop;
      drop.p = 0.2f;
      drop.seed = 4242;
      drop.site = 3 * kSitesPerLayer + kDropMlpOut;
      drop.sample_base = 17;
      cpu().dropout_residual_layernorm_forward(x.cpu, branch.cpu, drop_T, drop, resid.cpu, gamma.cpu, beta.cpu,
                                               out.cpu, mean.cpu, rstd.cpu);
      gpu().dropout_residual_layernorm_forward(x.gpu, branch.gpu, drop_T, drop, resid.gpu, gamma.gpu, beta.gpu,
                                               out.gpu, mean.gpu, rstd.gpu);
    } else {
      cpu().residual_layernorm_forward(x.cpu, branch.cpu, resid.cpu, gamma.cpu, beta.cpu, out.cpu, mean.cpu,
                                       rstd.cpu);
      gpu().residual_layernorm_forward(x.gpu, branch.gpu, resid.gpu, gamma.gpu, beta.gpu, out.gpu, mean.gpu,
                                       rstd.gpu);
    }
    expect_identical(resid, "resid");
    expect_close(mean, Tol{1e-5, 1e-6}, "mean");
    expect_close(rstd, Tol{1e-5, 1e-6}, "rstd");
    expect_close(out, storage_tol(dt(), 1e-5, 1e-5), "out");
  }
};

TEST_P(ResidualLayerNorm, VectorAndScalarRows) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(7, 1600, false);
  check(33, 768, true);
  check(37, 129, false);
  check(5, 3, true);
}

TEST_P(ResidualLayerNorm, DropoutOnTheBranch) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(8, 1600, false, 4);  // vector path, two samples
  check(12, 768, true, 3);   // resid aliases x
  check(6, 129, false, 2);   // scalar path
}

// The row-in-registers forward has warps walk several rows on the warps that fit the GPU by
// default (TRIDENT_LN_FWD_ROWS_PER_WARP unset or 0); 1 is one row per warp, k > 1 k rows per
// warp. Every setting must give the same bits (nvcc compiles the two kernels' sums alike),
// with the plain forward's next rows in flight to shared memory through cp.async (the
// default) and in registers (TRIDENT_LN_FWD_RING=0; the residual forwards ignore it). 5003 rows: with 0, 2 or 3 rows per
// warp on an H200 (132 SMs of 2 blocks of 8 warps at C = 2048), more on smaller GPUs; 3 and
// 40 rows per warp when set.
TEST_P(ResidualLayerNorm, RowsPerWarpSameBits) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const char* env = "TRIDENT_LN_FWD_ROWS_PER_WARP";
  const int64_t N = 5003;
  for (int64_t C : {int64_t{768}, int64_t{1600}, int64_t{2048}, int64_t{4096}})
    for (int mode = 0; mode < 3; ++mode) {  // plain, residual, residual with dropout
      SCOPED_TRACE(::testing::Message() << "C=" << C << " mode " << mode);
      Pair x = random(Shape{N, C}, dt(), -1.f, 3.f), branch = random(Shape{N, C}, dt(), -2.f, 2.f);
      Pair gamma = random(Shape{C}, dt(), 0.5f, 1.5f), beta = random(Shape{C}, dt(), -0.5f, 0.5f);
      DropoutKey drop;
      drop.p = 0.2f;
      drop.seed = 99;
      drop.sample_base = 3;
      std::vector<std::vector<float>> first;
      for (const auto& [setting, ring] : {std::pair<const char*, bool>{"1", false}, {"0", false}, {"3", false},
                                          {"40", false}, {"0", true}, {"3", true}}) {
        SCOPED_TRACE(std::string(env) + "=" + setting + (ring ? "" : " TRIDENT_LN_FWD_RING=0"));
        const ScopedEnv rows_per_warp(env, setting), ring_env("TRIDENT_LN_FWD_RING", ring ? nullptr : "0");
        Buffer out = gpu().empty(Shape{N, C}, dt()), resid = gpu().empty(Shape{N, C}, dt()),
               mean = gpu().empty(Shape{N}, DType::F32), rstd = gpu().empty(Shape{N}, DType::F32);
        if (mode == 0)
          gpu().layernorm_forward(x.gpu, gamma.gpu, beta.gpu, out, mean, rstd);
        else if (mode == 1)
          gpu().residual_layernorm_forward(x.gpu, branch.gpu, resid, gamma.gpu, beta.gpu, out, mean, rstd);
        else
          gpu().dropout_residual_layernorm_forward(x.gpu, branch.gpu, static_cast<int>(N), drop, resid, gamma.gpu,
                                                   beta.gpu, out, mean, rstd);
        std::vector<std::vector<float>> got = {host(gpu(), out), host(gpu(), mean), host(gpu(), rstd)};
        if (mode > 0) got.push_back(host(gpu(), resid));
        if (first.empty()) {
          first = got;
        } else {
          EXPECT_TRUE(first[0] == got[0]) << "out";
          EXPECT_TRUE(first[1] == got[1]) << "mean";
          EXPECT_TRUE(first[2] == got[2]) << "rstd";
          if (mode > 0) {
            EXPECT_TRUE(first[3] == got[3]) << "resid";
          }
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ResidualLayerNorm, TRIDENT_FLOAT_DTYPES, dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, LayerNorm, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
