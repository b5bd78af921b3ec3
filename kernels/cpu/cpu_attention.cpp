// Fused causal multi-head attention, the exact reference: one task per (batch, head),
// rows processed one at a time (no tiling), softmax from the row's log-sum-exp.
//   qkv [B, T, 3, H, D]; out [B, T, H, D]; lse f32 [B, H, T]
//   s_ij = q_i . k_j / sqrt(D) (f_i <= j <= i);  p_ij = exp(s_ij - lse_i);  out_i = sum_j p_ij z_ij v_j
// where f_i is the first key of query i's document (s.document_starts; 0 without documents)
// and z_ij = keep x attn_drop_scale(p_drop) is the attention-probability dropout (philox.h's
// attn_dropout_keep; 1 without dropout). With s.dropout_mask the forward saves the keep bits
// and the backward reads them instead of drawing them again.
// The backward recomputes p from lse, so nothing but lse (and the saved mask) is kept; with
// dp_ij = z_ij do_i.v_j:
//   dv_j += p_ij z_ij do_i;  ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik);
//   dq_i = sum_j ds_ij k_j / sqrt(D);  dk_j += ds_ij q_i / sqrt(D).
// attention_decode (generation) attends the new queries of each sequence over a KV cache.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/attn_dropout_mask.h"
#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

struct Layout {
  int64_t B, T, H, D;
  // Offset of (b, t, which, h, 0) in qkv.
  int64_t qkv(int64_t b, int64_t t, int which, int64_t h) const { return ((b * T + t) * 3 + which) * H * D + h * D; }
  int64_t out(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H * D + h * D; }
};

Layout check(const char* op, const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s) {
  check_float(op, qkv);
  check_float(op, out);
  check_f32(op, lse);
  CPU_CHECK(op, s.B > 0 && s.T > 0 && s.H > 0 && s.D > 0, "bad shape B=", s.B, " T=", s.T, " H=", s.H, " D=", s.D);
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D;
  CPU_CHECK(op, qkv.numel() == B * T * 3 * H * D, "qkv ", qkv.shape.str(), " for B,T,H,D=", B, ",", T, ",", H, ",", D);
  CPU_CHECK(op, out.numel() == B * T * H * D, "out ", out.shape.str(), " for B,T,H,D=", B, ",", T, ",", H, ",", D);
  CPU_CHECK(op, lse.numel() == B * H * T, "lse ", lse.shape.str(), " expected B*H*T=", B * H * T);
  const Tensor& docs = s.document_starts;
  if (!docs.empty()) {
    check_cpu(op, docs);
    CPU_CHECK(op, docs.dtype == DType::I32 && docs.numel() == B * T, "document_starts must be int32 [B*T]=", B * T,
              ", got ", dtype_name(docs.dtype), " ", docs.shape.str());
    // Contiguous documents: each position starts a new one or continues its predecessor's.
    const int32_t* f = docs.ptr<const int32_t>();
    for (int64_t n = 0; n < B * T; ++n) {
      const int64_t t = n % T;
      CPU_CHECK(op, f[n] == t || (t > 0 && f[n] == f[n - 1]), "document_starts[", n, "] = ", f[n], " at position ",
                t, ": a position starts its document (", t, ") or continues its predecessor's");
    }
  }
  return Layout{B, T, H, D};
}

// First key query t of sample b sees: its document's start, 0 without documents.
inline int64_t first_key(const AttentionShape& s, int64_t b, int64_t t) {
  return s.document_starts.empty() ? 0 : s.document_starts.ptr<const int32_t>()[b * s.T + t];
}

// Loads head h of batch b of Q, K, V (which = 0, 1, 2) as a dense [T, D] fp32 matrix.
void load_head(const Tensor& qkv, const Layout& L, int64_t b, int which, int64_t h, float* dst) {
  for (int64_t t = 0; t < L.T; ++t) load_f32(qkv, L.qkv(b, t, which, h), L.D, dst + t * L.D);
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The saved mask (s.dropout_mask, core/attn_dropout_mask.h's layout) as uint16 rows, or null
// when there is none or no dropout; blocks: attn_mask_blocks(T).
struct SavedMask {
  uint16_t* rows = nullptr;
  int64_t blocks = 0;
};
SavedMask saved_mask(const char* op, const AttentionShape& s, const DropoutKey& drop) {
  const Tensor& m = s.dropout_mask;
  if (m.empty() || !drop.enabled()) return {};
  check_cpu(op, m);
  const int64_t words = attn_mask_words(s.B, s.H, s.T);
  CPU_CHECK(op, m.dtype == DType::I32 && m.numel() == words, "dropout_mask must be int32 [", words, "] for B,H,T=",
            s.B, ",", s.H, ",", s.T, ", got ", dtype_name(m.dtype), " ", m.shape.str());
  return {static_cast<uint16_t*>(m.data), attn_mask_blocks(s.T)};
}

// Dropout multipliers z_ij of query row i of local head bh (global head hg; T x T scores):
// inv_keep when kept, 0 when dropped, 1 without dropout. With a saved mask the forward
// (kSave) records each decision it draws and the backward (kRead) reads them back.
class RowDropFactors {
 public:
  enum class Mode { kSave, kRead };
  RowDropFactors(const DropoutKey& drop, float inv_keep, uint64_t sample, uint64_t hg, int64_t T, int64_t i,
                 const SavedMask& mask, int64_t bh, Mode mode)
      : on_(drop.enabled()), read_(mask.rows != nullptr && mode == Mode::kRead), inv_keep_(inv_keep), mask_(mask),
        bh_(bh), i_(i), row_(drop, sample, hg, static_cast<uint64_t>(T), static_cast<uint64_t>(i)) {}
  float operator()(int64_t j) {
    if (!on_) return 1.0f;
    const bool keep =
        read_ ? attn_mask_kept(mask_.rows, mask_.blocks, bh_, i_, j) : row_.keep(static_cast<uint64_t>(j));
    if (!read_ && mask_.rows != nullptr) {
      const uint16_t bit = static_cast<uint16_t>(1u << attn_mask_bit(j));
      uint16_t& r = mask_.rows[row(j)];
      r = keep ? static_cast<uint16_t>(r | bit) : static_cast<uint16_t>(r & ~bit);
    }
    return keep ? inv_keep_ : 0.0f;
  }

 private:
  int64_t row(int64_t j) const { return attn_mask_row(mask_.blocks, bh_, i_, j); }
  bool on_, read_;
  float inv_keep_;
  SavedMask mask_;
  int64_t bh_, i_;
  AttnRowDropout row_;
};

}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s,
                       const DropoutKey& drop) {
  const Layout L = check("attention_forward", qkv, out, lse, s);
  const int64_t T = L.T, D = L.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float inv_keep = drop.enabled() ? attn_drop_scale(drop.p) : 1.0f;
  const SavedMask mask = saved_mask("attention_forward", s, drop);
  float* lse_p = lse.ptr<float>();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < L.B * L.H; ++bh) {
    const int64_t b = bh / L.H, h = bh % L.H;
    float* Q = thread_scratch(0, T * D);
    float* K = thread_scratch(1, T * D);
    float* V = thread_scratch(2, T * D);
    float* p = thread_scratch(3, T);
    float* o = thread_scratch(4, D);
    load_head(qkv, L, b, 0, h, Q);
    load_head(qkv, L, b, 1, h, K);
    load_head(qkv, L, b, 2, h, V);
    const uint64_t sample = drop.sample_base + static_cast<uint64_t>(b);
    const uint64_t h_global = static_cast<uint64_t>(s.head_offset + h);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t j0 = first_key(s, b, i);
      float mx = -INFINITY;
      for (int64_t j = j0; j <= i; ++j) {
        p[j] = scale * dot(Q + i * D, K + j * D, D);
        mx = std::max(mx, p[j]);
      }
      double se = 0;
      for (int64_t j = j0; j <= i; ++j) se += std::exp(static_cast<double>(p[j] - mx));
      const float l = mx + static_cast<float>(std::log(se));
      lse_p[(b * L.H + h) * T + i] = l;
      std::fill(o, o + D, 0.f);
      RowDropFactors z(drop, inv_keep, sample, h_global, T, i, mask, bh, RowDropFactors::Mode::kSave);
      for (int64_t j = j0; j <= i; ++j) {
        const float w = std::exp(p[j] - l) * z(j);
        const float* v = V + j * D;
        for (int64_t d = 0; d < D; ++d) o[d] += w * v[d];
      }
      store_f32(out, L.out(b, i, h), D, o);
    }
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& lse, const Tensor& dqkv,
                        const AttentionShape& s, const DropoutKey& drop) {
  const char* op = "attention_backward";
  const Layout L = check(op, qkv, dout, lse, s);
  check_float(op, dqkv);
  CPU_CHECK(op, dqkv.numel() == qkv.numel(), "dqkv ", dqkv.shape.str(), " vs qkv ", qkv.shape.str());
  const int64_t T = L.T, D = L.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float inv_keep = drop.enabled() ? attn_drop_scale(drop.p) : 1.0f;
  const SavedMask mask = saved_mask(op, s, drop);
  const float* lse_p = lse.ptr<const float>();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < L.B * L.H; ++bh) {
    const int64_t b = bh / L.H, h = bh % L.H;
    float* Q = thread_scratch(0, T * D);
    float* K = thread_scratch(1, T * D);
    float* V = thread_scratch(2, T * D);
    float* dQ = thread_scratch(3, T * D);
    float* dK = thread_scratch(4, T * D);
    float* dV = thread_scratch(5, T * D);
    float* dO = thread_scratch(6, T * D + 2 * T);
    float* p = dO + T * D;  // p_ij (undropped) for the current row
    float* dp = p + T;      // dp_ij for the current row
    load_head(qkv, L, b, 0, h, Q);
    load_head(qkv, L, b, 1, h, K);
    load_head(qkv, L, b, 2, h, V);
    for (int64_t t = 0; t < T; ++t) load_f32(dout, L.out(b, t, h), D, dO + t * D);
    std::fill(dQ, dQ + T * D, 0.f);
    std::fill(dK, dK + T * D, 0.f);
    std::fill(dV, dV + T * D, 0.f);
    const uint64_t sample = drop.sample_base + static_cast<uint64_t>(b);
    const uint64_t h_global = static_cast<uint64_t>(s.head_offset + h);
    for (int64_t i = 0; i < T; ++i) {
      const float l = lse_p[(b * L.H + h) * T + i];
      const float* q = Q + i * D;
      const float* g = dO + i * D;
      const int64_t j0 = first_key(s, b, i);
      double delta = 0;
      RowDropFactors zr(drop, inv_keep, sample, h_global, T, i, mask, bh, RowDropFactors::Mode::kRead);
      for (int64_t j = j0; j <= i; ++j) {
        p[j] = std::exp(scale * dot(q, K + j * D, D) - l);
        const float z = zr(j);
        dp[j] = z * dot(g, V + j * D, D);
        delta += static_cast<double>(p[j]) * dp[j];
        const float w = p[j] * z;
        float* dv = dV + j * D;
        for (int64_t d = 0; d < D; ++d) dv[d] += w * g[d];
      }
      const float dl = static_cast<float>(delta);
      float* dq = dQ + i * D;
      for (int64_t j = j0; j <= i; ++j) {
        const float ds = scale * p[j] * (dp[j] - dl);
        const float* k = K + j * D;
        float* dk = dK + j * D;
        for (int64_t d = 0; d < D; ++d) {
          dq[d] += ds * k[d];
          dk[d] += ds * q[d];
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      store_f32(dqkv, L.qkv(b, t, 0, h), D, dQ + t * D);
      store_f32(dqkv, L.qkv(b, t, 1, h), D, dK + t * D);
      store_f32(dqkv, L.qkv(b, t, 2, h), D, dV + t * D);
    }
  }
}

}  // namespace trident::cpu

namespace trident::cpu {

// Generation: the new tokens' K and V go into the caches at positions p_b .. p_b + T - 1
// (p_b: at.pos, or sequence b's own at.rows[b]), then the query at p_b + t of each (batch,
// head) attends over [0, p_b + t] with an fp32 softmax from the row maximum.
void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                      const Tensor& out) {
  const char* op = "attention_decode";
  for (const Tensor* t : {&qkv, &k_cache, &v_cache, &out}) check_cpu(op, *t);
  const DecodeShape s = check_decode_shapes(op, qkv, k_cache, v_cache, at, out);
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D, Tmax = s.Tmax, C = H * D;
  std::vector<int64_t> first(static_cast<size_t>(B), at.pos);  // each sequence's first new position
  if (!at.rows.empty()) {
    check_cpu(op, at.rows);
    for (int64_t b = 0; b < B; ++b) {
      first[b] = static_cast<const int32_t*>(at.rows.data)[b];
      TRIDENT_CHECK(first[b] >= 0 && first[b] <= at.pos, op, ": sequence ", b, " at position ", first[b],
                    ", outside [0, ", at.pos, "]");
    }
  }
  std::vector<float> row(static_cast<size_t>(C));
  for (int64_t b = 0; b < B; ++b)  // the new K and V first (rounded to the cache dtype)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t where = (b * Tmax + first[b] + t) * C, token = (b * T + t) * 3 * C;
      load_f32(qkv, token + C, C, row.data());
      store_f32(k_cache, where, C, row.data());
      load_f32(qkv, token + 2 * C, C, row.data());
      store_f32(v_cache, where, C, row.data());
    }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Dynamic: a query's work grows with its position, so static blocks would leave the last
  // thread the longest rows of a prefill.
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t n = first[b] + t + 1;  // keys this query sees
        std::vector<float> q(D), kv(D), p(n), acc(D, 0.f);
        load_f32(qkv, (b * T + t) * 3 * C + h * D, D, q.data());
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          load_f32(k_cache, (b * Tmax + j) * C + h * D, D, kv.data());
          p[j] = dot(q.data(), kv.data(), D) * scale;
          mx = std::max(mx, p[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += p[j] = std::exp(p[j] - mx);
        for (int64_t j = 0; j < n; ++j) {
          load_f32(v_cache, (b * Tmax + j) * C + h * D, D, kv.data());
          for (int64_t d = 0; d < D; ++d) acc[d] += p[j] * kv[d];
        }
        for (int64_t d = 0; d < D; ++d) acc[d] /= sum;
        store_f32(out, ((b * T + t) * H + h) * D, D, acc.data());
      }
}

}  // namespace trident::cpu
