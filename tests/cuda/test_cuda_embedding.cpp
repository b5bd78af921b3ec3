// GPU vs CPU: token + position embedding on a vocab shard (ids outside it read zero and
// get no gradient), forward and the deterministic (sort-based) backward.
#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

class Embedding : public CudaVsCpuDtype {
 protected:
  // B sequences of T tokens drawn from [0, vocab_total) with heavy repetition; the shard
  // holds [vocab_start, vocab_start + Vl).
  void check(int B, int T, int64_t vocab_total, int64_t vocab_start, int64_t Vl, int64_t C, bool with_pos,
             DType grad_dt) {
    SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " shard [" << vocab_start << ", "
                                      << vocab_start + Vl << ") C=" << C << " wpe=" << with_pos);
    std::vector<int32_t> tok(static_cast<size_t>(B) * T);
    std::uniform_int_distribution<int64_t> any(0, vocab_total - 1), few(0, 9);
    for (size_t i = 0; i < tok.size(); ++i)
      tok[i] = static_cast<int32_t>(i % 3 == 0 ? vocab_start + few(rng_) : any(rng_));  // repeats in shard
    Pair tokens = ints(Shape{B * int64_t{T}}, tok);
    Pair wte = random(Shape{Vl, C}, dt());
    Pair wpe = with_pos ? random(Shape{T + 3, C}, dt()) : Pair{};
    Pair out = random(Shape{B * int64_t{T}, C}, dt());
    cpu().embedding_forward(tokens.cpu, wte.cpu, vocab_start, wpe.cpu, T, out.cpu);
    gpu().embedding_forward(tokens.gpu, wte.gpu, vocab_start, wpe.gpu, T, out.gpu);
    expect_close(out, storage_tol(dt(), 1e-6, 0), "embedding_forward");

    Pair dout = random(Shape{B * int64_t{T}, C}, dt());
    Pair dwte = random(Shape{Vl, C}, grad_dt);
    Pair dwpe = with_pos ? random(Shape{T + 3, C}, grad_dt) : Pair{};
    cpu().embedding_backward(dout.cpu, tokens.cpu, vocab_start, T, dwte.cpu, dwpe.cpu);
    gpu().embedding_backward(dout.gpu, tokens.gpu, vocab_start, T, dwte.gpu, dwpe.gpu);
    // Same summation order on both sides (rows of one id in increasing row order).
    expect_close(dwte, storage_tol(grad_dt, 1e-6, 1e-6), "dwte");
    if (with_pos) expect_close(dwpe, storage_tol(grad_dt, 1e-6, 1e-6), "dwpe");
  }
};

TEST_P(Embedding, ShardedVocabAwkwardSizes) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(3, 13, 300, 100, 129, 67, true, dt());
  check(3, 13, 300, 100, 129, 67, false, DType::F32);
  check(2, 5, 129, 0, 129, 33, true, DType::F32);  // unsharded
}

// Rows wide enough for the row kernel's batches of four 16-byte vectors a lane (2026-12-05): 1096
// (past one batch, the last partial) and 2048 (gpt2-1.3b's), each dtype.
TEST_P(Embedding, WideRowsFillTheRowKernelsBatches) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(2, 9, 700, 0, 700, 1096, true, DType::F32);
  check(2, 9, 700, 0, 700, 2048, true, DType::F32);
  check(2, 9, 700, 300, 400, 2048, false, DType::F32);
}

TEST_P(Embedding, GptSizedVocabShard) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(4, 256, 50304, 25152, 25152, 64, true, DType::F32);
}

TEST_P(Embedding, BackwardIsDeterministicAndSteadyStateAllocatesNothing) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int B = 4, T = 64;
  const int64_t V = 500, C = 48;
  std::vector<int32_t> tok(B * T);
  std::uniform_int_distribution<int32_t> few(0, 20);
  for (auto& t : tok) t = few(rng_);
  Pair tokens = ints(Shape{B * T}, tok);
  Pair dout = random(Shape{B * T, C}, dt());
  std::vector<float> first;
  size_t raw_after_first = 0;
  for (int rep = 0; rep < 3; ++rep) {
    Buffer dwte = gpu().zeros(Shape{V, C}, DType::F32), dwpe = gpu().zeros(Shape{T, C}, DType::F32);
    gpu().embedding_backward(dout.gpu, tokens.gpu, 0, T, dwte, dwpe);
    std::vector<float> v = host(gpu(), dwte);
    if (rep == 0) {
      first = v;
      raw_after_first = gpu().allocator().stats().raw_allocs;
    } else {
      EXPECT_EQ(first, v) << "repetition " << rep;
    }
  }
  EXPECT_EQ(gpu().allocator().stats().raw_allocs, raw_after_first) << "scratch not served from the cache";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Embedding, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
