// kernels/cuda/cuda_layernorm.cu on the CPU emulator vs the CPU backend: the forward (out,
// mean, rstd), its fusion with the residual add (resid, also in place over x), and the
// backward (dx, dgamma, dbeta, all +=), for awkward row counts and widths, every float
// dtype, 16-byte vectorised and scalar paths (aligned widths with matching dtypes vs odd
// widths, mixed dtypes and misaligned pointers), and fp32 gradients for 16-bit
// activations. The backward is run twice under different thread schedules and must give
// the same bits.
//
// What it cannot check: device math precision (rsqrtf is the host's 1/sqrtf here), nvcc's
// fused multiply-adds, real vector-load alignment faults (misalignment is only checked
// through the launcher's vector_width choice).
#include "emu_cuda_layernorm.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"
#include "launch_reduce.h"

namespace trident::cuda::emu_layernorm {
namespace {

// Mirrors of the host launchers of kernels/cuda/cuda_layernorm.cu (launch_forward and
// layernorm_backward): same kernels, template arguments and launch geometry.
// KEEP IN SYNC with cuda_layernorm.cu.
void launch_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                    const Tensor& beta, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t N = x.rows(), C = x.cols();
  if (N == 0 || C == 0) return;
  const bool fused = !branch.empty();
  dispatch_float(x.dtype, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    const bool same = gamma.dtype == x.dtype && beta.dtype == x.dtype && out.dtype == x.dtype;
    const int kv = same ? vector_width<T>(C, {x.data, branch.data, resid.data, gamma.data, beta.data, out.data}) : 1;
    const T* bp = fused ? branch.ptr<T>() : nullptr;
    T* rp = fused ? resid.ptr<T>() : nullptr;
    const dim3 grid(grid_for(N, kRowsPerBlock, INT32_MAX)), block(32 * kRowsPerBlock);
    if (kv > 1)
      emu::launch(grid, block, 0, layernorm_forward_kernel<T, kVec16<T>>, x.ptr<T>(), bp, rp, any_ptr(gamma),
                  any_ptr(beta), any_ptr(out), mean.ptr<float>(), rstd.ptr<float>(), N, C);
    else
      emu::launch(grid, block, 0, layernorm_forward_kernel<T, 1>, x.ptr<T>(), bp, rp, any_ptr(gamma), any_ptr(beta),
                  any_ptr(out), mean.ptr<float>(), rstd.ptr<float>(), N, C);
  });
}

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t N = x.rows(), C = x.cols();
  if (N == 0 || C == 0) return;
  const int chunks = emu_reduce::column_chunks(N, C);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  std::vector<float> pg = emu_reduce::nan_scratch<float>(static_cast<size_t>(chunks * C)), pb = pg;
  dispatch_float(x.dtype, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const bool same = dout.dtype == x.dtype && gamma.dtype == x.dtype && dx.dtype == x.dtype;
    const int kv = same ? vector_width<T>(C, {dout.data, x.data, gamma.data, dx.data}) : 1;
    const dim3 rows_grid(grid_for(N, kRowsPerBlock, INT32_MAX)), block(32 * kRowsPerBlock);
    if (kv > 1)
      emu::launch(rows_grid, block, 0, layernorm_dx_kernel<T, kVec16<T>>, any_ptr(dout), x.ptr<T>(), any_ptr(gamma),
                  mean.ptr<float>(), rstd.ptr<float>(), any_ptr(dx), N, C);
    else
      emu::launch(rows_grid, block, 0, layernorm_dx_kernel<T, 1>, any_ptr(dout), x.ptr<T>(), any_ptr(gamma),
                  mean.ptr<float>(), rstd.ptr<float>(), any_ptr(dx), N, C);
    const dim3 grid(static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(chunks));
    emu::launch(grid, dim3(256), 0, layernorm_param_partials_kernel<T>, any_ptr(dout), x.ptr<T>(), mean.ptr<float>(),
                rstd.ptr<float>(), N, C, rows_per_chunk, pg.data(), pb.data());
  });
  emu_reduce::column_partials_accumulate(pg.data(), chunks, C, dgamma.data, dgamma.dtype);
  emu_reduce::column_partials_accumulate(pb.data(), chunks, C, dbeta.data, dbeta.dtype);
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

  void forward(int64_t N, int64_t C, DType param_dt, bool misalign, bool residual, bool in_place) {
    SCOPED_TRACE(shape_label(N, C, dt()) + " params " + dtype_name(param_dt) + (misalign ? " misaligned" : "") +
                 (residual ? (in_place ? " residual in place" : " residual") : ""));
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
      cpu().residual_layernorm_forward(x, branch, r, gamma, beta, out, mean, rstd);
      kl::launch_forward(ex, branch, e_r, gamma, beta, e_out, e_mean, e_rstd);
      // The residual is one rounded add on both sides: the same bits.
      EXPECT_TRUE(same_bytes(e_r, r)) << "resid";
      expect_close(e_r, r, Tol{0, 0}, "residual_layernorm resid");
    }
    expect_close(e_mean, mean, Tol{1e-5, 1e-6}, "layernorm mean");
    expect_close(e_rstd, rstd, Tol{1e-5, 1e-6}, "layernorm rstd");
    expect_close(e_out, out, storage_tol(param_dt, 1e-5, 1e-5), std::string("layernorm out ") + dtype_name(param_dt));
  }

  // The backward from the CPU's saved statistics on both sides; gradients start non-zero.
  void backward(int64_t N, int64_t C, DType grad_dt, bool misalign) {
    SCOPED_TRACE(shape_label(N, C, dt()) + " grads " + dtype_name(grad_dt) + (misalign ? " misaligned" : ""));
    Buffer xb = random(Shape{N, C}, dt(), -1.f, 3.f), keep;
    const Tensor x = misalign ? misaligned(keep, xb) : xb.t();
    Buffer gamma = random(Shape{C}, dt(), 0.5f, 1.5f), beta = random(Shape{C}, dt(), -0.5f, 0.5f);
    Buffer out = cpu().empty(Shape{N, C}, dt()), mean = cpu().empty(Shape{N}, DType::F32),
           rstd = cpu().empty(Shape{N}, DType::F32);
    cpu().layernorm_forward(x, gamma, beta, out, mean, rstd);
    Buffer dout = random(Shape{N, C}, dt());
    Buffer dx = random(Shape{N, C}, grad_dt), dgamma = random(Shape{C}, grad_dt), dbeta = random(Shape{C}, grad_dt);
    Buffer e_dx = clone(dx), e_dgamma = clone(dgamma), e_dbeta = clone(dbeta);
    cpu().layernorm_backward(dout, x, gamma, mean, rstd, dx, dgamma, dbeta);
    kl::layernorm_backward(dout, x, gamma, mean, rstd, e_dx, e_dgamma, e_dbeta);
    const std::string g = std::string(" ") + dtype_name(grad_dt);
    expect_close(e_dx, dx, storage_tol(grad_dt, 1e-4, 1e-5), "layernorm dx" + g);
    expect_close(e_dgamma, dgamma, storage_tol(grad_dt, 1e-4, 1e-4), "layernorm dgamma" + g);
    expect_close(e_dbeta, dbeta, storage_tol(grad_dt, 1e-4, 1e-4), "layernorm dbeta" + g);
  }
};

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

TEST_P(EmulatedLayerNorm, Backward) {
  for (int64_t N : awkward_rows())
    for (int64_t C : awkward_cols()) backward(N, C, dt(), false);
  backward(33, 130, DType::F32, false);  // fp32 gradients for 16-bit activations
  backward(33, 136, DType::F32, false);  // ... with a vector-friendly width: scalar path
  backward(100, 17, dt(), false);        // several row chunks in the dgamma/dbeta pass
  backward(9, 136, dt(), true);          // misaligned x: scalar path
}

TEST_P(EmulatedLayerNorm, BackwardIsDeterministic) {
  const int64_t N = 100, C = 136;
  Buffer x = random(Shape{N, C}, dt()), gamma = random(Shape{C}, dt()), beta = random(Shape{C}, dt());
  Buffer dout = random(Shape{N, C}, dt());
  Buffer out = cpu().empty(Shape{N, C}, dt()), mean = cpu().empty(Shape{N}, DType::F32),
         rstd = cpu().empty(Shape{N}, DType::F32);
  cpu().layernorm_forward(x, gamma, beta, out, mean, rstd);
  std::vector<Buffer> first;
  for (int rep = 0; rep < 2; ++rep) {
    emu::set_schedule_seed(100 + rep);
    Buffer dx = filled(Shape{N, C}, DType::F32, 0.f), dg = filled(Shape{C}, DType::F32, 0.f),
           db = filled(Shape{C}, DType::F32, 0.f);
    kl::layernorm_backward(dout, x, gamma, mean, rstd, dx, dg, db);
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

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedLayerNorm, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
