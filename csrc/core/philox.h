// Philox4x32-10 counter-based RNG (Salmon et al., SC'11), usable on host and device.
// Parameter init and dropout masks are pure functions of (key, counter), which is what
// makes them independent of the parallel layout (ARCHITECTURE.md, invariant 2).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TRIDENT_HD __host__ __device__ __forceinline__
#else
#define TRIDENT_HD inline
#endif

namespace trident {

struct Philox4 {
  uint32_t v[4];
};

TRIDENT_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on counter c with key (k0, k1).
TRIDENT_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c.v[0], hi0, lo0);
    philox_mulhilo(kM1, c.v[2], hi1, lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Uniform float in [0, 1) from the top 24 bits.
TRIDENT_HD float philox_uniform(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Standard normal from two uint32 (Box-Muller, first output), computed in double so the
// CPU and GPU paths agree to the last bit before the final rounding to float.
TRIDENT_HD float philox_normal(uint32_t a, uint32_t b) {
  const double u1 = (static_cast<double>(a) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  const double u2 = static_cast<double>(b) * (1.0 / 4294967296.0);
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// FNV-1a, used to turn a canonical parameter name into an RNG key.
inline uint32_t fnv1a32(const char* s) {
  uint32_t h = 2166136261u;
  for (; *s; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 16777619u;
  return h;
}

// The init value of element `index` of the canonical tensor hashed to `name_hash`:
// N(0, 1) from counter (index, 0, 0, 0), key (seed, name_hash). Scale by std outside.
TRIDENT_HD float init_normal(uint64_t seed, uint32_t name_hash, uint64_t index) {
  const Philox4 r = philox4x32_10(
      Philox4{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0x1417u}},
      static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(seed >> 32) * 0x85EBCA6Bu, name_hash);
  return philox_normal(r.v[0], r.v[1]);
}

// Dropout: where a mask is used, and for which sample. The mask of element `index`
// (a global index within one sample, independent of TP/PP/DP) is a pure function of
// (seed, site, sample, index); `sample` is the global consumed-sample number, which
// encodes the iteration and the micro-batch, so every layout draws the same mask.
struct DropoutKey {
  float p = 0.0f;            // drop probability; 0 disables dropout
  uint64_t seed = 0;         // run seed
  uint32_t site = 0;         // layer * kSitesPerLayer + DropoutSite
  uint64_t sample_base = 0;  // global sample number of row-block 0 of the micro-batch
  // Added to every element index (a multiple of 4): a tensor that starts inside a sample,
  // at its row r (sequence parallelism's shards), has index_base r x row and its rows are
  // numbered from there. Row-wise dropouts only: attention keys leave it 0
  // (attn_dropout_keep does not read it).
  uint64_t index_base = 0;
  bool enabled() const { return p > 0.0f; }
};

enum DropoutSite : uint32_t {
  kDropEmbedding = 0,  // after word+position embedding (layer 0 only)
  kDropAttnProbs = 1,  // attention probabilities
  kDropAttnOut = 2,    // after the attention output projection
  kDropMlpOut = 3,     // after the MLP down projection
  kSitesPerLayer = 4,
};

// The Philox block with counter `counter` of dropout key k and sample `sample`: the draw
// behind every dropout mask (row-wise and attention).
TRIDENT_HD Philox4 dropout_philox(const DropoutKey& k, uint64_t sample, uint64_t counter) {
  return philox4x32_10(Philox4{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                                static_cast<uint32_t>(sample), static_cast<uint32_t>(sample >> 32)}},
                       static_cast<uint32_t>(k.seed) ^ 0xD1B54A32u,
                       k.site ^ (static_cast<uint32_t>(k.seed >> 32) * 0x9E3779B9u));
}

// True when element `index` of sample `sample` is kept (the row-wise dropouts): word
// index & 3 of block index / 4, as a 24-bit uniform.
TRIDENT_HD bool dropout_keep(const DropoutKey& k, uint64_t sample, uint64_t index) {
  index += k.index_base;
  return philox_uniform(dropout_philox(k, sample, index >> 2).v[index & 3]) >= k.p;
}

// Attention-probability dropout draws 16-bit uniforms, 8 to a Philox block. Element (query
// i, key j) of global head hg (T x T scores) belongs to the block that covers queries
// i & ~1 and (i & ~1) + 1 by keys (j & ~3) .. (j & ~3) + 3, whose counter is the flat index
// of its first element, (hg T + (i & ~1)) T + (j & ~3); word j & 3 holds the even query's
// uniform in its low 16 bits and the odd query's in its high 16 bits. The element is kept
// when its uniform reaches attn_drop_threshold(p) and then scaled by attn_drop_scale(p).
// Why not dropout_keep: attention is bound by arithmetic, and a Philox block costs about
// as much as an element's share of the tensor-core products. 8 elements a block halve the
// draws of 24-bit uniforms, and the 2 x 4 shape lets four lanes share each block in both
// tile layouts of the CUDA kernels (rows = queries, and rows = keys).
TRIDENT_HD uint64_t attn_drop_counter(uint64_t hg, uint64_t T, uint64_t i, uint64_t j) {
  return (hg * T + (i & ~uint64_t{1})) * T + (j & ~uint64_t{3});
}

// The 16-bit uniform of query i in word w of its block (low half: even i).
TRIDENT_HD uint32_t attn_drop_uniform(uint32_t w, uint64_t i) { return (w >> (16 * (i & 1))) & 0xffffu; }

// The smallest m with m * 2^-16 >= p: keep when the 16-bit uniform is >= m. 65536 (p
// within 2^-16 of 1) keeps nothing.
inline uint32_t attn_drop_threshold(float p) {
  if (!(p > 0.0f)) return 0;
  const double t = std::ceil(static_cast<double>(p) * 65536.0);
  return t >= 65536.0 ? 65536u : static_cast<uint32_t>(t);
}

// The factor of a kept element: the inverse of the keep probability, (65536 - m) / 65536,
// so that the expectation is exact (p * 2^16 is rarely an integer). 1 without dropout.
inline float attn_drop_scale(float p) {
  const uint32_t m = attn_drop_threshold(p);
  return m >= 65536u ? 0.0f : static_cast<float>(65536.0 / static_cast<double>(65536u - m));
}

// The keep decisions of query row i of global head hg of sample `sample`, drawing each
// Philox block once for its 4 keys (the CPU attention walks a row's keys in order).
class AttnRowDropout {
 public:
  AttnRowDropout(const DropoutKey& k, uint64_t sample, uint64_t hg, uint64_t T, uint64_t i)
      : k_(k), sample_(sample), hg_(hg), T_(T), i_(i), threshold_(attn_drop_threshold(k.p)) {}
  // True when key j is kept.
  bool keep(uint64_t j) {
    const uint64_t counter = attn_drop_counter(hg_, T_, i_, j);
    if (!drawn_ || counter != counter_) {
      block_ = dropout_philox(k_, sample_, counter);
      counter_ = counter;
      drawn_ = true;
    }
    return attn_drop_uniform(block_.v[j & 3], i_) >= threshold_;
  }

 private:
  DropoutKey k_;
  uint64_t sample_, hg_, T_, i_;
  uint32_t threshold_;
  bool drawn_ = false;
  uint64_t counter_ = 0;
  Philox4 block_{};
};

// True when element (query i, key j) of global head hg of sample `sample` is kept.
inline bool attn_dropout_keep(const DropoutKey& k, uint64_t sample, uint64_t hg, uint64_t T, uint64_t i,
                              uint64_t j) {
  return AttnRowDropout(k, sample, hg, T, i).keep(j);
}

}  // namespace trident
