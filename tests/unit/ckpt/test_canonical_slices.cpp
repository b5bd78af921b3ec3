// Canonical tensors <-> TP slices: exact reassembly at tp 1, 2, 4 for every GPT-2 parameter,
// the tp=2 layout checked by hand, and vocab padding across tp changes.
#include "ckpt/canonical_slices.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ckpt_test_util.h"
#include "core/error.h"

namespace trident {
namespace {

using testing::small_config;

std::vector<float> random_tensor(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

TEST(CanonicalSlices, SplitAndReassembleEveryParamBitExact) {
  const ModelConfig cfg = small_config();
  int checked = 0;
  for (int tp : {1, 2, 4}) {
    uint32_t seed = 1000 * tp;
    for (const ParamSpec& spec : gpt2_param_specs(cfg, tp)) {
      SCOPED_TRACE(spec.name + " tp=" + std::to_string(tp));
      const std::vector<float> full = random_tensor(spec.shape.numel(), ++seed);
      const int64_t local_n = local_shape(spec, tp).numel();
      std::vector<float> back(full.size(), std::nanf(""));
      for (int r = 0; r < tp; ++r) {
        const std::vector<float> local = extract_local(spec, tp, r, full);
        ASSERT_EQ(static_cast<int64_t>(local.size()), local_n);
        // Element by element against canonical_index (the independent definition).
        for (int64_t i = 0; i < local_n; ++i)
          ASSERT_EQ(float_bits(local[i]), float_bits(full[canonical_index(spec, tp, r, i)])) << "rank " << r << " i " << i;
        scatter_local(spec, tp, r, local.data(), back.data());
      }
      EXPECT_EQ(0, std::memcmp(back.data(), full.data(), full.size() * sizeof(float)));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * (2 + 12 * 2 + 2));
}

// Values f(r, c) = 1000 r + c make each element name its own canonical position.
std::vector<float> labelled(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  const int64_t cols = s.ndim == 2 ? s.dims[1] : 1;
  for (int64_t i = 0; i < s.numel(); ++i) v[i] = static_cast<float>(1000 * (i / cols) + i % cols);
  return v;
}

const ParamSpec& find(const std::vector<ParamSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return s;
  throw std::runtime_error("no spec " + name);
}

// The documented layout (param_spec.h, Megatron's ColumnParallel / RowParallel), at tp=2.
TEST(CanonicalSlices, Tp2LayoutByHand) {
  const ModelConfig cfg = small_config();  // C = 16, 4 heads of 4, F = 64
  const auto specs = gpt2_param_specs(cfg, 2);
  auto local = [&](const std::string& name, int rank) {
    const ParamSpec& s = find(specs, name);
    return extract_local(s, 2, rank, labelled(s.shape));
  };
  {  // qkv.weight [48, 16] split by heads: rank 1 holds Q rows 8..15, K rows 24..31, V rows 40..47.
    const auto l = local("h.0.attn.qkv.weight", 1);
    ASSERT_EQ(l.size(), 24u * 16);
    EXPECT_EQ(l[0 * 16 + 0], 8000.f);   // Q, head 2, dim 0
    EXPECT_EQ(l[7 * 16 + 15], 15015.f);  // Q, head 3, dim 3, last column
    EXPECT_EQ(l[8 * 16 + 3], 24003.f);  // K, head 2
    EXPECT_EQ(l[16 * 16 + 0], 40000.f);  // V, head 2
    EXPECT_EQ(l[23 * 16 + 1], 47001.f);
    const auto l0 = local("h.0.attn.qkv.weight", 0);
    EXPECT_EQ(l0[8 * 16 + 0], 16000.f);  // rank 0's K starts at canonical row 16
  }
  {  // qkv.bias [48]
    const auto l = local("h.1.attn.qkv.bias", 1);
    ASSERT_EQ(l.size(), 24u);
    EXPECT_EQ(l[0], 8000.f);
    EXPECT_EQ(l[8], 24000.f);
    EXPECT_EQ(l[23], 47000.f);
  }
  {  // attn.proj.weight [16, 16] split columns: rank 1 holds columns 8..15
    const auto l = local("h.0.attn.proj.weight", 1);
    ASSERT_EQ(l.size(), 16u * 8);
    EXPECT_EQ(l[2 * 8 + 5], 2013.f);
    EXPECT_EQ(l[15 * 8 + 0], 15008.f);
  }
  {  // mlp.fc.weight [64, 16] split rows; bias too
    const auto l = local("h.0.mlp.fc.weight", 1);
    ASSERT_EQ(l.size(), 32u * 16);
    EXPECT_EQ(l[0], 32000.f);
    EXPECT_EQ(l[31 * 16 + 15], 63015.f);
    EXPECT_EQ(local("h.0.mlp.fc.bias", 1)[0], 32000.f);
  }
  {  // mlp.proj.weight [16, 64] split columns: rank 1 holds 32..63
    const auto l = local("h.0.mlp.proj.weight", 1);
    ASSERT_EQ(l.size(), 16u * 32);
    EXPECT_EQ(l[1 * 32 + 0], 1032.f);
    EXPECT_EQ(l[3 * 32 + 31], 3063.f);
  }
  {  // wte [304, 16] (300 padded to 16 = 8 x 2) split rows: rank 1 starts at vocab row 152
    const ParamSpec& s = find(specs, "wte");
    EXPECT_EQ(s.shape[0], 304);
    const auto l = local("wte", 1);
    ASSERT_EQ(l.size(), 152u * 16);
    EXPECT_EQ(l[0], 152000.f);
  }
  {  // replicated: the whole tensor on each rank
    EXPECT_EQ(local("h.0.ln_1.weight", 1), labelled(Shape{16}));
    EXPECT_EQ(local("h.0.attn.proj.bias", 0), labelled(Shape{16}));
    EXPECT_EQ(local("wpe", 1), labelled(Shape{12, 16}));
  }
}

// A stored (unpadded) wte written from tp=2 slices loads at tp=4.
TEST(CanonicalSlices, VocabPaddingAcrossTp) {
  const ModelConfig cfg = small_config();
  const ParamSpec wte2 = find(gpt2_param_specs(cfg, 2), "wte");
  const ParamSpec wte4 = find(gpt2_param_specs(cfg, 4), "wte");
  EXPECT_EQ(wte2.shape[0], 304);  // multiple of 8 x 2
  EXPECT_EQ(wte4.shape[0], 320);  // multiple of 8 x 4
  EXPECT_EQ(stored_rows(wte2), 300);
  EXPECT_TRUE(stored_shape(wte4) == (Shape{300, 16}));
  EXPECT_FALSE(is_vocab_padded(find(gpt2_param_specs(cfg, 2), "wpe")));

  const std::vector<float> stored = random_tensor(300 * 16, 5);
  // tp=2 ranks hold padded slices: rank 1 has vocab rows 152..303, rows 300..303 zero.
  std::vector<std::vector<float>> l2;
  for (int r = 0; r < 2; ++r) l2.push_back(extract_local_stored(wte2, 2, r, stored));
  for (int64_t row = 148; row < 152; ++row)
    for (int c = 0; c < 16; ++c) EXPECT_EQ(l2[1][row * 16 + c], 0.f);
  EXPECT_EQ(l2[1][147 * 16 + 3], stored[299 * 16 + 3]);
  // Save at tp=2: the stored form again, exactly.
  std::vector<float> saved(stored.size(), -1.f);
  for (int r = 0; r < 2; ++r) scatter_local_stored(wte2, 2, r, l2[r].data(), saved.data());
  EXPECT_EQ(0, std::memcmp(saved.data(), stored.data(), stored.size() * sizeof(float)));
  // Load at tp=4: same as padding to 320 rows and splitting.
  const std::vector<float> padded4 = pad_rows(saved.data(), 300, 16, 320);
  for (int r = 0; r < 4; ++r) {
    const auto l4 = extract_local_stored(wte4, 4, r, saved);
    EXPECT_EQ(l4, extract_local(wte4, 4, r, padded4)) << r;
    ASSERT_EQ(l4.size(), 80u * 16);
    EXPECT_EQ(l4[0], stored[static_cast<size_t>(r) * 80 * 16]);
  }
  const auto last = extract_local_stored(wte4, 4, 3, saved);  // rows 240..319; 300.. are padding
  for (int64_t row = 60; row < 80; ++row) EXPECT_EQ(last[row * 16 + 7], 0.f);
  EXPECT_EQ(unpad_rows(padded4.data(), 320, 16, 300), stored);
  EXPECT_THROW(pad_rows(stored.data(), 300, 16, 299), ConfigError);
}

TEST(CanonicalSlices, BadArguments) {
  const ModelConfig cfg = small_config();
  const ParamSpec qkv = find(gpt2_param_specs(cfg, 2), "h.0.attn.qkv.weight");
  const std::vector<float> full(static_cast<size_t>(qkv.shape.numel()));
  EXPECT_THROW(extract_local(qkv, 2, 2, full), ConfigError);
  EXPECT_THROW(extract_local(qkv, 0, 0, full), ConfigError);
  EXPECT_THROW(extract_local(qkv, 3, 0, full), ConfigError);  // 16 not divisible by 3
  EXPECT_THROW(extract_local(qkv, 2, 0, std::vector<float>(10)), ConfigError);
  // bf16 bytes go through the byte version unchanged.
  std::vector<uint16_t> fb(full.size()), lb(full.size() / 2), back(full.size());
  for (size_t i = 0; i < fb.size(); ++i) fb[i] = static_cast<uint16_t>(i * 7);
  for (int r = 0; r < 2; ++r) {
    extract_local_bytes(qkv, 2, r, fb.data(), lb.data(), 2);
    scatter_local_bytes(qkv, 2, r, lb.data(), back.data(), 2);
  }
  EXPECT_EQ(back, fb);
}

}  // namespace
}  // namespace trident
