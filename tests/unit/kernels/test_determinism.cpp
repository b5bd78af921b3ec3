// Determinism: every op of the CPU backend's own gives bit-identical results with 1, 2 and
// 3 OpenMP threads (sizes chosen so the work really splits and reductions span many
// blocks). The GEMMs are OpenBLAS's, whose sums depend on its thread count (measured: 5516
// of 38550 outputs of a 257 x 150 x 300 sgemm change from 1 to 2 threads, with its OpenMP
// and its pthreads builds alike): they are the same from run to run at one thread count,
// which the last test checks.
#include <omp.h>

#include "kernel_test_util.h"

namespace trident::test {
namespace {

// Runs `op` (which writes its outputs into the listed tensors) at several thread counts
// and expects the output bytes to match the single-threaded run exactly.
template <class Op>
void expect_thread_independent(Backend& be, const std::vector<const Tensor*>& outs, Op&& op, const char* what) {
  const int saved = omp_get_max_threads();
  std::vector<std::vector<char>> first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    op();
    std::vector<std::vector<char>> got;
    for (const Tensor* t : outs) got.push_back(bytes(be, *t));
    if (first.empty()) first = got;
    else
      for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == first[i]) << what << " output " << i << " with " << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Determinism, AllOpsIndependentOfThreadCount) {
  auto be = make_cpu_backend();
  const DType dt = DType::BF16;
  const int64_t N = 257, C = 300;

  // LayerNorm: the "+=" gradients are reset before each run.
  Buffer x = upload(*be, randn(N * C, 1), Shape{N, C}, dt), g = upload(*be, randn(C, 2), Shape{C}, dt);
  Buffer bta = upload(*be, randn(C, 3), Shape{C}, dt), ln = be->empty(Shape{N, C}, dt);
  Buffer mean = be->empty(Shape{N}, DType::F32), rstd = be->empty(Shape{N}, DType::F32);
  Buffer dout = upload(*be, randn(N * C, 4), Shape{N, C}, dt);
  Buffer dx = be->empty(Shape{N, C}, DType::F32), dg = be->empty(Shape{C}, DType::F32), db = be->empty(Shape{C}, DType::F32);
  expect_thread_independent(*be, {&ln.t(), &mean.t(), &rstd.t(), &dx.t(), &dg.t(), &db.t()}, [&] {
    for (const Tensor* t : {&dx.t(), &dg.t(), &db.t()}) be->fill(*t, 0.5f);
    be->layernorm_forward(x, g, bta, ln, mean, rstd);
    be->layernorm_backward(dout, x, g, mean, rstd, dx, dg, db);
  }, "layernorm");

  // bias_backward + gelu on a matmul's output (made once: see the top).
  Buffer w = upload(*be, randn(150 * C, 5), Shape{150, C}, dt), bias = upload(*be, randn(150, 6), Shape{150}, dt);
  Buffer y0 = be->empty(Shape{N, 150}, dt), y = be->empty(Shape{N, 150}, dt);
  Buffer dbias = be->empty(Shape{150}, DType::F32), gy = be->empty(Shape{N, 150}, dt);
  be->matmul(y0, x, w, bias, false, true, false);
  expect_thread_independent(*be, {&y.t(), &dbias.t(), &gy.t()}, [&] {
    be->copy(y, y0);
    be->fill(dbias, 0.0f);
    be->bias_backward(y, dbias);
    be->gelu_forward(y, gy, Gelu::Tanh);     // one op of each GELU form
    be->gelu_backward(y, y, gy, Gelu::Erf);
  }, "bias/gelu");
  // matmul's own loops around the GEMM (the bias rows, a 16-bit output read, summed and
  // rounded), with k = 0 so that no OpenBLAS call takes part.
  Buffer a0 = be->empty(Shape{N, 0}, dt), b0 = be->empty(Shape{150, 0}, dt), acc16 = be->empty(Shape{N, 150}, dt);
  expect_thread_independent(*be, {&acc16.t()}, [&] {
    be->copy(acc16, y0);
    be->matmul(acc16, a0, b0, bias, false, true, true);
  }, "matmul with k = 0");

  // Embedding with many repeated tokens.
  const int T = 64;
  std::vector<int32_t> tok(2048);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 7919) % 97);
  Buffer tokens = upload_i32(*be, tok, Shape{2048});
  Buffer wte = upload(*be, randn(97 * 64, 7), Shape{97, 64}, dt), wpe = upload(*be, randn(T * 64, 8), Shape{T, 64}, dt);
  Buffer emb = be->empty(Shape{2048, 64}, dt), dwte = be->empty(Shape{97, 64}, DType::F32), dwpe = be->empty(Shape{T, 64}, DType::F32);
  Buffer demb = upload(*be, randn(2048 * 64, 9), Shape{2048, 64}, dt);
  expect_thread_independent(*be, {&emb.t(), &dwte.t(), &dwpe.t()}, [&] {
    be->fill(dwte, 0.0f);
    be->fill(dwpe, 0.0f);
    be->embedding_forward(tokens, wte, 0, wpe, T, emb);
    be->embedding_backward(demb, tokens, 0, T, dwte, dwpe);
  }, "embedding");

  // Attention and dropout with masks on.
  const AttentionShape s{3, 33, 4, 16, 0, 0};
  const int64_t nq = 3 * 33 * 3 * 4 * 16, no = 3 * 33 * 4 * 16;
  const DropoutKey key{0.1f, 5, 1, 17};
  Buffer qkv = upload(*be, randn(nq, 10), Shape{nq}, dt), ao = be->empty(Shape{no}, dt);
  Buffer lse = be->empty(Shape{3 * 4 * 33}, DType::F32), dqkv = be->empty(Shape{nq}, dt);
  Buffer dao = upload(*be, randn(no, 11), Shape{99, 64}, dt), dr = be->empty(Shape{99, 64}, dt);
  expect_thread_independent(*be, {&ao.t(), &lse.t(), &dqkv.t(), &dr.t()}, [&] {
    be->attention_forward(qkv, ao, lse, s, key);
    be->attention_backward(dao, qkv, ao, lse, dqkv, s, key);
    be->dropout_forward(dao, dr, 33, key);
  }, "attention/dropout");

  // Cross-entropy (the logits are overwritten, so they are re-uploaded each run).
  const auto logits_host = randn(64 * 1000, 12);
  std::vector<int32_t> tg(64);
  for (int i = 0; i < 64; ++i) tg[i] = (i * 37) % 990 - (i % 9 == 0 ? 2000 : 0);
  Buffer targets = upload_i32(*be, tg, Shape{64}), logits = be->empty(Shape{64, 1000}, dt);
  Buffer mx = be->empty(Shape{64}, DType::F32), tl = be->empty(Shape{64}, DType::F32), se = be->empty(Shape{64}, DType::F32);
  Buffer loss = be->empty(Shape{64}, DType::F32), corr = be->empty(Shape{64}, DType::F32);
  expect_thread_independent(*be, {&logits.t(), &loss.t(), &corr.t()}, [&] {
    Buffer up = upload(*be, logits_host, Shape{64, 1000}, dt);
    be->copy(logits, up);
    be->xent_stats(logits, targets, 0, 990, mx, tl);
    be->xent_sumexp(logits, 990, mx, se);
    be->xent_loss_grad(logits, targets, 0, 990, mx, se, tl, loss, corr, 1.0f / 64);
  }, "xent");

  // AdamW and the reductions.
  const int64_t n = 1 << 20;
  const auto big = randn(n, 13);
  Buffer grad = upload(*be, big, Shape{n}, dt), master = be->empty(Shape{n}, DType::F32);
  Buffer m = be->empty(Shape{n}, DType::F32), v = be->empty(Shape{n}, DType::F32), model = be->empty(Shape{n}, dt);
  double sums[3] = {0, 0, 0};
  std::vector<double> seen;
  expect_thread_independent(*be, {&master.t(), &m.t(), &v.t(), &model.t()}, [&] {
    be->fill(master, 1.0f);
    be->fill(m, 0.0f);
    be->fill(v, 0.0f);
    AdamWArgs a;
    a.master = master;
    a.grad = grad;
    a.m = m;
    a.v = v;
    a.model_param = model;
    a.lr = 1e-3f;
    a.weight_decay = 0.01f;
    be->adamw(a);
    seen.push_back(be->sum(grad));
    seen.push_back(be->sum_squares(grad));
  }, "adamw");
  ASSERT_EQ(seen.size(), 6u);
  for (int i = 0; i < 2; ++i) sums[i] = seen[i];
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(seen[2 * r], sums[0]) << "sum differs with " << r + 1 << " threads";
    EXPECT_EQ(seen[2 * r + 1], sums[1]) << "sum_squares differs with " << r + 1 << " threads";
  }
}

// The GEMMs (OpenBLAS) at a fixed thread count: the same bits from run to run, with and
// without bias, "=" and "+=", at two thread counts.
TEST(Determinism, MatmulRepeatsAtOneThreadCount) {
  auto be = make_cpu_backend();
  const DType dt = DType::BF16;
  const int64_t N = 257, C = 300, O = 150;
  Buffer x = upload(*be, randn(N * C, 1), Shape{N, C}, dt), w = upload(*be, randn(O * C, 5), Shape{O, C}, dt);
  Buffer bias = upload(*be, randn(O, 6), Shape{O}, dt);
  Buffer y = be->empty(Shape{N, O}, dt), acc = be->empty(Shape{N, O}, DType::F32);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<std::vector<char>> first;
    for (int run = 0; run < 3; ++run) {
      be->matmul(y, x, w, bias, false, true, false);
      be->fill(acc, 0.25f);
      be->matmul(acc, x, w, Tensor(), false, true, true);
      std::vector<std::vector<char>> got = {bytes(*be, y.t()), bytes(*be, acc.t())};
      if (first.empty()) first = got;
      else
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(got[i] == first[i]) << "matmul output " << i << ", run " << run << " with " << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace trident::test
