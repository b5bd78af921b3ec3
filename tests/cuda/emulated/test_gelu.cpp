// kernels/cuda/cuda_gelu.cu on the CPU emulator vs the CPU backend: GELU (tanh
// approximation and exact erf) forward and backward, for awkward sizes (16-byte vectors and a tail),
// every float dtype, an fp32 output for 16-bit input (the runtime-typed output path), views
// off the 16-byte alignment (the scalar path) and the backward in place over dout (as
// Backend::matmul_gelu_backward calls it).
//
// What it cannot check: the device's tanhf, erff and expf (here the host's, the functions the
// CPU twin calls, so small differences on a GPU are not covered), fused multiply-adds.
#include "emu_cuda_gelu.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_gelu {
namespace {

// The host launchers gelu_forward / gelu_backward of kernels/cuda/cuda_gelu.cu without their
// argument checks: the kernel choice is the file's own (extracted with the kernels).
void gelu_forward(const Tensor& x, const Tensor& out, Gelu form) {
  if (x.numel() > 0) gelu_forward_typed(x, out, form, nullptr);
}

void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) {
  if (x.numel() > 0) gelu_backward_typed(dout, x, dx, form, nullptr);
}

}  // namespace
}  // namespace trident::cuda::emu_gelu

namespace trident::emu_test {
namespace {

namespace kg = ::trident::cuda::emu_gelu;

class EmulatedGelu : public EmuVsCpuDtype {
 protected:
  void forward_and_backward(Gelu form);
  void misaligned_views(Gelu form);
};

void EmulatedGelu::forward_and_backward(Gelu form) {
  for (int64_t N : awkward_rows()) {
    for (int64_t C : awkward_cols()) {
      // The output in the input's dtype, and in fp32 (the runtime-typed path of 16-bit input).
      std::vector<DType> out_dts = {dt()};
      if (dt() != DType::F32) out_dts.push_back(DType::F32);
      for (DType out_dt : out_dts) {
        SCOPED_TRACE(shape_label(N, C, dt()) + " out " + dtype_name(out_dt) + " " + gelu_name(form));
        Buffer x = random(Shape{N, C}, dt(), -4.f, 4.f);
        Buffer out = filled(Shape{N, C}, out_dt, NAN), e_out = clone(out);
        cpu().gelu_forward(x, out, form);
        kg::gelu_forward(x, e_out, form);
        expect_close(e_out, out, storage_tol(out_dt, 1e-5, 1e-6), std::string("gelu out ") + dtype_name(out_dt));

        Buffer dout = random(Shape{N, C}, out_dt, -2.f, 2.f);
        Buffer dx = filled(Shape{N, C}, out_dt, NAN), e_dx = clone(dx);
        cpu().gelu_backward(dout, x, dx, form);
        kg::gelu_backward(dout, x, e_dx, form);
        expect_close(e_dx, dx, storage_tol(out_dt, 1e-5, 1e-6), std::string("gelu dx ") + dtype_name(out_dt));

        Buffer inplace = clone(dout);  // dx aliases dout
        kg::gelu_backward(inplace, x, inplace, form);
        expect_close(inplace, dx, storage_tol(out_dt, 1e-5, 1e-6), std::string("gelu dx in place ") + dtype_name(out_dt));
      }
    }
  }
}

// Views that start one element into their buffers: the scalar instance of the typed kernels.
void EmulatedGelu::misaligned_views(Gelu form) {
  SCOPED_TRACE(gelu_name(form));
  const int64_t n = 8 * 256 + 5;
  Buffer xb = random(Shape{n + 1}, dt(), -4.f, 4.f), db = random(Shape{n + 1}, dt(), -2.f, 2.f);
  const Tensor x = xb.t().flat_slice(1, n), dout = db.t().flat_slice(1, n);
  Buffer out = filled(Shape{n}, dt(), NAN);
  Buffer e_out_view = filled(Shape{n + 1}, dt(), NAN);
  cpu().gelu_forward(x, out, form);
  kg::gelu_forward(x, e_out_view.t().flat_slice(1, n), form);
  expect_close(e_out_view.t().flat_slice(1, n), out, storage_tol(dt(), 1e-5, 1e-6), "gelu out (misaligned)");
  Buffer dx = filled(Shape{n}, dt(), NAN), e_dx = filled(Shape{n + 1}, dt(), NAN);
  cpu().gelu_backward(dout, x, dx, form);
  kg::gelu_backward(dout, x, e_dx.t().flat_slice(1, n), form);
  expect_close(e_dx.t().flat_slice(1, n), dx, storage_tol(dt(), 1e-5, 1e-6), "gelu dx (misaligned)");
}

TEST_P(EmulatedGelu, ForwardAndBackward) { forward_and_backward(Gelu::Tanh); }
TEST_P(EmulatedGelu, ErfForwardAndBackward) { forward_and_backward(Gelu::Erf); }
TEST_P(EmulatedGelu, MisalignedViews) { misaligned_views(Gelu::Tanh); }
TEST_P(EmulatedGelu, ErfMisalignedViews) { misaligned_views(Gelu::Erf); }

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedGelu, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
