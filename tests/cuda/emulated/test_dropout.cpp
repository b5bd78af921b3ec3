// kernels/cuda/cuda_dropout.cu on the CPU emulator vs the CPU backend: dropout forward and
// backward on [B*T, row] activations with p = 0 (a copy/cast), 0.1 and 0.5, several
// sequence lengths (the element index restarts every T rows, the sample number counts
// sequences from a 64-bit base), awkward widths, every float dtype and an fp32 output.
// Both sides call philox.h's dropout_keep and round x * (1 / (1 - p)) once, so the
// results must be the same bits.
//
// The host launcher apply() sits in the file's anonymous namespace, so the extraction
// copies it with its kernel launch rewritten for the emulator: the test runs the real
// launcher (its checks and launch geometry), not a mirror.
//
// What it cannot check: nothing beyond emu_runtime.h's general limits; the mask function
// itself is shared host/device code (tested in tests/unit).
#include "emu_cuda_dropout.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::emu_test {
namespace {

namespace kd = ::trident::cuda::emu_dropout;

class EmulatedDropout : public EmuVsCpuDtype {};

TEST_P(EmulatedDropout, SameMaskAndValuesAsCpu) {
  std::vector<DType> out_dts = {dt()};
  if (dt() != DType::F32) out_dts.push_back(DType::F32);
  for (float p : {0.0f, 0.1f, 0.5f}) {
    for (int T : {1, 7, 11}) {
      for (int64_t row : awkward_cols()) {
        for (DType out_dt : out_dts) {
          const int64_t B = T == 1 ? 5 : 3, N = B * T;
          SCOPED_TRACE(shape_label(N, row, dt()) + " T=" + std::to_string(T) + " p=" + std::to_string(p) + " out " +
                       dtype_name(out_dt));
          DropoutKey drop;
          drop.p = p;
          drop.seed = 0x5EED1234ABCDull;
          drop.site = 3 * kSitesPerLayer + kDropMlpOut;
          drop.sample_base = (uint64_t{1} << 32) + 12345;  // the high word of the sample counts too
          Buffer x = random(Shape{N, row}, dt());
          Buffer out = filled(Shape{N, row}, out_dt, NAN), e_out = clone(out);
          cpu().dropout_forward(x, out, T, drop);
          kd::apply("dropout_forward", x, e_out, T, drop, nullptr);
          expect_close(e_out, out, Tol{0, 0}, "dropout out (exact)");
          EXPECT_TRUE(same_bytes(e_out, out));

          Buffer dout = random(Shape{N, row}, dt());
          Buffer dx = filled(Shape{N, row}, out_dt, NAN), e_dx = clone(dx);
          cpu().dropout_backward(dout, dx, T, drop);
          kd::apply("dropout_backward", dout, e_dx, T, drop, nullptr);
          expect_close(e_dx, dx, Tol{0, 0}, "dropout dx (exact)");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedDropout, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
