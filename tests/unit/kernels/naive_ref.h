// Naive double-precision references of every CPU op, written from the definitions in
// backend.h (no blocking, no clever tricks), for the kernel tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"

namespace trident::ref {

using Vec = std::vector<double>;

// out[n] = wte[tok - vocab_start] (0 if outside the shard) + wpe[n % T].
inline Vec embedding(const std::vector<int32_t>& tok, const Vec& wte, int64_t V, int64_t C,
                     int64_t vocab_start, const Vec* wpe, int64_t T) {
  Vec out(tok.size() * C, 0.0);
  for (size_t n = 0; n < tok.size(); ++n) {
    const int64_t id = tok[n] - vocab_start;
    for (int64_t c = 0; c < C; ++c) {
      double v = (id >= 0 && id < V) ? wte[id * C + c] : 0.0;
      if (wpe) v += (*wpe)[(n % T) * C + c];
      out[n * C + c] = v;
    }
  }
  return out;
}

inline Vec layernorm(const Vec& x, const Vec& g, const Vec& b, int64_t N, int64_t C, Vec* mean = nullptr,
                     Vec* rstd = nullptr) {
  Vec out(N * C);
  if (mean) mean->assign(N, 0);
  if (rstd) rstd->assign(N, 0);
  for (int64_t n = 0; n < N; ++n) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += x[n * C + c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu);
    var /= C;
    const double r = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - mu) * r * g[c] + b[c];
    if (mean) (*mean)[n] = mu;
    if (rstd) (*rstd)[n] = r;
  }
  return out;
}

// op(a)[M,K] @ op(b)[K,N] + bias; a is [K,M] when ta, b is [N,K] when tb.
inline Vec matmul(const Vec& a, const Vec& b, const Vec* bias, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
  Vec out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? a[k * M + m] : a[m * K + k]) * (tb ? b[n * K + k] : b[k * N + n]);
      out[m * N + n] = s;
    }
  return out;
}

inline double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// The exact GELU, x Phi(x), through erfc: accurate in double where 1 + erf(x / sqrt 2) cancels.
inline double gelu_erf(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

inline double gelu(double x, Gelu form) { return form == Gelu::Erf ? gelu_erf(x) : gelu(x); }

// gelu'(x) of each form, in double.
inline double gelu_grad(double x, Gelu form) {
  if (form == Gelu::Erf) return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

// Dropout multiplier of (sample, index): 1/(1-p) when kept, 0 when dropped, 1 when off.
inline double drop_factor(const DropoutKey& k, uint64_t sample, uint64_t index) {
  if (!k.enabled()) return 1.0;
  return dropout_keep(k, sample, index) ? 1.0 / (1.0 - static_cast<double>(k.p)) : 0.0;
}

// Attention-probability dropout multiplier of query i, key j of global head hg: the inverse
// of the 16-bit keep probability (1 - ceil(p 2^16) / 2^16) when kept, 0 when dropped, 1 when off.
inline double attn_drop_factor(const DropoutKey& k, uint64_t sample, uint64_t hg, int T, int i, int j) {
  if (!k.enabled()) return 1.0;
  const double keep_prob = 1.0 - std::ceil(static_cast<double>(k.p) * 65536.0) / 65536.0;
  return attn_dropout_keep(k, sample, hg, T, i, j) ? 1.0 / keep_prob : 0.0;
}

// Causal attention on qkv [B,T,3,H,D]; returns out [B,T,H,D], fills lse [B,H,T].
inline Vec attention(const Vec& qkv, int B, int T, int H, int D, int head_offset, const DropoutKey& drop,
                     Vec* lse = nullptr) {
  Vec out(static_cast<size_t>(B) * T * H * D, 0.0);
  if (lse) lse->assign(static_cast<size_t>(B) * H * T, 0.0);
  auto at = [&](int b, int t, int w, int h, int d) { return qkv[((((size_t)b * T + t) * 3 + w) * H + h) * D + d]; };
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        Vec s(i + 1);
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e) d += at(b, i, 0, h, e) * at(b, j, 1, h, e);
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double se = 0;
        for (int j = 0; j <= i; ++j) se += std::exp(s[j] - mx);
        const double l = mx + std::log(se);
        if (lse) (*lse)[((size_t)b * H + h) * T + i] = l;
        const uint64_t hg = static_cast<uint64_t>(head_offset + h);
        for (int j = 0; j <= i; ++j) {
          const double w = std::exp(s[j] - l) * attn_drop_factor(drop, drop.sample_base + b, hg, T, i, j);
          for (int e = 0; e < D; ++e) out[(((size_t)b * T + i) * H + h) * D + e] += w * at(b, j, 2, h, e);
        }
      }
  return out;
}

// Generation-time attention of one query per (b, h) over cache rows 0..pos:
// q [B, H, D]; kc, vc [B, Tmax, H, D] (row pos already holding the new token's K and V);
// returns out [B, H, D] = softmax(q . K[0..pos]^T / sqrt(D)) V[0..pos].
inline Vec attention_decode(const Vec& q, const Vec& kc, const Vec& vc, int B, int Tmax, int H, int D, int pos) {
  Vec out(static_cast<size_t>(B) * H * D, 0.0);
  auto row = [&](int b, int t, int h) { return (((size_t)b * Tmax + t) * H + h) * D; };
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const double* qq = q.data() + ((size_t)b * H + h) * D;
      Vec s(pos + 1);
      double mx = -INFINITY;
      for (int t = 0; t <= pos; ++t) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += qq[e] * kc[row(b, t, h) + e];
        s[t] = d * scale;
        mx = std::max(mx, s[t]);
      }
      double se = 0;
      for (int t = 0; t <= pos; ++t) se += (s[t] = std::exp(s[t] - mx));
      double* o = out.data() + ((size_t)b * H + h) * D;
      for (int t = 0; t <= pos; ++t)
        for (int e = 0; e < D; ++e) o[e] += s[t] / se * vc[row(b, t, h) + e];
    }
  return out;
}

// Per-row cross-entropy over the first `valid` columns of [N, V] logits (unsharded).
// Returns losses (0 for negative targets); fills the softmax gradient when asked.
inline Vec xent(const Vec& logits, const std::vector<int32_t>& tg, int64_t N, int64_t V, int64_t valid,
                Vec* grad = nullptr, Vec* correct = nullptr) {
  Vec loss(N, 0.0);
  if (grad) grad->assign(N * V, 0.0);
  if (correct) correct->assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (tg[n] < 0) continue;
    double mx = -INFINITY;
    for (int64_t c = 0; c < valid; ++c) mx = std::max(mx, logits[n * V + c]);
    double se = 0;
    for (int64_t c = 0; c < valid; ++c) se += std::exp(logits[n * V + c] - mx);
    loss[n] = std::log(se) + mx - logits[n * V + tg[n]];
    if (correct) (*correct)[n] = logits[n * V + tg[n]] >= mx ? 1.0 : 0.0;
    if (grad)
      for (int64_t c = 0; c < valid; ++c)
        (*grad)[n * V + c] = std::exp(logits[n * V + c] - mx) / se - (c == tg[n] ? 1.0 : 0.0);
  }
  return loss;
}

}  // namespace trident::ref
