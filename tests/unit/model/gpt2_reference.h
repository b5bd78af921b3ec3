// An independent, naive, double-precision GPT-2 forward used as the reference for the
// model's loss and (through central finite differences) its gradients. It shares only
// the canonical parameter layout and the dropout mask function with the code under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"

namespace trident::ref {

struct RefConfig {
  int L, C, H, T, B;
  int V;  // real vocabulary (rows of wte used for logits)
  float hidden_dropout = 0, attention_dropout = 0;
  uint64_t dropout_seed = 0, sample_base = 0;
  // Megatron's --reset-position-ids / --reset-attention-mask: a document ends with each `eod`
  // token; positions restart after it, and the tokens after it do not attend to it or before.
  int eod = -1;
  bool reset_position_ids = false, reset_attention_mask = false;
  Gelu gelu = Gelu::Tanh;  // the MLP's activation
};

// The position just after the last `eod` among tokens [0, t) of a sample (0 when none).
inline int document_begin(const RefConfig& c, const std::vector<int>& tokens, int b, int t) {
  int begin = 0;
  for (int u = 0; u < t; ++u)
    if (tokens[b * c.T + u] == c.eod) begin = u + 1;
  return begin;
}

using Params = std::map<std::string, std::vector<double>>;  // canonical tensors, row-major

inline void layernorm(const double* x, const double* g, const double* b, double* y, int C) {
  double mean = 0, var = 0;
  for (int c = 0; c < C; ++c) mean += x[c];
  mean /= C;
  for (int c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
  var /= C;
  const double rstd = 1.0 / std::sqrt(var + 1e-5);
  for (int c = 0; c < C; ++c) y[c] = (x[c] - mean) * rstd * g[c] + b[c];
}

// y[out] = W[out, in] x[in] + b
inline void linear(const double* x, const std::vector<double>& W, const std::vector<double>& b, double* y, int in,
                   int out) {
  for (int o = 0; o < out; ++o) {
    double s = b[o];
    for (int i = 0; i < in; ++i) s += W[static_cast<size_t>(o) * in + i] * x[i];
    y[o] = s;
  }
}

inline double gelu(double x, Gelu form) {
  if (form == Gelu::Erf) return 0.5 * x * std::erfc(-x / std::sqrt(2.0));  // x Phi(x)
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

inline double drop(const RefConfig& c, float p, uint32_t site, int b, uint64_t index, double v) {
  if (p <= 0) return v;
  DropoutKey k;
  k.p = p;
  k.seed = c.dropout_seed;
  k.site = site;
  return dropout_keep(k, c.sample_base + b, index) ? v / (1.0 - p) : 0.0;
}

// Attention-probability dropout of query i, key j of head hd (philox.h's attn_dropout_keep),
// kept values divided by the 16-bit keep probability.
inline double attn_drop(const RefConfig& c, uint32_t site, int b, int hd, int T, int i, int j, double v) {
  const float p = c.attention_dropout;
  if (p <= 0) return v;
  DropoutKey k;
  k.p = p;
  k.seed = c.dropout_seed;
  k.site = site;
  const double keep_prob = 1.0 - std::ceil(static_cast<double>(p) * 65536.0) / 65536.0;
  return attn_dropout_keep(k, c.sample_base + b, hd, T, i, j) ? v / keep_prob : 0.0;
}

// Logits over the real vocabulary at every position: [B, T, V].
inline std::vector<double> gpt2_logits(const RefConfig& c, const Params& P, const std::vector<int>& tokens) {
  const int C = c.C, T = c.T, H = c.H, D = C / H, F = 4 * C;
  std::vector<double> all(static_cast<size_t>(c.B) * T * c.V);
  for (int b = 0; b < c.B; ++b) {
    std::vector<double> x(static_cast<size_t>(T) * C);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < C; ++i) {
        const int pos = c.reset_position_ids ? t - document_begin(c, tokens, b, t) : t;
        const double e = P.at("wte")[static_cast<size_t>(tokens[b * T + t]) * C + i] + P.at("wpe")[pos * C + i];
        x[t * C + i] = drop(c, c.hidden_dropout, kDropEmbedding, b, static_cast<uint64_t>(t) * C + i, e);
      }
    for (int l = 0; l < c.L; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      std::vector<double> ln(T * C), qkv(T * 3 * C), att(T * C, 0.0), proj(C), mid(T * C);
      for (int t = 0; t < T; ++t) {
        layernorm(&x[t * C], P.at(h + "ln_1.weight").data(), P.at(h + "ln_1.bias").data(), &ln[t * C], C);
        linear(&ln[t * C], P.at(h + "attn.qkv.weight"), P.at(h + "attn.qkv.bias"), &qkv[t * 3 * C], C, 3 * C);
      }
      for (int hd = 0; hd < H; ++hd)
        for (int i = 0; i < T; ++i) {
          const int first = c.reset_attention_mask ? document_begin(c, tokens, b, i) : 0;
          std::vector<double> s(i + 1);
          double mx = -1e300;
          for (int j = first; j <= i; ++j) {
            double d = 0;
            for (int k = 0; k < D; ++k) d += qkv[i * 3 * C + hd * D + k] * qkv[j * 3 * C + C + hd * D + k];
            s[j] = d / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[j]);
          }
          double z = 0;
          for (int j = first; j <= i; ++j) z += std::exp(s[j] - mx);
          for (int j = first; j <= i; ++j) {
            const double p = std::exp(s[j] - mx) / z;
            const double pd = attn_drop(c, l * kSitesPerLayer + kDropAttnProbs, b, hd, T, i, j, p);
            for (int k = 0; k < D; ++k) att[i * C + hd * D + k] += pd * qkv[j * 3 * C + 2 * C + hd * D + k];
          }
        }
      for (int t = 0; t < T; ++t) {
        linear(&att[t * C], P.at(h + "attn.proj.weight"), P.at(h + "attn.proj.bias"), proj.data(), C, C);
        for (int i = 0; i < C; ++i)
          mid[t * C + i] = x[t * C + i] + drop(c, c.hidden_dropout, l * kSitesPerLayer + kDropAttnOut, b,
                                               static_cast<uint64_t>(t) * C + i, proj[i]);
      }
      std::vector<double> fc(F), out(C);
      for (int t = 0; t < T; ++t) {
        layernorm(&mid[t * C], P.at(h + "ln_2.weight").data(), P.at(h + "ln_2.bias").data(), &ln[t * C], C);
        linear(&ln[t * C], P.at(h + "mlp.fc.weight"), P.at(h + "mlp.fc.bias"), fc.data(), C, F);
        for (double& v : fc) v = gelu(v, c.gelu);
        linear(fc.data(), P.at(h + "mlp.proj.weight"), P.at(h + "mlp.proj.bias"), out.data(), F, C);
        for (int i = 0; i < C; ++i)
          x[t * C + i] = mid[t * C + i] + drop(c, c.hidden_dropout, l * kSitesPerLayer + kDropMlpOut, b,
                                               static_cast<uint64_t>(t) * C + i, out[i]);
      }
    }
    std::vector<double> lnf(C);
    for (int t = 0; t < T; ++t) {
      layernorm(&x[t * C], P.at("ln_f.weight").data(), P.at("ln_f.bias").data(), lnf.data(), C);
      double* logits = &all[(static_cast<size_t>(b) * T + t) * c.V];
      for (int v = 0; v < c.V; ++v) {
        double s = 0;
        for (int i = 0; i < C; ++i) s += P.at("wte")[static_cast<size_t>(v) * C + i] * lnf[i];
        logits[v] = s;
      }
    }
  }
  return all;
}

// Mean cross-entropy over all B*T targets.
inline double gpt2_loss(const RefConfig& c, const Params& P, const std::vector<int>& tokens,
                        const std::vector<int>& targets) {
  const std::vector<double> all = gpt2_logits(c, P, tokens);
  double total = 0;
  for (size_t n = 0; n < targets.size(); ++n) {
    const double* logits = &all[n * c.V];
    const double mx = *std::max_element(logits, logits + c.V);
    double z = 0;
    for (int v = 0; v < c.V; ++v) z += std::exp(logits[v] - mx);
    total += std::log(z) + mx - logits[targets[n]];
  }
  return total / (static_cast<double>(c.B) * c.T);
}

}  // namespace trident::ref
