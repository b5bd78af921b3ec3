// kernels/cuda/cuda_elementwise.cu on the CPU emulator vs the CPU backend: fill (also
// int32), cast between every pair of dtypes (templated and runtime-typed kernels), scale,
// add (same dtype and mixed), accumulate (same and mixed) and the row-bias add of the
// GEMM fallback, on the vector path (aligned buffers, awkward lengths: whole groups and a
// tail) and the scalar one (views that start one element in). Each is one fp32 operation
// and one rounding on both sides, so the results must be the same bits.
//
// What it cannot check: the launchers' cudaMemsetAsync (fill +0) and cudaMemcpyAsync (cast
// to the same dtype) paths; tests/cuda covers them on a GPU.
#include "emu_cuda_elementwise.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_elementwise {
namespace {

// The host launchers of kernels/cuda/cuda_elementwise.cu without their argument checks:
// the kernel choice is the file's own (fill_typed, cast_typed, ..., extracted with the
// kernels); the memset (fill +0) and memcpy (cast to the same dtype) shortcuts are
// mirrored here.
void fill(const Tensor& t, float value) {
  if (t.numel() > 0) fill_typed(t, value, nullptr);
}

void cast(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  if (src.dtype == dst.dtype) {  // the launcher copies with cudaMemcpyAsync
    std::memcpy(dst.data, src.data, src.nbytes());
    return;
  }
  cast_typed(src, dst, nullptr);
}

void scale(const Tensor& t, float alpha) {
  if (t.numel() > 0) scale_typed(t, alpha, nullptr);
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() > 0) add_typed(a, b, out, nullptr);
}

void accumulate(const Tensor& dst, const Tensor& src) {
  if (dst.numel() > 0) accumulate_typed(dst, src, nullptr);
}

void add_row_bias(const Tensor& out, const Tensor& bias) {
  if (out.numel() > 0) add_row_bias_typed(out, bias, nullptr);
}

}  // namespace
}  // namespace trident::cuda::emu_elementwise

namespace trident::emu_test {
namespace {

namespace ke = ::trident::cuda::emu_elementwise;

class EmulatedElementwise : public EmuVsCpuDtype {
 protected:
  // Same bits on both sides.
  void expect_exact(const Tensor& emu, const Tensor& ref, const std::string& what) {
    expect_close(emu, ref, Tol{0, 0}, what, /*allow_nonfinite=*/true);
    EXPECT_TRUE(same_bytes(emu, ref)) << what << ": bytes differ";
  }
  std::vector<DType> others() const {
    std::vector<DType> v;
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      if (t != dt()) v.push_back(t);
    return v;
  }
};

TEST_P(EmulatedElementwise, Fill) {
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{4290}}) {
    for (DType t : {dt(), DType::I32}) {
      Buffer a = cpu().empty(Shape{n}, t), b = cpu().empty(Shape{n}, t);
      std::memset(b.t().data, 0xFF, b.t().nbytes());
      std::memset(a.t().data, 0xFF, a.t().nbytes());
      cpu().fill(a, 1.7f);
      ke::fill(b, 1.7f);
      expect_exact(b, a, std::string("fill ") + dtype_name(t));
    }
  }
}

TEST_P(EmulatedElementwise, CastToEveryDtype) {
  for (int64_t N : awkward_rows()) {
    for (int64_t C : {int64_t{3}, int64_t{130}}) {
      SCOPED_TRACE(shape_label(N, C, dt()));
      Buffer src = random(Shape{N, C}, dt(), -100.f, 100.f);
      for (DType to : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
        Buffer a = filled(Shape{N, C}, to, 0.f), b = clone(a);
        cpu().cast(src, a);
        ke::cast(src, b);
        expect_exact(b, a, std::string("cast -> ") + dtype_name(to));
        if (to == DType::I32) {  // and back: the runtime-typed kernel from int32
          Buffer c = filled(Shape{N, C}, dt(), NAN), d = clone(c);
          cpu().cast(a, c);
          ke::cast(a, d);
          expect_exact(d, c, "cast int32 -> float");
        }
      }
    }
  }
}

TEST_P(EmulatedElementwise, ScaleAddAccumulate) {
  for (int64_t N : awkward_rows()) {
    for (int64_t C : awkward_cols()) {
      SCOPED_TRACE(shape_label(N, C, dt()));
      Buffer a = random(Shape{N, C}, dt(), -3.f, 3.f), b = random(Shape{N, C}, dt(), -3.f, 3.f);
      Buffer s = clone(a), es = clone(a);
      cpu().scale(s, 0.37f);
      ke::scale(es, 0.37f);
      expect_exact(es, s, "scale");

      Buffer out = filled(Shape{N, C}, dt(), NAN), e_out = clone(out);
      cpu().add(a, b, out);
      ke::add(a, b, e_out);
      expect_exact(e_out, out, "add");

      Buffer acc = clone(a), e_acc = clone(a);
      cpu().accumulate(acc, b);
      ke::accumulate(e_acc, b);
      expect_exact(e_acc, acc, "accumulate");

      for (DType o : others()) {  // mixed dtypes: the runtime-typed kernels
        Buffer b2 = random(Shape{N, C}, o, -3.f, 3.f);
        Buffer mixed = filled(Shape{N, C}, o, NAN), e_mixed = clone(mixed);
        cpu().add(a, b2, mixed);
        ke::add(a, b2, e_mixed);
        expect_exact(e_mixed, mixed, "add mixed");
        Buffer acc2 = clone(a), e_acc2 = clone(a);
        cpu().accumulate(acc2, b2);
        ke::accumulate(e_acc2, b2);
        expect_exact(e_acc2, acc2, "accumulate mixed");
      }
    }
  }
}

// Views one element into their buffers are off the vector alignment (for a view of one
// operand only, too): the scalar instances, the same bits.
TEST_P(EmulatedElementwise, MisalignedViews) {
  const int64_t n = 4 * 256 + 7;
  auto view = [&](Buffer& b, int64_t skip) { return b.t().flat_slice(skip, n); };
  for (int64_t skip_a : {int64_t{0}, int64_t{1}}) {
    const int64_t skip_b = 1 - skip_a;
    SCOPED_TRACE("skips " + std::to_string(skip_a) + "," + std::to_string(skip_b) + " " + dtype_name(dt()));
    Buffer a = random(Shape{n + 1}, dt(), -3.f, 3.f), b = random(Shape{n + 1}, dt(), -3.f, 3.f);
    Buffer f = filled(Shape{n + 1}, dt(), NAN), ef = clone(f);
    cpu().fill(view(f, skip_a), -2.5f);
    ke::fill(view(ef, skip_a), -2.5f);
    expect_exact(ef, f, "fill");
    Buffer s = clone(a), es = clone(a);
    cpu().scale(view(s, skip_a), 0.37f);
    ke::scale(view(es, skip_a), 0.37f);
    expect_exact(es, s, "scale");
    Buffer out = filled(Shape{n + 1}, dt(), NAN), e_out = clone(out);
    cpu().add(view(a, skip_a), view(b, skip_b), view(out, 0));
    ke::add(view(a, skip_a), view(b, skip_b), view(e_out, 0));
    expect_exact(e_out, out, "add");
    Buffer acc = clone(a), e_acc = clone(a);
    cpu().accumulate(view(acc, skip_a), view(b, skip_b));
    ke::accumulate(view(e_acc, skip_a), view(b, skip_b));
    expect_exact(e_acc, acc, "accumulate");
    for (DType o : others()) {
      Buffer c = filled(Shape{n + 1}, o, NAN), ec = clone(c);
      cpu().cast(view(a, skip_a), view(c, skip_b));
      ke::cast(view(a, skip_a), view(ec, skip_b));
      expect_exact(ec, c, std::string("cast -> ") + dtype_name(o));
    }
  }
}

// out[r, :] += bias: the reference adds a [N, C] copy of the bias with the CPU backend.
TEST_P(EmulatedElementwise, AddRowBias) {
  for (int64_t N : awkward_rows()) {
    for (int64_t C : awkward_cols()) {
      for (DType bias_dt : {dt(), DType::F32}) {
        SCOPED_TRACE(shape_label(N, C, dt()) + " bias " + dtype_name(bias_dt));
        Buffer out = random(Shape{N, C}, dt(), -3.f, 3.f), bias = random(Shape{C}, bias_dt);
        std::vector<float> rows(static_cast<size_t>(N * C));
        for (int64_t i = 0; i < N * C; ++i) rows[i] = load_as_float(bias.t().data, bias_dt, static_cast<size_t>(i % C));
        Buffer bias_rows = from_floats(Shape{N, C}, bias_dt, rows);
        Buffer ref = clone(out);
        cpu().add(out, bias_rows, ref);
        ke::add_row_bias(out, bias);
        expect_exact(out, ref, "add_row_bias");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedElementwise, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
