// LayerNorm over the last dim (eps 1e-5, biased variance). Row statistics are summed in
// double; mean and rstd are saved in f32 for the backward. dgamma/dbeta are column sums,
// computed in a second pass parallel over columns so no two threads touch one output.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

constexpr double kEps = 1e-5;
constexpr int64_t kColBlock = 64;  // columns per task of the dgamma/dbeta pass

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_forward";
  check_float(op, x);
  check_float(op, gamma);
  check_float(op, beta);
  check_float(op, out);
  check_f32(op, mean);
  check_f32(op, rstd);
  const int64_t N = x.rows(), C = x.cols();
  CPU_CHECK(op, out.rows() == N && out.cols() == C, "out ", out.shape.str(), " vs x ", x.shape.str());
  CPU_CHECK(op, gamma.numel() == C && beta.numel() == C, "gamma/beta must be [", C, "]");
  CPU_CHECK(op, mean.numel() == N && rstd.numel() == N, "mean/rstd must be [", N, "]");
#pragma omp parallel
  {
    float* g = thread_scratch(0, C);
    float* b = thread_scratch(1, C);
    float* row = thread_scratch(2, C);
    load_f32(gamma, 0, C, g);
    load_f32(beta, 0, C, b);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      load_f32(x, n * C, C, row);
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += row[c];
      const double mu = s / C;
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += (row[c] - mu) * (row[c] - mu);
      const float m = static_cast<float>(mu);
      const float r = static_cast<float>(1.0 / std::sqrt(ss / C + kEps));
      for (int64_t c = 0; c < C; ++c) row[c] = (row[c] - m) * r * g[c] + b[c];
      store_f32(out, n * C, C, row);
      mean.ptr<float>()[n] = m;
      rstd.ptr<float>()[n] = r;
    }
  }
}

// With xhat = (x - mean) rstd and g = dout * gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat));  dgamma = sum_n dout xhat;  dbeta = sum_n dout.
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "layernorm_backward";
  for (const Tensor* t : {&dout, &x, &gamma, &dx, &dgamma, &dbeta}) check_float(op, *t);
  check_f32(op, mean);
  check_f32(op, rstd);
  const int64_t N = x.rows(), C = x.cols();
  CPU_CHECK(op, dout.rows() == N && dout.cols() == C && dx.rows() == N && dx.cols() == C,
            "dout ", dout.shape.str(), " dx ", dx.shape.str(), " vs x ", x.shape.str());
  CPU_CHECK(op, gamma.numel() == C && dgamma.numel() == C && dbeta.numel() == C, "gamma/dgamma/dbeta must be [", C, "]");
  CPU_CHECK(op, mean.numel() == N && rstd.numel() == N, "mean/rstd must be [", N, "]");
  const float* mu = mean.ptr<const float>();
  const float* rs = rstd.ptr<const float>();

  // Pass 1: dx, one row per iteration.
#pragma omp parallel
  {
    float* gam = thread_scratch(0, C);
    float* xr = thread_scratch(1, C);
    float* dr = thread_scratch(2, C);
    float* dxr = thread_scratch(3, C);
    load_f32(gamma, 0, C, gam);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      load_f32(x, n * C, C, xr);
      load_f32(dout, n * C, C, dr);
      load_f32(dx, n * C, C, dxr);
      double sg = 0, sgx = 0;
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (xr[c] - mu[n]) * rs[n];
        const float g = dr[c] * gam[c];
        sg += g;
        sgx += static_cast<double>(g) * xhat;
      }
      const float mg = static_cast<float>(sg / C), mgx = static_cast<float>(sgx / C);
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (xr[c] - mu[n]) * rs[n];
        dxr[c] += rs[n] * (dr[c] * gam[c] - mg - xhat * mgx);
      }
      store_f32(dx, n * C, C, dxr);
    }
  }

  // Pass 2: dgamma/dbeta, one block of columns per task, rows summed in order (double).
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel
  {
    float* xr = thread_scratch(0, kColBlock);
    float* dr = thread_scratch(1, kColBlock);
    float* out = thread_scratch(2, kColBlock);
#pragma omp for schedule(static)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t c0 = bi * kColBlock, w = std::min(kColBlock, C - c0);
      double sg[kColBlock] = {}, sb[kColBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        load_f32(x, n * C + c0, w, xr);
        load_f32(dout, n * C + c0, w, dr);
        for (int64_t c = 0; c < w; ++c) {
          sg[c] += static_cast<double>(dr[c]) * ((xr[c] - mu[n]) * rs[n]);
          sb[c] += dr[c];
        }
      }
      load_f32(dgamma, c0, w, out);
      for (int64_t c = 0; c < w; ++c) out[c] += static_cast<float>(sg[c]);
      store_f32(dgamma, c0, w, out);
      load_f32(dbeta, c0, w, out);
      for (int64_t c = 0; c < w; ++c) out[c] += static_cast<float>(sb[c]);
      store_f32(dbeta, c0, w, out);
    }
  }
}

}  // namespace trident::cpu
