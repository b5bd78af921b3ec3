// GEMM through OpenBLAS cblas_sgemm (row-major). 16-bit operands are widened into the
// backend's grow-only fp32 scratch first; a 16-bit output is accumulated in fp32 scratch
// and rounded once at the end. sgemm is called outside any OpenMP region.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

// An fp32 pointer to t's elements: t itself when it is f32, else a widened copy in `buf`.
const float* as_f32(const Tensor& t, std::vector<float>& buf) {
  if (t.dtype == DType::F32) return t.ptr<const float>();
  float* p = grow(buf, t.numel());
  constexpr int64_t kChunk = 4096;
  const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci)
    load_f32(t, ci * kChunk, std::min(kChunk, n - ci * kChunk), p + ci * kChunk);
  return p;
}

}  // namespace

const char* blas_threading() {
#ifdef OPENBLAS_VERSION  // OpenBLAS's cblas.h (CMake may fall back to another BLAS)
  switch (openblas_get_parallel()) {
    case 0: return "sequential";
    case 1: return "pthreads";
    case 2: return "openmp";
  }
#endif
  return "unknown";
}

void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a,
            bool trans_b, bool accumulate, MatmulScratch& scratch) {
  const char* op = "matmul";
  check_float(op, out);
  check_float(op, a);
  check_float(op, b);
  // Matrices are the [rows, cols] views of their (possibly >2-D) tensors.
  const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
  const int64_t Kb = trans_b ? b.cols() : b.rows(), N = trans_b ? b.rows() : b.cols();
  CPU_CHECK(op, K == Kb, "inner dims differ: a ", a.shape.str(), trans_a ? "^T" : "", " b ",
            b.shape.str(), trans_b ? "^T" : "");
  CPU_CHECK(op, out.rows() == M && out.cols() == N, "out ", out.shape.str(), " expected [", M, ", ", N, "]");
  if (!bias.empty()) {
    check_float(op, bias);
    CPU_CHECK(op, bias.numel() == N, "bias ", bias.shape.str(), " expected [", N, "]");
  }

  const float* A = as_f32(a, scratch.a);
  const float* Bm = as_f32(b, scratch.b);
  float* Cm = out.dtype == DType::F32 ? out.ptr<float>() : grow(scratch.c, M * N);
  const bool need_c_in = accumulate && out.dtype != DType::F32;
  if (need_c_in || !bias.empty()) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      float* row = Cm + m * N;
      if (need_c_in) load_f32(out, m * N, N, row);
      if (!bias.empty()) {
        float* bb = thread_scratch(0, N);
        load_f32(bias, 0, N, bb);
        if (accumulate) {
          for (int64_t n = 0; n < N; ++n) row[n] += bb[n];
        } else {
          std::copy(bb, bb + N, row);
        }
      }
    }
  }
  const float beta = (accumulate || !bias.empty()) ? 1.0f : 0.0f;
  if (M > 0 && N > 0) {
    if (K == 0) {
      if (beta == 0.0f) std::fill(Cm, Cm + M * N, 0.0f);
    } else {
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                  static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A,
                  static_cast<int>(trans_a ? M : K), Bm, static_cast<int>(trans_b ? K : N), beta, Cm,
                  static_cast<int>(N));
    }
  }
  if (out.dtype != DType::F32) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) store_f32(out, m * N, N, Cm + m * N);
  }
}

// dbias[N] += column sums of dout [M, N]; blocks of columns in parallel, rows in order.
void bias_backward(const Tensor& dout, const Tensor& dbias) {
  const char* op = "bias_backward";
  check_float(op, dout);
  check_float(op, dbias);
  const int64_t M = dout.rows(), N = dout.cols();
  CPU_CHECK(op, dbias.numel() == N, "dbias ", dbias.shape.str(), " for dout ", dout.shape.str());
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t c0 = bi * kBlock, w = std::min(kBlock, N - c0);
    float* row = thread_scratch(0, kBlock);
    double acc[kBlock] = {};
    for (int64_t m = 0; m < M; ++m) {
      load_f32(dout, m * N + c0, w, row);
      for (int64_t c = 0; c < w; ++c) acc[c] += row[c];
    }
    load_f32(dbias, c0, w, row);
    for (int64_t c = 0; c < w; ++c) row[c] += static_cast<float>(acc[c]);
    store_f32(dbias, c0, w, row);
  }
}

}  // namespace trident::cpu
