// kernels/cuda/cuda_adamw.cu on the CPU emulator vs the CPU backend: the multi-tensor AdamW
// over a list of pieces with awkward sizes (one of several chunks, empty ones), more pieces
// than one launch holds, per-piece weight decay, gradients in the parameter dtype and in
// fp32 (a launch per dtype run), model copies in several dtypes or none, over three steps.
//
// What it cannot check: the kernel parameter size limit (the table is passed by value
// here too, but nothing enforces 4 KB), device sqrtf/division precision, fused
// multiply-adds (the GPU tests allow a few ulps for those; the tolerances here are theirs).
#include "emu_cuda_adamw.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_adamw {
namespace {

// The host launcher adamw_multi of kernels/cuda/cuda_adamw.cu on emulated blocks: the same
// plan (plan_adamw_launches, extracted with the kernels), launched on the emulator.
void adamw_multi(const std::vector<AdamWArgs>& list) {
  if (list.empty()) return;
  plan_adamw_launches(list, [&](const AdamWTable& tab, const AdamWScalars& k, int blocks, DType grad_dtype) {
    dispatch_float(grad_dtype, "adamw", [&](auto tag) {
      using G = decltype(tag);
      emu::launch(dim3(blocks), dim3(kThreads), 0, adamw_multi_kernel<G>, tab, k);
    });
  });
}

}  // namespace
}  // namespace trident::cuda::emu_adamw

namespace trident::emu_test {
namespace {

namespace ka = ::trident::cuda::emu_adamw;

class EmulatedAdamW : public EmuVsCpuDtype {
 protected:
  struct Piece {
    Buffer master, m, v, model;  // model may be empty
  };
};

TEST_P(EmulatedAdamW, MultiTensorThreeSteps) {
  // 20 pieces (more than one launch's 16), one of nine chunks, two empty ones; gradients
  // switch dtype and model copies switch dtype (or vanish) along the list. Every fourth
  // piece's gradient is a view one element into its buffer: no vector accesses for it (the
  // scalar path); the others take the vector path with a scalar tail where n % 4 != 0.
  const int kPieces = 20;
  std::vector<Piece> ref(kPieces), emu(kPieces);
  std::vector<int64_t> sizes(kPieces);
  std::vector<DType> grad_dt(kPieces), model_dt(kPieces);
  std::vector<bool> has_model(kPieces);
  for (int i = 0; i < kPieces; ++i) {
    sizes[i] = i == 3 ? 140001 : (i == 7 || i == 12 ? 0 : 1 + (i * 131) % 700);
    grad_dt[i] = i >= 10 && i < 14 ? DType::F32 : dt();
    has_model[i] = i % 5 != 4;
    model_dt[i] = i >= 15 ? DType::F32 : dt();
    const Shape s{sizes[i]};
    ref[i].master = random(s, DType::F32);
    ref[i].m = random(s, DType::F32, -0.1f, 0.1f);
    ref[i].v = random(s, DType::F32, 0.f, 0.01f);
    if (has_model[i]) ref[i].model = filled(s, model_dt[i], NAN);
    emu[i].master = clone(ref[i].master);
    emu[i].m = clone(ref[i].m);
    emu[i].v = clone(ref[i].v);
    if (has_model[i]) emu[i].model = clone(ref[i].model);
  }
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<Buffer> grads;
    std::vector<AdamWArgs> r, e;
    for (int i = 0; i < kPieces; ++i) {
      const bool unaligned = i % 4 == 1 && sizes[i] > 0;
      grads.push_back(random(Shape{sizes[i] + (unaligned ? 1 : 0)}, grad_dt[i], -2.f, 2.f));
      const Tensor grad = unaligned ? grads.back().t().flat_slice(1, sizes[i]) : grads.back().t();
      for (auto [list, p] : {std::pair{&r, &ref[i]}, std::pair{&e, &emu[i]}}) {
        AdamWArgs a;
        a.master = p->master;
        a.grad = grad;
        a.m = p->m;
        a.v = p->v;
        a.model_param = has_model[i] ? p->model.t() : Tensor();
        a.lr = 3e-4f;
        a.weight_decay = i % 3 == 0 ? 0.0f : 0.1f;
        a.grad_scale = 0.25f;
        a.step = step;
        list->push_back(a);
      }
    }
    for (const AdamWArgs& a : r) cpu().adamw(a);
    ka::adamw_multi(e);
  }
  for (int i = 0; i < kPieces; ++i) {
    SCOPED_TRACE("piece " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " grad " +
                 dtype_name(grad_dt[i]));
    // Same fp32 formula; the tolerances of the GPU test allow a few ulps.
    expect_close(emu[i].master, ref[i].master, Tol{1e-6, 1e-7}, "adamw master");
    expect_close(emu[i].m, ref[i].m, Tol{1e-5, 1e-7}, "adamw m");
    expect_close(emu[i].v, ref[i].v, Tol{1e-5, 1e-9}, "adamw v");
    if (has_model[i])
      expect_close(emu[i].model, ref[i].model, storage_tol(model_dt[i], 1e-6, 1e-7),
                   std::string("adamw model_param ") + dtype_name(model_dt[i]));
  }
}

// eps sits outside the square root (PyTorch, apex, Megatron): with fp32 gradients of 1e-8
// the first step moves each parameter by lr * 1e-8 / (1e-8 + eps) = lr / 2, where eps inside
// the root would move it by ~lr * 1e-4. The gradients of ~1 above cannot tell the two apart.
// The kernel and the CPU backend, each against that number.
TEST_P(EmulatedAdamW, EpsOutsideTheSquareRoot) {
  const Shape s{37};
  Buffer grad = filled(s, DType::F32, 1e-8f);
  for (const bool on_emulator : {false, true}) {
    SCOPED_TRACE(on_emulator ? "emulated kernel" : "CPU backend");
    Buffer master = filled(s, DType::F32, 1.f), m = filled(s, DType::F32, 0.f), v = filled(s, DType::F32, 0.f);
    Buffer model = filled(s, dt(), NAN);
    AdamWArgs a;
    a.master = master.t();
    a.grad = grad.t();
    a.m = m.t();
    a.v = v.t();
    a.model_param = model.t();
    a.lr = 1e-3f;
    a.eps = 1e-8f;
    a.step = 1;
    if (on_emulator) {
      ka::adamw_multi({a});
    } else {
      cpu().adamw(a);
    }
    for (double p : values(master.t())) EXPECT_NEAR(p, 1.0 - 0.5e-3, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedAdamW, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
