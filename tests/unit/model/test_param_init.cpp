// The fast parameter init (model/param_init.h, ParamStore::init) against the per-element
// reference it replaced: every value bit for bit, padding included, for every TP slicing,
// fp32 and bf16. The fast path and its fallback both have to be exercised for this to mean
// anything, so the range test also checks that some elements took the fallback.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/param_init.h"
#include "model/param_store.h"
#include "model_test_util.h"

namespace trident {
namespace {

// The init loop as it was, one element at a time (the definition of the numbers).
std::vector<float> reference_init(const LocalParam& p, int tp, int tp_rank, uint64_t seed) {
  const ParamSpec& s = p.spec;
  std::vector<float> host(static_cast<size_t>(p.numel()), 0.0f);
  const int64_t row_len = s.shape.ndim == 2 ? s.shape.dims[1] : 1;
  const uint32_t name_hash = fnv1a32(s.name.c_str());
  for (int64_t i = 0; i < p.numel(); ++i) {
    const int64_t g = canonical_index(s, tp, tp_rank, i);
    if (s.init_rows >= 0 && g / row_len >= s.init_rows) continue;
    switch (s.init) {
      case InitKind::Normal: host[i] = s.std * init_normal(seed, name_hash, static_cast<uint64_t>(g)); break;
      case InitKind::Ones: host[i] = 1.0f; break;
      case InitKind::Zeros: break;
    }
  }
  return host;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

TEST(ParamInit, RangeMatchesInitNormalBitForBit) {
  const uint64_t before = init_normal_fallbacks();
  const int64_t n = 1 << 21;
  // Index ranges at 0, across the 2^32 boundary (the counter's high word) and unaligned.
  for (const uint64_t first : {uint64_t{0}, (uint64_t{1} << 32) - 1000, uint64_t{123457}}) {
    for (const uint64_t seed : {uint64_t{1234}, uint64_t{0xdeadbeef12345678ull}}) {
      const uint32_t name_hash = fnv1a32("h.3.mlp.fc.weight");
      const float std = first == 0 ? 0.02f : 0.00288675f;
      std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      init_normal_range(seed, name_hash, first, n, std, got.data());
      for (int64_t i = 0; i < n; ++i) want[i] = std * init_normal(seed, name_hash, first + static_cast<uint64_t>(i));
      expect_same_bits(got, want, "range from " + std::to_string(first) + " seed " + std::to_string(seed));
    }
  }
  // About 4 in 100,000 elements need the reference; both paths must have run.
  const uint64_t fallbacks = init_normal_fallbacks() - before;
  EXPECT_GT(fallbacks, 0u);
  EXPECT_LT(fallbacks, static_cast<uint64_t>(6 * n) / 1000);
}

TEST(ParamInit, ShortAndEmptyRanges) {
  for (int64_t n : {0, 1, 3, 255, 256, 257, 1000}) {
    std::vector<float> got(static_cast<size_t>(n) + 1, -7.0f), want(static_cast<size_t>(n) + 1, -7.0f);
    init_normal_range(99, 5, 77, n, 1.0f, got.data());
    for (int64_t i = 0; i < n; ++i) want[i] = init_normal(99, 5, 77 + static_cast<uint64_t>(i));
    expect_same_bits(got, want, "n = " + std::to_string(n));  // and nothing written past n
  }
}

TEST(ParamInit, StoreMatchesPerElementReferenceForEveryTensorParallelSlice) {
  ModelConfig cfg = test::tiny_config();
  cfg.num_attention_heads = 4;
  cfg.hidden_size = 64;  // runs longer than one row, shorter than the init's 64K-element chunks
  auto be = make_cpu_backend();
  auto all = [](const ParamSpec&) { return true; };
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int tp : {1, 2, 4}) {
      for (int r = 0; r < tp; ++r) {
        ParamStore store(*be, gpt2_param_specs(cfg, tp), tp, r, dt, DType::F32, all);
        store.init(42);
        for (const LocalParam& p : store.list()) {
          std::vector<float> want = reference_init(p, tp, r, 42);
          if (dt == DType::BF16)
            for (float& x : want) x = bf16_to_float(float_to_bf16(x));
          expect_same_bits(test::to_host(*be, store.param(p)), want,
                           p.spec.name + " tp" + std::to_string(tp) + " rank " + std::to_string(r));
        }
      }
    }
  }
}

// A tensor larger than one 64K chunk (split over threads), with vocabulary padding rows.
TEST(ParamInit, LargeTensorAcrossChunksMatchesReference) {
  ModelConfig cfg = test::tiny_config();
  cfg.hidden_size = 256;
  cfg.num_attention_heads = 4;
  cfg.num_layers = 1;
  cfg.vocab_size = 1000;  // wte padded to 1008 (tp 1) or 1024 (tp 2) rows of 256: 4 chunks, padding rows
  auto be = make_cpu_backend();
  for (int tp : {1, 2}) {
    ParamStore store(*be, gpt2_param_specs(cfg, tp), tp, tp - 1, DType::F32, DType::F32,
                     [](const ParamSpec&) { return true; });
    store.init(2024);
    for (const LocalParam& p : store.list())
      expect_same_bits(test::to_host(*be, store.param(p)), reference_init(p, tp, tp - 1, 2024),
                       p.spec.name + " tp" + std::to_string(tp));
  }
}

}  // namespace
}  // namespace trident
