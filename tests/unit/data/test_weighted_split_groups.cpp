// BigScience's weighted split groups in the data layer: a dataset read over the fractions
// S:E of its documents reads exactly documents [round(S n), round(E n)) (Python's round,
// halves to even: the reference numbers below are Python's), compared token for token with a
// naive reader of the .bin/.idx files; a group of two datasets blends them by their weights;
// two ranges of one prefix keep index-map caches of their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "core/error.h"
#include "data/blend.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::ScratchDir;

// Document d of a prefix made by write_documents holds tokens base + d * 1000 + position, so
// a token names its document.
constexpr int32_t kDocStride = 1000;

void write_documents(const std::string& prefix, int ndocs, int32_t base) {
  IndexedDatasetBuilder b(prefix, IndexDType::kInt32);
  for (int d = 0; d < ndocs; ++d) {
    std::vector<int32_t> t;
    for (int p = 0; p < 3 + (d * 7) % 13; ++p) t.push_back(base + d * kDocStride + p);
    b.add_item(t);
    b.end_document();
  }
  b.finish();
}

// The documents of an int32 .bin/.idx pair, read from the files' bytes as Megatron's format
// lays them out (9-byte magic, u64 version, u8 dtype, u64 N, u64 D, int32 sizes[N], int64
// pointers[N], ...), without trident's reader.
std::vector<std::vector<int32_t>> read_documents_naively(const std::string& prefix) {
  const std::string idx = testing::read_file(prefix + ".idx"), bin = testing::read_file(prefix + ".bin");
  uint64_t n = 0;
  std::memcpy(&n, idx.data() + 9 + 8 + 1, 8);
  const size_t sizes_at = 9 + 8 + 1 + 8 + 8, pointers_at = sizes_at + 4 * n;
  std::vector<std::vector<int32_t>> docs(n);
  for (uint64_t d = 0; d < n; ++d) {
    int32_t size = 0;
    int64_t pointer = 0;
    std::memcpy(&size, idx.data() + sizes_at + 4 * d, 4);
    std::memcpy(&pointer, idx.data() + pointers_at + 8 * d, 8);
    docs[d].resize(size);
    std::memcpy(docs[d].data(), bin.data() + pointer, 4 * static_cast<size_t>(size));
  }
  return docs;
}

DataBlend group_of(std::vector<std::string> prefixes, std::vector<double> weights,
                   std::vector<DocumentFractions> fractions) {
  DataBlend g;
  g.prefixes = std::move(prefixes);
  g.weights = std::move(weights);
  g.fractions = std::move(fractions);
  g.flag = "--train-weighted-split-paths group G";
  return g;
}

TEST(WeightedSplitGroups, DocumentRangeIsBigSciencesRounding) {
  // Python: [round(s * float(n)) for s in (S, E)]; halves go to even (12.5 -> 12, 4.5 -> 4).
  EXPECT_EQ(document_range({0.1, 0.5}, 25), (std::pair<uint64_t, uint64_t>{2, 12}));
  EXPECT_EQ(document_range({0.3, 0.7}, 15), (std::pair<uint64_t, uint64_t>{4, 10}));
  EXPECT_EQ(document_range({0.5, 1}, 30), (std::pair<uint64_t, uint64_t>{15, 30}));
  EXPECT_EQ(document_range({0, 1}, 7), (std::pair<uint64_t, uint64_t>{0, 7}));
}

TEST(WeightedSplitGroups, OneDatasetReadsExactlyItsDocumentRange) {
  ScratchDir dir;
  write_documents(dir / "A", 25, 0);
  const auto docs = read_documents_naively(dir / "A");
  ASSERT_EQ(docs.size(), 25u);
  GptDatasetConfig cfg;
  cfg.weighted_split_groups[0] = {group_of({dir / "A"}, {1.0}, {{0.1, 0.5}})};
  cfg.seq_length = 8;
  cfg.train_samples = 60;  // several epochs of the range's tokens
  cfg.cache_dir = dir / "cache";
  const TrainValidTest tvt = build_gpt_datasets(cfg);
  const auto* ds = dynamic_cast<const GptDataset*>(tvt.train.get());
  ASSERT_TRUE(ds) << "a group of one dataset is that dataset alone";
  const GptIndexView& m = ds->maps();
  // doc_idx: documents 2..11 (Python's round(2.5) = 2, round(12.5) = 12), each once an epoch.
  std::map<int32_t, uint64_t> times;
  for (int32_t d : m.doc_idx) ++times[d];
  ASSERT_EQ(times.size(), 10u);
  EXPECT_EQ(times.begin()->first, 2);
  EXPECT_EQ(times.rbegin()->first, 11);
  for (const auto& [d, k] : times) EXPECT_EQ(k, m.epochs) << "document " << d;
  // Every sample is seq + 1 tokens of the naive stream of those documents in doc_idx order.
  std::vector<int32_t> stream;
  for (int32_t d : m.doc_idx) stream.insert(stream.end(), docs[d].begin(), docs[d].end());
  ASSERT_GE(ds->size(), 60u);
  std::vector<int32_t> got(9);
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const uint64_t k = static_cast<uint64_t>(m.shuffle_idx[i]);
    ds->get(i, got.data());
    ASSERT_TRUE(std::equal(got.begin(), got.end(), stream.begin() + static_cast<std::ptrdiff_t>(k * 8)))
        << "sample " << i;
  }
}

TEST(WeightedSplitGroups, TwoDatasetsBlendByTheirWeightsWithinTheirRanges) {
  ScratchDir dir;
  write_documents(dir / "A", 30, 0);
  write_documents(dir / "B", 40, 100000);
  GptDatasetConfig cfg;
  // Weights 1 and 3 (normalised by the parser: 0.25, 0.75); A's documents [15, 30), B's [0, 20).
  cfg.weighted_split_groups[1] = {group_of({dir / "A", dir / "B"}, {0.25, 0.75}, {{0.5, 1}, {0, 0.5}})};
  cfg.seq_length = 8;
  cfg.valid_samples = 400;
  cfg.cache_dir = dir / "cache";
  const TrainValidTest tvt = build_gpt_datasets(cfg);
  EXPECT_FALSE(tvt.valid);
  ASSERT_EQ(tvt.valid_sets.size(), 1u);
  const SampleSource& set = *tvt.valid_sets[0];
  ASSERT_EQ(set.size(), 400u);
  std::vector<int32_t> s(9);
  int from_a = 0;
  std::set<int32_t> docs_a, docs_b;
  for (uint64_t i = 0; i < set.size(); ++i) {
    set.get(i, s.data());
    const bool a = s[0] < 100000;
    from_a += a;
    for (int32_t t : s) {
      ASSERT_EQ(t < 100000, a) << "sample " << i << " mixes the datasets";
      (a ? docs_a : docs_b).insert((t % 100000) / kDocStride);
    }
  }
  EXPECT_EQ(from_a, 100);  // 400 x 0.25: Megatron's greedy blend is exact at a multiple of 4
  EXPECT_EQ(*docs_a.begin(), 15);
  EXPECT_EQ(*docs_a.rbegin(), 29);
  EXPECT_EQ(docs_a.size(), 15u);
  EXPECT_EQ(*docs_b.begin(), 0);
  EXPECT_EQ(*docs_b.rbegin(), 19);
  EXPECT_EQ(docs_b.size(), 20u);
}

TEST(WeightedSplitGroups, TwoRangesOfOnePrefixKeepTheirOwnCaches) {
  ScratchDir dir;
  write_documents(dir / "A", 30, 0);
  GptDatasetConfig cfg;
  cfg.weighted_split_groups[0] = {group_of({dir / "A", dir / "A"}, {0.5, 0.5}, {{0, 0.5}, {0.5, 1}})};
  cfg.seq_length = 8;
  cfg.train_samples = 100;
  cfg.cache_dir = dir / "cache";
  const TrainValidTest tvt = build_gpt_datasets(cfg);
  const auto* blend = dynamic_cast<const BlendedSource*>(tvt.train.get());
  ASSERT_TRUE(blend);
  const auto& first = dynamic_cast<const GptDataset&>(blend->dataset(0));
  const auto& second = dynamic_cast<const GptDataset&>(blend->dataset(1));
  EXPECT_NE(first.cache_file(), second.cache_file());
  for (int32_t d : first.maps().doc_idx) ASSERT_LT(d, 15);
  for (int32_t d : second.maps().doc_idx) ASSERT_GE(d, 15);
  // Built again: each range finds its own cache.
  const TrainValidTest again = build_gpt_datasets(cfg);
  const auto& blend2 = dynamic_cast<const BlendedSource&>(*again.train);
  EXPECT_TRUE(dynamic_cast<const GptDataset&>(blend2.dataset(0)).loaded_from_cache());
  EXPECT_TRUE(dynamic_cast<const GptDataset&>(blend2.dataset(1)).loaded_from_cache());
  for (int32_t d : dynamic_cast<const GptDataset&>(blend2.dataset(1)).maps().doc_idx) ASSERT_GE(d, 15);
}

TEST(WeightedSplitGroups, ARangeWithoutDocumentsAndMixingWithDataPathAreRefused) {
  ScratchDir dir;
  write_documents(dir / "A", 4, 0);
  GptDatasetConfig cfg;
  cfg.weighted_split_groups[0] = {group_of({dir / "A"}, {1.0}, {{0.3, 0.35}})};  // [1, 1) of 4
  cfg.seq_length = 8;
  cfg.train_samples = 10;
  cfg.cache_dir = dir / "cache";
  try {
    build_gpt_datasets(cfg);
    FAIL() << "an empty range was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--train-weighted-split-paths group G: 0.3:0.35 of " + (dir / "A") +
                                         " (4 documents) is documents [1, 1): none to read"),
              std::string::npos)
        << e.what();
  }
  cfg.weighted_split_groups[0] = {group_of({dir / "A"}, {1.0}, {{0, 1}})};
  cfg.blend = parse_data_path({dir / "A"});
  EXPECT_THROW(build_gpt_datasets(cfg), ConfigError);
}

}  // namespace
}  // namespace trident
