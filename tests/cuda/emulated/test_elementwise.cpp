// kernels/cuda/cuda_elementwise.cu on the CPU emulator vs the CPU backend: fill (also
// int32), cast between every pair of dtypes (templated and runtime-typed kernels), scale,
// add (same dtype and mixed), accumulate (same and mixed) and the row-bias add of the
// GEMM fallback. Each is one fp32 operation and one rounding on both sides, so the
// results must be the same bits.
//
// What it cannot check: the launchers' cudaMemcpyAsync path (cast to the same dtype).
#include "emu_cuda_elementwise.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_elementwise {
namespace {

// Mirrors of the host launchers in kernels/cuda/cuda_elementwise.cu (same kernels, template
// arguments and grid_for(n, kBlock) x kBlock geometry). KEEP IN SYNC with that file.
dim3 grid(int64_t n) { return dim3(grid_for(n, kBlock)); }

void fill(const Tensor& t, float value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  switch (t.dtype) {
    case DType::F32: emu::launch(grid(n), dim3(kBlock), 0, fill_kernel<float>, t.ptr<float>(), n, value); break;
    case DType::F16:
      emu::launch(grid(n), dim3(kBlock), 0, fill_kernel<__half>, t.ptr<__half>(), n, __float2half_rn(value));
      break;
    case DType::BF16:
      emu::launch(grid(n), dim3(kBlock), 0, fill_kernel<__nv_bfloat16>, t.ptr<__nv_bfloat16>(), n,
                  __float2bfloat16_rn(value));
      break;
    case DType::I32:
      emu::launch(grid(n), dim3(kBlock), 0, fill_kernel<int32_t>, t.ptr<int32_t>(), n, static_cast<int32_t>(value));
      break;
  }
}

void cast(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype == dst.dtype) {  // the launcher copies with cudaMemcpyAsync
    std::memcpy(dst.data, src.data, src.nbytes());
    return;
  }
  if (!is_float(src.dtype) || !is_float(dst.dtype)) {
    emu::launch(grid(n), dim3(kBlock), 0, cast_any_kernel, any_ptr(src), any_ptr(dst), n);
    return;
  }
  dispatch_float(src.dtype, "cast", [&](auto st) {
    using S = decltype(st);
    dispatch_float(dst.dtype, "cast", [&](auto dt) {
      using D = decltype(dt);
      emu::launch(grid(n), dim3(kBlock), 0, cast_kernel<S, D>, src.ptr<S>(), dst.ptr<D>(), n);
    });
  });
}

void scale(const Tensor& t, float alpha) {
  const int64_t n = t.numel();
  if (n == 0) return;
  dispatch_float(t.dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    emu::launch(grid(n), dim3(kBlock), 0, scale_kernel<T>, t.ptr<T>(), n, alpha);
  });
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (a.dtype == out.dtype && b.dtype == out.dtype) {
    dispatch_float(out.dtype, "add", [&](auto tag) {
      using T = decltype(tag);
      emu::launch(grid(n), dim3(kBlock), 0, add_kernel<T>, a.ptr<T>(), b.ptr<T>(), out.ptr<T>(), n);
    });
  } else {
    emu::launch(grid(n), dim3(kBlock), 0, add_any_kernel, any_ptr(a), any_ptr(b), any_ptr(out), n);
  }
}

void accumulate(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_float(dst.dtype, "accumulate", [&](auto tag) {
    using T = decltype(tag);
    if (src.dtype == dst.dtype)
      emu::launch(grid(n), dim3(kBlock), 0, accumulate_kernel<T>, dst.ptr<T>(), src.ptr<T>(), n);
    else
      emu::launch(grid(n), dim3(kBlock), 0, accumulate_mixed_kernel<T>, dst.ptr<T>(), any_ptr(src), n);
  });
}

void add_row_bias(const Tensor& out, const Tensor& bias) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype, "matmul", [&](auto tag) {
    using T = decltype(tag);
    emu::launch(grid(n), dim3(kBlock), 0, add_row_bias_kernel<T>, out.ptr<T>(), any_ptr(bias), n, out.cols());
  });
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
