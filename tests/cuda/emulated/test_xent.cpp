// kernels/cuda/cuda_xent.cu on the CPU emulator vs the CPU backend: the three phases of the
// vocab-parallel softmax cross-entropy (row max and target logit; sum of exponentials;
// loss, top-1 hit and the logits overwritten by their gradient), and the first two in one
// pass (a running max, for a TP group of one), on shards with padding
// columns, targets owned by other shards and ignored (negative) targets, for awkward row
// counts and widths (narrower and wider than the 256-thread block; multiples of 8 take the
// vector path, over more than one 2048-element stride at 4104) and every float dtype.
// Each phase starts from the CPU's results of the previous one, so each is checked alone.
// logits_argmax (a row a 1024-thread block) against the CPU op on logits with many ties, NaN
// and padding columns holding larger logits: the same ids and values.
//
// What it cannot check: the device's expf/logf precision (host libm here), fused
// multiply-adds.
#include "emu_cuda_xent.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

#include <tuple>

namespace trident::cuda::emu_xent {
namespace {

// Mirrors of the host launchers xent_stats, xent_sumexp, xent_stats_sumexp and xent_loss_grad in
// kernels/cuda/cuda_xent.cu: one block of kBlock threads per row, 16-byte vectors when the
// rows allow them. KEEP IN SYNC with it.
void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                const Tensor& row_max, const Tensor& target_logit) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  if (N == 0) return;
  dispatch_float(logits.dtype, "xent_stats", [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      emu::launch(dim3(rows_grid(N)), dim3(kBlock), 0, xent_stats_kernel<T, kv.value>, logits.ptr<T>(),
                  targets.ptr<int32_t>(), vocab_start, Vl, valid, row_max.ptr<float>(), target_logit.ptr<float>());
    });
  });
}

void xent_sumexp(const Tensor& logits, int64_t valid, const Tensor& row_max, const Tensor& sumexp) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  if (N == 0) return;
  dispatch_float(logits.dtype, "xent_sumexp", [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      emu::launch(dim3(rows_grid(N)), dim3(kBlock), 0, xent_sumexp_kernel<T, kv.value>, logits.ptr<T>(), Vl, valid,
                  row_max.ptr<float>(), sumexp.ptr<float>());
    });
  });
}

void xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                       const Tensor& row_max, const Tensor& target_logit, const Tensor& sumexp) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  if (N == 0) return;
  dispatch_float(logits.dtype, "xent_stats_sumexp", [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      emu::launch(dim3(rows_grid(N)), dim3(kBlock), 0, xent_stats_sumexp_kernel<T, kv.value>, logits.ptr<T>(),
                  targets.ptr<int32_t>(), vocab_start, Vl, valid, row_max.ptr<float>(), target_logit.ptr<float>(),
                  sumexp.ptr<float>());
    });
  });
}

void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid,
                    const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, const Tensor& losses,
                    const Tensor& correct, float grad_scale) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  if (N == 0) return;
  dispatch_float(logits.dtype, "xent_loss_grad", [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      emu::launch(dim3(rows_grid(N)), dim3(kBlock), 0, xent_loss_grad_kernel<T, kv.value>, logits.ptr<T>(),
                  targets.ptr<int32_t>(), vocab_start, Vl, valid, row_max.ptr<float>(), sumexp.ptr<float>(),
                  target_logit.ptr<float>(), losses.ptr<float>(), correct.ptr<float>(), grad_scale);
    });
  });
}

void logits_argmax(const Tensor& logits, int64_t valid, const Tensor& values, const Tensor& ids) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  if (N == 0) return;
  dispatch_float(logits.dtype, "logits_argmax", [&](auto tag) {
    using T = decltype(tag);
    with_vector_width<T>(logits, [&](auto kv) {
      emu::launch(dim3(rows_grid(N)), dim3(kArgmaxBlock), 0, logits_argmax_kernel<T, kv.value>, logits.ptr<T>(), Vl,
                  valid, values.ptr<float>(), ids.ptr<int32_t>());
    });
  });
}

}  // namespace
}  // namespace trident::cuda::emu_xent

namespace trident::emu_test {
namespace {

namespace kx = ::trident::cuda::emu_xent;

class EmulatedXent : public EmuVsCpuDtype {
 protected:
  // Logits in [offset - 4, offset + 4].
  void check(int64_t N, int64_t Vl, int64_t vocab_start, int64_t valid, float grad_scale, float offset = 0.f) {
    SCOPED_TRACE(shape_label(N, Vl, dt()) + " start=" + std::to_string(vocab_start) +
                 " valid=" + std::to_string(valid) + " offset=" + std::to_string(offset));
    Buffer logits = random(Shape{N, Vl}, dt(), offset - 4.f, offset + 4.f), e_logits = clone(logits);
    std::vector<int32_t> tg(static_cast<size_t>(N));
    std::uniform_int_distribution<int64_t> in_shard(vocab_start, vocab_start + valid - 1), other(0, 3 * Vl);
    for (size_t i = 0; i < tg.size(); ++i)
      tg[i] = static_cast<int32_t>(i % 5 == 4 ? -1 : i % 5 == 3 ? other(rng_) : in_shard(rng_));
    Buffer targets = ints(Shape{N}, tg);
    auto f32 = [&] { return filled(Shape{N}, DType::F32, NAN); };
    Buffer row_max = f32(), target_logit = f32(), sumexp = f32(), losses = f32(), correct = f32();
    Buffer e_row_max = f32(), e_target_logit = f32(), e_sumexp = f32(), e_losses = f32(), e_correct = f32();

    cpu().xent_stats(logits, targets, vocab_start, valid, row_max, target_logit);
    kx::xent_stats(e_logits, targets, vocab_start, valid, e_row_max, e_target_logit);
    expect_close(e_row_max, row_max, Tol{0, 0}, "xent row_max (exact)");  // a max and a copy
    expect_close(e_target_logit, target_logit, Tol{0, 0}, "xent target_logit (exact)");

    cpu().xent_sumexp(logits, valid, row_max, sumexp);
    kx::xent_sumexp(e_logits, valid, row_max, e_sumexp);
    expect_close(e_sumexp, sumexp, Tol{1e-5, 1e-6}, "xent sumexp");

    // Both phases in one pass (a running max): the same max and target logit, the sum up to
    // rounding.
    Buffer f_row_max = f32(), f_target_logit = f32(), f_sumexp = f32();
    kx::xent_stats_sumexp(e_logits, targets, vocab_start, valid, f_row_max, f_target_logit, f_sumexp);
    expect_close(f_row_max, row_max, Tol{0, 0}, "xent one-pass row_max (exact)");
    expect_close(f_target_logit, target_logit, Tol{0, 0}, "xent one-pass target_logit (exact)");
    expect_close(f_sumexp, sumexp, Tol{1e-5, 1e-6}, "xent one-pass sumexp");

    cpu().xent_loss_grad(logits, targets, vocab_start, valid, row_max, sumexp, target_logit, losses, correct,
                         grad_scale);
    kx::xent_loss_grad(e_logits, targets, vocab_start, valid, row_max, sumexp, target_logit, e_losses, e_correct,
                       grad_scale);
    expect_close(e_losses, losses, Tol{1e-5, 1e-5}, "xent losses");
    expect_close(e_correct, correct, Tol{0, 0}, "xent correct (exact)");
    expect_close(e_logits, logits, storage_tol(dt(), 1e-5, 1e-7), "xent logit gradients");
  }
};

TEST_P(EmulatedXent, ShardsWithPaddingAndIgnoredTargets) {
  for (int64_t N : awkward_rows()) {
    for (int64_t Vl : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{130}, int64_t{300}, int64_t{777}, int64_t{64},
                       int64_t{4104}}) {
      check(N, Vl, 0, Vl, 1.0f);                                             // first shard, no padding
      if (Vl > 1) check(N, Vl, 2 * Vl, Vl - Vl / 3, 1.0f / static_cast<float>(N));  // last shard, padding
    }
  }
}

// Logits around 1000: exp overflows float past ~88.7, so a kernel that skipped subtracting
// the row maximum would give inf/NaN where the loss is ~log(V) (the CPU's, which subtracts it).
TEST_P(EmulatedXent, LargeLogitsNeedTheMaximum) {
  check(5, 300, 0, 300, 1.0f, 1000.f);
  check(5, 777, 2 * 777, 700, 0.5f, 1000.f);
}

// Integer logits in [-3, 3] (exact in every dtype: many ties of the largest), a NaN every
// 13 elements, the padding columns at 9 (never counted); rows as wide as the vocabulary
// with GPT-2's padding (50257 of 50304) and awkward ones, both vector paths.
TEST_P(EmulatedXent, ArgmaxMatchesCpuOnTies) {
  for (const auto& [N, Vl, valid] : {std::tuple<int64_t, int64_t, int64_t>{7, 17, 17}, {33, 136, 130},
                                     {5, 4104, 4100}, {3, 50304, 50257}, {2, 3, 1}}) {
    SCOPED_TRACE(shape_label(N, Vl, dt()) + " valid=" + std::to_string(valid));
    std::uniform_int_distribution<int> level(-3, 3);
    std::vector<float> v(static_cast<size_t>(N * Vl));
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i) % Vl;
      v[i] = c >= valid ? 9.f : i % 13 == 5 ? NAN : static_cast<float>(level(rng_));
    }
    Buffer logits = from_floats(Shape{N, Vl}, dt(), v);
    Buffer values = filled(Shape{N}, DType::F32, 7.f), e_values = filled(Shape{N}, DType::F32, 7.f);
    Buffer ids = ints(Shape{N}, std::vector<int32_t>(N, -7)), e_ids = ints(Shape{N}, std::vector<int32_t>(N, -7));
    cpu().logits_argmax(logits, valid, values, ids);
    kx::logits_argmax(logits, valid, e_values, e_ids);
    expect_close(e_ids, ids, Tol{0, 0}, "argmax ids (exact)");
    expect_close(e_values, values, Tol{0, 0}, "argmax values (exact)");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedXent, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
