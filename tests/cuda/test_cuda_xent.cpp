// GPU vs CPU: the three phases of the vocab-parallel softmax cross-entropy (and the first
// two in one pass), on a shard with padding columns, targets owned by other shards, and
// ignored (negative) targets; logits_argmax on logits with many ties and NaN.
#include <tuple>

#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

class Xent : public CudaVsCpuDtype {
 protected:
  void check(int64_t N, int64_t Vl, int64_t vocab_start, int64_t valid, float grad_scale) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " Vl=" << Vl << " start=" << vocab_start
                                      << " valid=" << valid);
    Pair logits = random(Shape{N, Vl}, dt(), -4.f, 4.f);
    std::vector<int32_t> tg(static_cast<size_t>(N));
    std::uniform_int_distribution<int64_t> in_shard(vocab_start, vocab_start + valid - 1), other(0, 3 * Vl);
    for (size_t i = 0; i < tg.size(); ++i)
      tg[i] = static_cast<int32_t>(i % 5 == 4 ? -1 : i % 5 == 3 ? other(rng_) : in_shard(rng_));
    Pair targets = ints(Shape{N}, tg);
    auto f32 = [&](float v) { return filled(Shape{N}, DType::F32, v); };
    Pair row_max = f32(7.f), target_logit = f32(7.f), sumexp = f32(7.f), losses = f32(7.f), correct = f32(7.f);

    cpu().xent_stats(logits.cpu, targets.cpu, vocab_start, valid, row_max.cpu, target_logit.cpu);
    gpu().xent_stats(logits.gpu, targets.gpu, vocab_start, valid, row_max.gpu, target_logit.gpu);
    expect_identical(row_max, "row_max");  // a max and a copy: exact
    expect_identical(target_logit, "target_logit");
    cpu().xent_sumexp(logits.cpu, valid, row_max.cpu, sumexp.cpu);
    gpu().xent_sumexp(logits.gpu, valid, row_max.gpu, sumexp.gpu);
    expect_close(sumexp, Tol{1e-5, 1e-6}, "sumexp");
    // Phases 1 and 2 in one pass (TP group of one): the same max and target logit, the sum
    // up to rounding.
    Pair row_max1 = f32(7.f), target_logit1 = f32(7.f), sumexp1 = f32(7.f);
    cpu().xent_stats_sumexp(logits.cpu, targets.cpu, vocab_start, valid, row_max1.cpu, target_logit1.cpu,
                            sumexp1.cpu);
    gpu().xent_stats_sumexp(logits.gpu, targets.gpu, vocab_start, valid, row_max1.gpu, target_logit1.gpu,
                            sumexp1.gpu);
    expect_identical(row_max1, "one-pass row_max");
    expect_identical(target_logit1, "one-pass target_logit");
    expect_close(sumexp1, Tol{1e-5, 1e-6}, "one-pass sumexp");
    // Phase 3 from identical inputs on both sides.
    gpu().copy_from_host(sumexp.gpu, host_cpu(sumexp).data());
    cpu().xent_loss_grad(logits.cpu, targets.cpu, vocab_start, valid, row_max.cpu, sumexp.cpu, target_logit.cpu,
                         losses.cpu, correct.cpu, grad_scale);
    gpu().xent_loss_grad(logits.gpu, targets.gpu, vocab_start, valid, row_max.gpu, sumexp.gpu, target_logit.gpu,
                         losses.gpu, correct.gpu, grad_scale);
    expect_close(losses, Tol{1e-5, 1e-5}, "losses");
    expect_identical(correct, "correct");
    expect_close(logits, storage_tol(dt(), 1e-5, 1e-7), "logit gradients");
  }
};

TEST_P(Xent, ShardWithPaddingAndIgnoredTargets) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(37, 129, 0, 129, 1.0f);
  check(37, 129, 258, 100, 1.0f / 37);  // last shard: 29 padding columns
}

TEST_P(Xent, WideRows) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(9, 8192, 8192, 8000, 0.5f);
}

// Integer logits in [-3, 3] (exact in every dtype: many ties of the largest), a NaN every
// 13 elements, the padding columns at 9 (never counted): the GPU's ids and values are the
// CPU's, at GPT-2's vocabulary (8 sequences of a decoding step) and an awkward width.
TEST_P(Xent, ArgmaxMatchesCpuOnTies) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (const auto& [N, Vl, valid] : {std::tuple<int64_t, int64_t, int64_t>{8, 50304, 50257}, {37, 129, 100}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " Vl=" << Vl << " valid=" << valid);
    std::uniform_int_distribution<int> level(-3, 3);
    std::vector<float> v(static_cast<size_t>(N * Vl));
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i) % Vl;
      v[i] = c >= valid ? 9.f : i % 13 == 5 ? NAN : static_cast<float>(level(rng_));
    }
    Pair logits = upload(Shape{N, Vl}, dt(), v), values = filled(Shape{N}, DType::F32, 7.f);
    Pair ids = ints(Shape{N}, std::vector<int32_t>(static_cast<size_t>(N), -7));
    cpu().logits_argmax(logits.cpu, valid, values.cpu, ids.cpu);
    gpu().logits_argmax(logits.gpu, valid, values.gpu, ids.gpu);
    expect_identical(ids, "ids");
    expect_identical(values, "values");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Xent, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
