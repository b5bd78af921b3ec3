// GPTDataset: every sample compared with a brute-force construction (the doc_idx documents
// concatenated, sample k = tokens [k*seq, k*seq + seq]); the maps' structure (epoch count,
// per-epoch shuffles, permutations); split boundaries against Megatron's Python arithmetic;
// cache reuse, rebuild on change, concurrent builds; blending proportions and contents;
// warnings for empty evaluation splits and int32 data; ids checked against the vocabulary.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <thread>

#include "core/error.h"
#include "data/blend.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::ScratchDir;

// Document d has sizes[d] tokens with values base + d * 1000 + position.
std::vector<int32_t> write_docs(const std::string& prefix, int ndocs, uint32_t seed, int32_t base = 0,
                                int max_len = 40) {
  std::mt19937 g(seed);
  std::vector<int32_t> sizes;
  IndexedDatasetBuilder b(prefix, IndexDType::kInt32);
  for (int d = 0; d < ndocs; ++d) {
    const int len = (d % 11 == 5) ? 0 : 1 + static_cast<int>(g() % max_len);  // a few empty documents
    std::vector<int32_t> t;
    for (int p = 0; p < len; ++p) t.push_back(base + d * 1000 + p);
    b.add_item(t);
    b.end_document();
    sizes.push_back(len);
  }
  b.finish();
  return sizes;
}

template <typename T>
std::vector<T> vec(std::span<const T> s) {
  return std::vector<T>(s.begin(), s.end());
}

uint64_t expected_epochs(uint64_t tokens, uint64_t seq, uint64_t samples) {
  for (uint64_t e = 1;; ++e)
    if ((e * tokens - 1) / seq >= samples) return e;
}

// Checks every sample of ds against the naive walk over its doc_idx and shuffle_idx.
void check_against_brute_force(const GptDataset& ds, const IndexedDataset& data, int seq) {
  const auto& m = ds.maps();
  std::vector<int32_t> stream;
  for (int32_t d : m.doc_idx) {
    auto t = data.item(static_cast<uint64_t>(d));
    stream.insert(stream.end(), t.begin(), t.end());
  }
  ASSERT_EQ(ds.size(), m.shuffle_idx.size());
  std::vector<int32_t> got(seq + 1);
  for (uint64_t i = 0; i < ds.size(); ++i) {
    const uint64_t k = static_cast<uint64_t>(m.shuffle_idx[i]);
    ASSERT_LE(k * seq + seq + 1, stream.size());
    ds.get(i, got.data());
    ASSERT_TRUE(std::equal(got.begin(), got.end(), stream.begin() + k * seq)) << "sample " << i;
  }
}

bool is_permutation_of_range(const int64_t* p, uint64_t n, uint64_t lo) {
  std::vector<int64_t> v(p, p + n);
  std::sort(v.begin(), v.end());
  for (uint64_t i = 0; i < n; ++i)
    if (v[i] != static_cast<int64_t>(lo + i)) return false;
  return true;
}

TEST(GptDataset, SamplesMatchBruteForceAndMapsAreWellFormed) {
  ScratchDir dir;
  const std::string prefix = dir / "d";
  const auto sizes = write_docs(prefix, 60, 3);
  auto data = std::make_shared<const IndexedDataset>(prefix);
  const uint64_t begin = 7, end = 53;
  uint64_t tokens = 0;
  for (uint64_t d = begin; d < end; ++d) tokens += sizes[d];
  int checked_separate = 0, checked_joint = 0;
  for (int seq : {1, 5, 16, 64}) {
    const uint64_t per_epoch = (tokens - 1) / seq;
    for (uint64_t samples : {uint64_t{0}, uint64_t{1}, per_epoch, per_epoch + 1, per_epoch + per_epoch / 2,
                             3 * per_epoch + 2, 4 * per_epoch - 1}) {
      GptDataset ds(data, "train", begin, end, seq, 1234, samples, dir / "cache");
      const auto& m = ds.maps();
      const uint64_t E = expected_epochs(tokens, seq, samples);
      ASSERT_EQ(m.epochs, E);
      ASSERT_EQ(num_epochs(tokens, seq, samples), E);
      ASSERT_EQ(ds.size(), (E * tokens - 1) / seq);
      ASSERT_GE(ds.size(), samples);
      // Megatron's rule for shuffling the last epoch on its own (cutoff 0.80).
      bool separate = false;
      uint64_t first = 0;
      if (E > 1) {
        first = ((E - 1) * tokens - 1) / seq;
        separate = samples - first < static_cast<uint64_t>(0.80 * static_cast<double>(per_epoch));
      }
      ASSERT_EQ(m.separate_last_epoch, separate) << seq << " " << samples;
      (separate ? checked_separate : checked_joint)++;
      // doc_idx holds every document E times; when separate, the last epoch on its own.
      const uint64_t n = end - begin;
      ASSERT_EQ(m.doc_idx.size(), n * E);
      std::map<int32_t, uint64_t> count;
      for (int32_t d : m.doc_idx) count[d]++;
      ASSERT_EQ(count.size(), n);
      for (auto& [d, c] : count) {
        EXPECT_GE(d, static_cast<int32_t>(begin));
        EXPECT_EQ(c, E);
      }
      if (separate) {
        std::vector<int64_t> last(m.doc_idx.end() - n, m.doc_idx.end());
        EXPECT_TRUE(is_permutation_of_range(last.data(), n, begin));
        EXPECT_TRUE(is_permutation_of_range(m.shuffle_idx.data(), first, 0));
      }
      EXPECT_TRUE(is_permutation_of_range(m.shuffle_idx.data(), m.shuffle_idx.size(), 0));
      check_against_brute_force(ds, *data, seq);
    }
  }
  EXPECT_GT(checked_separate, 0);
  EXPECT_GT(checked_joint, 0);
}

TEST(GptDataset, ShuffleIsDeterministicAndSeeded) {
  const std::vector<int32_t> sizes(30, 10);
  auto a = build_index_maps(sizes, 0, 30, 8, 1234, 100);
  auto b = build_index_maps(sizes, 0, 30, 8, 1234, 100);
  auto c = build_index_maps(sizes, 0, 30, 8, 99, 100);
  EXPECT_EQ(a.doc_idx, b.doc_idx);
  EXPECT_EQ(a.shuffle_idx, b.shuffle_idx);
  EXPECT_NE(a.doc_idx, c.doc_idx);
  // not the identity
  std::vector<int32_t> sorted = a.doc_idx;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, a.doc_idx);
}

// numpy's outputs (python3: numpy.random.RandomState(seed).shuffle(numpy.arange(n))), the
// generator behind Megatron's sample order.
TEST(GptDataset, ShufflerIsNumpysRandomStateShuffle) {
  std::vector<int64_t> a(10);
  std::iota(a.begin(), a.end(), 0);
  NumpyShuffler(1234).shuffle(a.data(), a.size());
  EXPECT_EQ(a, (std::vector<int64_t>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  // 50000 elements: masks up to 2^16 - 1, so draws rejected above the bound.
  std::vector<uint32_t> b(50000);
  std::iota(b.begin(), b.end(), 0u);
  NumpyShuffler(0).shuffle(b.data(), b.size());
  EXPECT_EQ(std::vector<uint32_t>(b.begin(), b.begin() + 6),
            (std::vector<uint32_t>{11841, 19602, 45519, 25747, 42642, 31902}));
  uint64_t weighted = 0;
  for (size_t i = 0; i < b.size(); ++i) weighted += i * b[i];
  EXPECT_EQ(weighted, 31242990078676u);
}

// The index maps against a transcription of Megatron-core's GPTDataset in numpy
// (_build_document_index, helpers.cpp's build_sample_idx, _build_shuffle_index), for
// documents [begin, end) of these sizes: two epochs with the last shuffled apart, three, and
// one.
TEST(GptDataset, IndexMapsAreMegatrons) {
  const std::vector<int32_t> sizes = {5, 3, 8, 2, 7, 4, 6, 9, 1, 3};
  struct Case {
    uint64_t begin, end;
    int seq;
    uint64_t seed, samples, epochs;
    bool separate;
    std::vector<int32_t> doc_idx;
    std::vector<int64_t> sample_idx, shuffle_idx;
  };
  const std::vector<Case> cases = {
      {1, 8, 4, 1234, 12, 2, true, {3, 2, 7, 1, 5, 6, 4, 6, 1, 4, 5, 3, 7, 2},
       {0, 0, 1, 2, 1, 6, 2, 2, 2, 6, 3, 1, 4, 2, 5, 2, 6, 0, 6, 4, 7, 1, 7, 5, 9, 0, 9, 4, 10, 1, 11, 1, 12, 3, 12, 7,
        13, 2, 13, 6},
       {7, 3, 5, 1, 4, 8, 0, 2, 6, 16, 10, 18, 14, 17, 13, 12, 9, 11, 15}},
      {0, 10, 5, 42, 21, 3, true, {0, 7, 5, 1, 8, 5, 1, 3, 8, 6, 3, 2, 9, 9, 4, 2, 7, 0, 4, 6, 5, 2, 7, 6, 8, 9, 3, 0, 4, 1},
       {0, 0, 1, 0, 1, 5, 2, 1, 3, 2, 5, 3, 7, 1, 9, 3, 11, 0, 11, 5, 12, 2, 14, 1, 14, 6, 15, 4, 16, 1, 16, 6, 17, 2, 18,
        2, 19, 0, 19, 5, 21, 0, 21, 5, 22, 2, 22, 7, 23, 3, 25, 1, 27, 1, 28, 1, 28, 6},
       {18, 1, 5, 0, 10, 7, 4, 12, 8, 3, 6, 11, 2, 16, 17, 13, 14, 15, 9, 21, 25, 26, 23, 20, 24, 27, 19, 22}},
      {2, 9, 3, 7, 5, 1, false, {4, 7, 2, 8, 5, 3, 6},
       {0, 0, 0, 3, 0, 6, 1, 2, 1, 5, 1, 8, 2, 2, 2, 5, 3, 0, 4, 2, 5, 1, 6, 2, 6, 5},
       {1, 2, 5, 3, 0, 4, 6, 11, 10, 9, 8, 7}},
  };
  for (const Case& c : cases) {
    const GptIndexMaps m = build_index_maps(sizes, c.begin, c.end, c.seq, c.seed, c.samples);
    EXPECT_EQ(m.epochs, c.epochs) << c.seed;
    EXPECT_EQ(m.separate_last_epoch, c.separate) << c.seed;
    EXPECT_EQ(m.doc_idx, c.doc_idx) << c.seed;
    EXPECT_EQ(m.sample_idx, c.sample_idx) << c.seed;
    EXPECT_EQ(m.shuffle_idx, c.shuffle_idx) << c.seed;
  }
}

// numpy's RandomState, which orders Megatron's samples, takes 32-bit seeds: a larger --seed is
// one error naming the flag, before any index map is built.
TEST(GptDataset, SeedPast32BitsIsRefused) {
  ScratchDir dir;
  const std::string prefix = dir / "seed";
  write_docs(prefix, 10, 9);
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({prefix});
  cfg.seq_length = 8;
  cfg.train_samples = 4;
  cfg.seed = kMaxDataSeed;
  EXPECT_NO_THROW(build_gpt_datasets(cfg));
  cfg.seed = kMaxDataSeed + 1;
  try {
    build_gpt_datasets(cfg);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--seed 4294967296: the samples are ordered as Megatron orders them"),
              std::string::npos)
        << e.what();
  }
}

TEST(GptDataset, EpochFormula) {
  EXPECT_EQ(num_epochs(100, 10, 0), 1u);
  EXPECT_EQ(num_epochs(100, 10, 9), 1u);   // (100 - 1) // 10 = 9
  EXPECT_EQ(num_epochs(100, 10, 10), 2u);  // (200 - 1) // 10 = 19
  EXPECT_EQ(num_epochs(100, 10, 19), 2u);
  EXPECT_EQ(num_epochs(100, 10, 20), 3u);
  EXPECT_EQ(num_epochs(1000, 1024, 1), 2u);  // 999 // 1024 = 0, 1999 // 1024 = 1
}

// A split whose document ids pass int32 (a later split of a corpus of more than 2^31
// documents) is refused: doc_idx stores the ids as int32, and a wrapped id read sizes[] at
// -2^31 (a crash). The sizes are a 8 GiB reserved mapping of which only the split is touched.
TEST(GptDataset, DocumentIdsPastInt32AreRefused) {
  const size_t n = (size_t{1} << 31) + 64;
  void* p = ::mmap(nullptr, n * sizeof(int32_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const std::span<int32_t> sizes(static_cast<int32_t*>(p), n);
  const uint64_t begin = (uint64_t{1} << 31) - 32, end = n;
  for (uint64_t d = begin; d < end; ++d) sizes[d] = 100;
  EXPECT_THROW(build_index_maps(sizes, begin, end, 64, 1234, 10), InternalError);
  // The same split below the limit builds.
  const GptIndexMaps m = build_index_maps(sizes.subspan(begin - 1000), 1000, 1096, 64, 1234, 10);
  EXPECT_EQ(*std::min_element(m.doc_idx.begin(), m.doc_idx.end()), 1000);
  ::munmap(p, n * sizeof(int32_t));
}

TEST(GptDataset, SplitBoundariesMatchMegatron) {
  // Reference values from Megatron-LM's rule run in Python (parse_and_normalize_split,
  // convert_split_vector_to_split_matrix, then int(round(bound * n)) per boundary).
  using B = std::array<uint64_t, 4>;
  EXPECT_EQ(split_boundaries("969, 30, 1", 1000), (B{0, 969, 999, 1000}));
  EXPECT_EQ(split_boundaries("949,50,1", 10), (B{0, 9, 10, 10}));  // the older rule: {0, 10, 10, 10}
  EXPECT_EQ(split_boundaries("1,1", 5), (B{0, 2, 5, 5}));           // 2.5 rounds to even
  EXPECT_EQ(split_boundaries("1,1", 7), (B{0, 4, 7, 7}));           // 3.5 rounds to even
  EXPECT_EQ(split_boundaries("969, 30, 1", 37), (B{0, 36, 37, 37}));
  EXPECT_EQ(split_boundaries("969,30,1", 49), (B{0, 47, 49, 49}));  // the older rule: {0, 48, 49, 49}
  EXPECT_EQ(split_boundaries("98,2", 101), (B{0, 99, 101, 101}));
  EXPECT_EQ(split_boundaries("1,1,1", 10), (B{0, 3, 7, 10}));
  EXPECT_EQ(split_boundaries("8,1,1", 25), (B{0, 20, 22, 25}));
  EXPECT_EQ(split_boundaries("8/1/1", 25), (B{0, 20, 22, 25}));
  EXPECT_EQ(split_boundaries("1", 7), (B{0, 7, 7, 7}));
  for (const char* bad : {"a,b", "1,-1,0", "0,0,0", "", "1,,2", "90,10,0,5", "0x1p0,1"}) {  // Megatron asserts 3 at most
    try {
      split_boundaries(bad, 10);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--split"), std::string::npos);
    }
  }
}

// A dataset of no documents (trident-preprocess of an empty file) is named as such, not
// blamed on --split.
TEST(GptDataset, NoDocumentsIsNamed) {
  ScratchDir dir;
  const std::string prefix = dir / "none";
  write_docs(prefix, 0, 1);
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({prefix});
  cfg.seq_length = 16;
  cfg.train_samples = 10;
  try {
    build_gpt_datasets(cfg);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--data-path: " + prefix + " (0 documents): no documents");
  }
}

TEST(GptDataset, TrainValidTestRanges) {
  ScratchDir dir;
  const std::string prefix = dir / "tvt";
  write_docs(prefix, 100, 9);
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({prefix});
  cfg.split = "8,1,1";
  cfg.seq_length = 16;
  cfg.train_samples = 300;
  cfg.valid_samples = 20;
  cfg.test_samples = 0;
  auto tvt = build_gpt_datasets(cfg);
  ASSERT_TRUE(tvt.train && tvt.valid);
  EXPECT_FALSE(tvt.test);
  EXPECT_GE(tvt.train->size(), 300u);
  EXPECT_GE(tvt.valid->size(), 20u);
  auto* train = dynamic_cast<GptDataset*>(tvt.train.get());
  auto* valid = dynamic_cast<GptDataset*>(tvt.valid.get());
  ASSERT_TRUE(train && valid);
  for (int32_t d : train->maps().doc_idx) ASSERT_TRUE(d >= 0 && d < 80);
  for (int32_t d : valid->maps().doc_idx) ASSERT_TRUE(d >= 80 && d < 90);
  // beside the data by default
  EXPECT_EQ(std::filesystem::path(train->cache_file()).parent_path(), std::filesystem::path(dir.path()));
  std::vector<int32_t> t(17);
  tvt.train->get(0, t.data());
  for (int32_t v : t) EXPECT_LT(v / 1000, 80);  // token value encodes its document
}

TEST(GptDataset, CacheReusedAndRebuiltOnChange) {
  ScratchDir dir;
  const std::string prefix = dir / "c";
  write_docs(prefix, 40, 4);
  const std::string cache = dir / "cache";
  auto data = std::make_shared<const IndexedDataset>(prefix);
  GptDataset a(data, "train", 0, 40, 8, 1234, 200, cache);
  EXPECT_FALSE(a.loaded_from_cache());
  EXPECT_TRUE(std::filesystem::exists(a.cache_file()));
  EXPECT_EQ(std::filesystem::path(a.cache_file()).parent_path(), std::filesystem::path(cache));
  GptDataset b(data, "train", 0, 40, 8, 1234, 200, cache);
  EXPECT_TRUE(b.loaded_from_cache());
  EXPECT_EQ(b.cache_file(), a.cache_file());
  EXPECT_EQ(vec(b.maps().doc_idx), vec(a.maps().doc_idx));
  EXPECT_EQ(vec(b.maps().sample_idx), vec(a.maps().sample_idx));
  EXPECT_EQ(vec(b.maps().shuffle_idx), vec(a.maps().shuffle_idx));
  // the mapped cache holds what a fresh build computes
  const auto fresh = build_index_maps(data->sizes(), 0, 40, 8, 1234, 200);
  EXPECT_EQ(vec(b.maps().doc_idx), fresh.doc_idx);
  EXPECT_EQ(vec(b.maps().sample_idx), fresh.sample_idx);
  EXPECT_EQ(vec(b.maps().shuffle_idx), fresh.shuffle_idx);
  // any input that changes the maps changes the file
  GptDataset s(data, "train", 0, 40, 8, 99, 200, cache);
  GptDataset l(data, "train", 0, 40, 9, 1234, 200, cache);
  GptDataset n(data, "train", 0, 40, 8, 1234, 201, cache);
  GptDataset r(data, "train", 0, 39, 8, 1234, 200, cache);
  for (const GptDataset* x : {&s, &l, &n, &r}) {
    EXPECT_FALSE(x->loaded_from_cache());
    EXPECT_NE(x->cache_file(), a.cache_file());
  }
  // the data file changes (new mtime): rebuilt under a new name
  auto idx = std::filesystem::path(prefix + ".idx");
  std::filesystem::last_write_time(idx, std::filesystem::last_write_time(idx) + std::chrono::seconds(5));
  auto data2 = std::make_shared<const IndexedDataset>(prefix);
  std::string torn;
  {
    GptDataset c(data2, "train", 0, 40, 8, 1234, 200, cache);
    EXPECT_FALSE(c.loaded_from_cache());
    EXPECT_NE(c.cache_file(), a.cache_file());
    torn = c.cache_file();
  }
  // a torn cache file is rebuilt, not trusted
  std::filesystem::resize_file(torn, std::filesystem::file_size(torn) - 8);
  GptDataset d(data2, "train", 0, 40, 8, 1234, 200, cache);
  EXPECT_FALSE(d.loaded_from_cache());
  EXPECT_EQ(vec(d.maps().shuffle_idx), fresh.shuffle_idx);  // same seed and sizes as before
  GptDataset e(data2, "train", 0, 40, 8, 1234, 200, cache);
  EXPECT_TRUE(e.loaded_from_cache());
}

TEST(GptDataset, CorruptCacheEntryIsReportedNotFollowed) {
  ScratchDir dir;
  const std::string prefix = dir / "k";
  write_docs(prefix, 30, 5);
  auto data = std::make_shared<const IndexedDataset>(prefix);
  std::string file;
  uint64_t n = 0;
  {
    GptDataset a(data, "valid", 0, 30, 8, 1, 50, "");
    file = a.cache_file();
    n = a.size();
  }
  // overwrite the last shuffle_idx entry (the file's last 8 bytes) with garbage
  std::string bytes = testing::read_file(file);
  const int64_t bad = 1ll << 40;
  std::memcpy(bytes.data() + bytes.size() - 8, &bad, 8);
  testing::write_file(file, bytes);
  GptDataset b(data, "valid", 0, 30, 8, 1, 50, "");
  ASSERT_TRUE(b.loaded_from_cache());
  std::vector<int32_t> t(9);
  b.get(0, t.data());
  try {
    b.get(n - 1, t.data());
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST(GptDataset, ConcurrentBuildersAgree) {
  ScratchDir dir;
  const std::string prefix = dir / "p";
  write_docs(prefix, 200, 8);
  auto data = std::make_shared<const IndexedDataset>(prefix);
  std::vector<std::unique_ptr<GptDataset>> built(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&, i] { built[i] = std::make_unique<GptDataset>(data, "train", 0, 200, 32, 7, 5000, dir / "cc"); });
  for (auto& t : th) t.join();
  for (int i = 1; i < 4; ++i) EXPECT_EQ(vec(built[i]->maps().shuffle_idx), vec(built[0]->maps().shuffle_idx));
  std::vector<std::string> names;
  for (auto& f : std::filesystem::directory_iterator(dir / "cc")) names.push_back(f.path().filename().string());
  ASSERT_EQ(names.size(), 1u) << names[0];  // no temporaries left
  EXPECT_EQ(names[0].find(".tmp"), std::string::npos);
}

TEST(GptDataset, EmptySplitThrowsNamingTheFile) {
  ScratchDir dir;
  IndexedDatasetBuilder b(dir / "z", IndexDType::kUInt16);
  b.add_item(std::vector<int32_t>{});
  b.end_document();
  b.finish();
  auto data = std::make_shared<const IndexedDataset>(dir / "z");
  try {
    GptDataset ds(data, "train", 0, 1, 8, 1, 10, "");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "z.idx"), std::string::npos) << e.what();
  }
}

// Megatron's boundaries leave 949,50,1 of 10 documents no validation or test documents
// ([0, 10, 10, 10]): a wanted split that gets none is a warning naming the flag, the prefix
// and its documents, not a silent run without evaluation.
TEST(GptDataset, EmptyValidationAndTestSplitsAreWarnings) {
  ScratchDir dir;
  write_docs(dir / "few", 10, 3);
  write_docs(dir / "more", 30, 4);
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({dir / "few"});
  cfg.split = "969,30,1";  // [0, 10, 10, 10] (boundaries 9.69, 9.99, 10 rounded)
  cfg.seq_length = 8;
  cfg.train_samples = 20;
  cfg.valid_samples = 4;
  cfg.test_samples = 4;
  cfg.cache_dir = dir / "cache";
  auto tvt = build_gpt_datasets(cfg);
  ASSERT_TRUE(tvt.train);
  EXPECT_FALSE(tvt.valid);
  EXPECT_FALSE(tvt.test);
  const std::string in = " documents in " + dir / "few" + " (10 documents): no ";
  EXPECT_EQ(tvt.warnings, (std::vector<std::string>{"--split 969,30,1 leaves no validation" + in + "validation",
                                                   "--split 969,30,1 leaves no test" + in + "test"}));
  // Not wanted (no evaluation): no warning.
  cfg.valid_samples = cfg.test_samples = 0;
  EXPECT_TRUE(build_gpt_datasets(cfg).warnings.empty());
  // An unweighted blend: a split is empty only when it is empty in every prefix.
  cfg.blend = parse_data_path({dir / "few", dir / "more"});
  cfg.valid_samples = cfg.test_samples = 4;
  cfg.split = "50,50,0";  // few: [0, 5, 10, 10]; more: [0, 15, 30, 30]
  tvt = build_gpt_datasets(cfg);
  EXPECT_TRUE(tvt.valid);
  EXPECT_EQ(tvt.warnings, (std::vector<std::string>{"--split 50,50,0 leaves no test documents in " + dir / "few" +
                                                   " (10 documents), " + dir / "more" + " (30 documents): no test"}));
  // Every split non-empty: nothing to say.
  cfg.blend = parse_data_path({dir / "more"});
  cfg.split = "8,1,1";  // [0, 24, 27, 30]
  tvt = build_gpt_datasets(cfg);
  EXPECT_TRUE(tvt.valid && tvt.test);
  EXPECT_TRUE(tvt.warnings.empty());
}

// Samples read through build_gpt_datasets are checked against the tokenizer's vocabulary;
// int32 data for a vocabulary that fits uint16 is a warning at start.
TEST(GptDataset, IdsCheckedAgainstTheVocabulary) {
  ScratchDir dir;
  write_docs(dir / "d", 20, 5, 0, 12);  // ids d * 1000 + position: up to 19011
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({dir / "d"});
  cfg.split = "1,0,0";
  cfg.seq_length = 8;
  cfg.train_samples = 10;
  cfg.cache_dir = dir / "cache";
  cfg.vocab_size = 19012;  // every id fits
  auto tvt = build_gpt_datasets(cfg);
  std::vector<int32_t> s(9);
  for (uint64_t i = 0; i < tvt.train->size(); ++i) tvt.train->get(i, s.data());
  EXPECT_EQ(tvt.warnings, (std::vector<std::string>{dir / "d" + ": int32 tokens, while Megatron stores a vocabulary "
                                                                  "of 19012 ids as uint16: was the data made with "
                                                                  "another tokenizer?"}));
  cfg.vocab_size = 5000;  // documents 5 and up hold ids past it
  tvt = build_gpt_datasets(cfg);
  int thrown = 0;
  for (uint64_t i = 0; i < tvt.train->size(); ++i) {
    try {
      tvt.train->get(i, s.data());
    } catch (const IoError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(dir / "d.bin: token id ", 0), 0u) << m;
      EXPECT_NE(m.find("vocabulary of 5000 ids"), std::string::npos) << m;
      ++thrown;
    }
  }
  EXPECT_GT(thrown, 0);
  cfg.vocab_size = 70000;  // int32 is Megatron's choice here: no warning
  EXPECT_TRUE(build_gpt_datasets(cfg).warnings.empty());
}

// What ranks compare of their data (same_data_check.h): the content, whatever the path; the
// tokens through windows that take in the .bin's first and last bytes.
TEST(GptDataset, IdentityIsTheContentNotThePath) {
  ScratchDir dir;
  write_docs(dir / "a", 3000, 7);  // ~60000 int32 tokens: more .bin than the 16 windows of 4 KiB
  for (const char* ext : {".bin", ".idx"})
    std::filesystem::copy_file(dir / ("a" + std::string(ext)), dir / ("copy" + std::string(ext)));
  GptDatasetConfig cfg;
  cfg.split = "1,0,0";
  cfg.seq_length = 8;
  cfg.train_samples = 10;
  cfg.cache_dir = dir / "cache";
  const auto identities = [&](const std::vector<std::string>& words) {
    cfg.blend = parse_data_path(words);
    OpenedDatasets opened(0);
    return gpt_dataset_identities(cfg, opened);
  };
  const std::vector<DatasetIdentity> a = identities({dir / "a"}), copy = identities({dir / "copy"});
  ASSERT_EQ(a.size(), 1u);
  const IndexedDataset data(dir / "a");
  ASSERT_GT(data.bin_bytes().size(), 16u * 4096);
  EXPECT_EQ(a[0].label, "--data-path's prefix 1 of 1");
  EXPECT_EQ(a[0].role, "split prefix 1 of 1");  // what ranks compare: not the flag, which may name a file
  EXPECT_EQ(a[0].path, dir / "a");
  EXPECT_EQ(a[0].content.rfind(detail::concat("3000 sequences in 3000 documents of int32 tokens (",
                                              data.bin_bytes().size(), " bytes), XXH3 of .idx and .bin windows "),
                               0),
            0u)
      << a[0].content;
  EXPECT_EQ(copy[0].content, a[0].content);
  EXPECT_EQ(copy[0].path, dir / "copy");
  // One token changed, the first or the last of the .bin: other content.
  const auto bin_size = std::filesystem::file_size(dir / "copy.bin");
  for (const std::uintmax_t at : {std::uintmax_t{0}, bin_size - 1}) {
    std::fstream f(dir / "copy.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    const char old = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(old ^ 1));
    f.close();
    EXPECT_NE(identities({dir / "copy"})[0].content, a[0].content) << "byte " << at;
    f.open(dir / "copy.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(old);
  }
  EXPECT_EQ(identities({dir / "copy"})[0].content, a[0].content);
  // A blend's weights are part of it.
  const std::vector<DatasetIdentity> blend = identities({"3", dir / "a", "1", dir / "copy"});
  ASSERT_EQ(blend.size(), 2u);
  EXPECT_EQ(blend[1].label, "--data-path's prefix 2 of 2");
  EXPECT_EQ(blend[0].content, "weight 0.75, " + a[0].content);
  EXPECT_EQ(blend[1].content, "weight 0.25, " + a[0].content);
}

// The check of the ranks' data and the build share their opened prefixes: the build after
// the check opens nothing again (here it could not: the files are gone), and a prefix named
// twice is opened once.
TEST(GptDataset, TheBuildTakesThePrefixesTheIdentitiesOpened) {
  ScratchDir dir;
  write_docs(dir / "a", 40, 7);
  GptDatasetConfig cfg;
  cfg.split = "1,0,0";
  cfg.seq_length = 8;
  cfg.train_samples = 10;
  cfg.cache_dir = dir / "cache";
  cfg.blend = parse_data_path({"1", dir / "a", "1", dir / "a"});
  const auto reference = build_gpt_datasets(cfg);
  OpenedDatasets opened(0);
  const std::vector<DatasetIdentity> ids = gpt_dataset_identities(cfg, opened);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(opened.open(dir / "a"), opened.open(dir / "a"));
  std::filesystem::remove(dir / "a.bin");
  std::filesystem::remove(dir / "a.idx");
  EXPECT_THROW(build_gpt_datasets(cfg), IoError);
  const auto built = build_gpt_datasets(cfg, &opened);
  ASSERT_TRUE(built.train);
  ASSERT_EQ(built.train->size(), reference.train->size());
  std::vector<int32_t> got(cfg.seq_length + 1), want(cfg.seq_length + 1);
  for (uint64_t i = 0; i < built.train->size(); ++i) {
    built.train->get(i, got.data());
    reference.train->get(i, want.data());
    EXPECT_EQ(got, want) << "sample " << i;
  }
}

TEST(Blend, DataPathParsing) {
  auto one = parse_data_path({"some/prefix"});
  EXPECT_EQ(one.prefixes, (std::vector<std::string>{"some/prefix"}));
  EXPECT_TRUE(one.weights.empty());
  auto two = parse_data_path({"2", "A", "6", "B"});
  EXPECT_EQ(two.prefixes, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(two.weights, (std::vector<double>{0.25, 0.75}));
  // Megatron's unweighted list: no number before the prefixes.
  auto list = parse_data_path({"A", "B", "C"}, "--train-data-path");
  EXPECT_EQ(list.prefixes, (std::vector<std::string>{"A", "B", "C"}));
  EXPECT_TRUE(list.weights.empty());
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {}, {"0.5", "A", "B"}, {"x", "A", "0.5", "B"}, {"-1", "A", "2", "B"}, {"0", "A", "0", "B"}}) {
    try {
      parse_data_path(bad, "--valid-data-path");
      ADD_FAILURE() << bad.size();
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--valid-data-path: ", 0), 0u) << e.what();
    }
  }
}

// What a --data-path of numbers and prefixes means, as Megatron-LM's get_blend_from_list reads
// it: weights only for an even number of words with a number before every prefix; anything
// else is prefixes, so a number there is a dataset's name. Such a word with no dataset behind
// it (a weight that lost its prefix) is one ConfigError naming the flag and the word.
TEST(Blend, DataPathNumbersAsMegatron) {
  auto error = [](const std::vector<std::string>& words, const std::string& flag = "--data-path") {
    try {
      parse_data_path(words, flag);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Weights are read as Python's float() reads them: decimal, not C's hexadecimal (a prefix).
  EXPECT_EQ(parse_data_path({" 2", "A", "6e0", "B"}).weights, (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(error({"0x1p0", "A", "1", "B"}).rfind("--data-path: \"0x1p0\" (word 1) is not a weight", 0), 0u);
  // An odd number of words: prefixes; the numbers among them name no dataset.
  EXPECT_EQ(error({"0.3", "A", "0.7"}),
            "--data-path: \"0.3\" is read as a dataset prefix and there is no 0.3.idx: 3 words, an odd number, are "
            "prefixes without weights, as Megatron reads them; a weighted blend is WEIGHT PREFIX pairs");
  EXPECT_EQ(error({"A", "0.5", "B"}, "--train-data-path"),
            "--train-data-path: \"0.5\" is read as a dataset prefix and there is no 0.5.idx: 3 words, an odd "
            "number, are prefixes without weights, as Megatron reads them; a weighted blend is WEIGHT PREFIX pairs");
  EXPECT_EQ(error({"0.3", "A", "0.7", "B", "1"}).rfind("--data-path: \"0.3\" is read as a dataset prefix", 0), 0u);
  EXPECT_EQ(error({"7"}), "--data-path: \"7\" is read as a dataset prefix and there is no 7.idx: one word is one "
                          "prefix; a weighted blend is WEIGHT PREFIX pairs");
  // An even number without a weight first: prefixes too.
  EXPECT_EQ(error({"A", "0.5", "B", "0.3"}),
            "--data-path: \"0.5\" is read as a dataset prefix and there is no 0.5.idx: words whose first is not a "
            "weight are prefixes without weights, as Megatron reads them; a weighted blend is WEIGHT PREFIX pairs");
  // Weights before some prefixes only: the first word that is not one and the first that is.
  EXPECT_EQ(error({"x", "A", "0.5", "B"}, "--valid-data-path"),
            "--valid-data-path: \"x\" (word 1) is not a weight, while \"0.5\" (word 3) is: give WEIGHT PREFIX "
            "pairs, or prefixes without weights");
  EXPECT_EQ(error({"0.5", "A", "B", "C"}),
            "--data-path: \"B\" (word 3) is not a weight, while \"0.5\" (word 1) is: give WEIGHT PREFIX pairs, "
            "or prefixes without weights");

  // Datasets whose names are numbers (relative to the working directory, as Megatron opens
  // them) are prefixes like any other where Megatron reads prefixes.
  ScratchDir dir;
  struct InDir {  // the working directory, back to the test's when done
    std::filesystem::path was = std::filesystem::current_path();
    explicit InDir(const std::string& d) { std::filesystem::current_path(d); }
    ~InDir() { std::filesystem::current_path(was); }
  };
  DataBlend odd, even, one, pairs;
  std::string missing;
  {
    InDir in(dir.path());
    for (const char* name : {"2024", "2025", "A"}) write_docs(dir / name, 5, 1);
    odd = parse_data_path({"2024", "A", "2025"});
    even = parse_data_path({"A", "2024", "A", "2025"});
    one = parse_data_path({"2024"});
    pairs = parse_data_path({"2024", "A", "2025", "A"});  // an even number, a number first: weights
    missing = error({"2024", "A", "0.7"});
  }
  EXPECT_EQ(odd.prefixes, (std::vector<std::string>{"2024", "A", "2025"}));
  EXPECT_TRUE(odd.weights.empty());
  EXPECT_EQ(even.prefixes, (std::vector<std::string>{"A", "2024", "A", "2025"}));
  EXPECT_TRUE(even.weights.empty());
  EXPECT_EQ(one.prefixes, (std::vector<std::string>{"2024"}));
  EXPECT_EQ(pairs.prefixes, (std::vector<std::string>{"A", "A"}));
  EXPECT_EQ(pairs.weights, (std::vector<double>{2024.0 / 4049, 2025.0 / 4049}));
  EXPECT_EQ(missing.rfind("--data-path: \"0.7\" is read as a dataset prefix and there is no 0.7.idx: 3 words", 0), 0u)
      << missing;
}

TEST(Blend, GreedyIndices) {
  // Worked by hand: error_d = w_d * max(i, 1) - count_d, first maximum wins.
  EXPECT_EQ(build_blending_indices({0.5, 0.5}, 4).dataset_index, (std::vector<uint16_t>{0, 1, 0, 1}));
  EXPECT_EQ(build_blending_indices({0.25, 0.75}, 4).dataset_index, (std::vector<uint16_t>{1, 0, 1, 1}));
  // Weight 0 first: at i = 2 both others' errors are 0 and tie with it; it is never picked.
  EXPECT_EQ(build_blending_indices({0.0, 0.5, 0.5}, 4).dataset_index, (std::vector<uint16_t>{1, 2, 1, 2}));
  const std::vector<double> w = {0.2, 0.5, 0.3};
  const auto b = build_blending_indices(w, 10000);
  std::vector<int64_t> count(3, 0);
  for (uint64_t i = 0; i < 10000; ++i) {
    const int d = b.dataset_index[i];
    ASSERT_EQ(b.dataset_sample_index[i], count[d]);  // each dataset read in order
    ++count[d];
    for (int k = 0; k < 3; ++k) ASSERT_LE(std::abs(count[k] - w[k] * (i + 1)), 1.0) << i;
  }
  EXPECT_EQ(count, (std::vector<int64_t>{2000, 5000, 3000}));
  EXPECT_EQ(blended_dataset_samples(0.3, 1000), 302u);  // ceil(301.5)
  EXPECT_EQ(blended_dataset_samples(0.5, 200), 101u);   // ceil(100.5)
  // Megatron-core's count with --mid-level-dataset-surplus: the share rounded up first
  // (Python: math.ceil(math.ceil(1000 * 0.3021) * (1 + 0.005)) = 305, where the rule before it
  // gives math.ceil(1000 * 0.3021 * 1.005) = 304).
  EXPECT_EQ(blended_dataset_samples(0.3021, 1000), 304u);
  EXPECT_EQ(blended_dataset_samples(0.3021, 1000, 0.005), 305u);
  EXPECT_EQ(blended_dataset_samples(0.3021, 1000, 0.0), 303u);
  EXPECT_EQ(blended_dataset_samples(0.5, 7, 0.25), 5u);  // ceil(ceil(3.5) * 1.25)
}

// Prefixes A (ids below 100000) and B (ids from 100000) of 50 documents each in `dir`,
// blended 3:7 for 1000 training samples of 8 tokens, split `split`, cached in dir/cache.
GptDatasetConfig blend_of_a_and_b(const ScratchDir& dir, const std::string& split) {
  write_docs(dir / "A", 50, 1, 0);
  write_docs(dir / "B", 50, 2, 100000);
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({"3", dir / "A", "7", dir / "B"});
  cfg.split = split;
  cfg.seq_length = 8;
  cfg.train_samples = 1000;
  cfg.cache_dir = dir / "cache";
  return cfg;
}

TEST(Blend, BlendedDatasets) {
  ScratchDir dir;
  GptDatasetConfig cfg = blend_of_a_and_b(dir, "9,1,0");
  cfg.valid_samples = 40;
  auto tvt = build_gpt_datasets(cfg);
  ASSERT_TRUE(tvt.train && tvt.valid);
  EXPECT_FALSE(tvt.test);
  ASSERT_EQ(tvt.train->size(), 1000u);
  ASSERT_EQ(tvt.valid->size(), 40u);
  auto* blend = dynamic_cast<BlendedSource*>(tvt.train.get());
  ASSERT_TRUE(blend);
  EXPECT_GE(blend->dataset(0).size(), 302u);
  EXPECT_GE(blend->dataset(1).size(), 704u);  // ceil(0.7 * 1000 * 1.005) = 704
  int from_b = 0;
  std::vector<int32_t> s(9), ref(9);
  for (uint64_t i = 0; i < 1000; ++i) {
    tvt.train->get(i, s.data());
    const int d = blend->indices().dataset_index[i];
    blend->dataset(d).get(static_cast<uint64_t>(blend->indices().dataset_sample_index[i]), ref.data());
    ASSERT_EQ(s, ref);
    const bool b = s[0] >= 100000;
    ASSERT_EQ(b, d == 1);
    for (int32_t v : s) ASSERT_EQ(v >= 100000, b);  // never mixes the sources
    from_b += b;
  }
  EXPECT_EQ(from_b, 700);
}

// A blend's indices are cached as the index maps are: the first build writes them, the next
// maps them (what a fresh build computes); another size or other weights get a file of their
// own; a torn file is rebuilt and a corrupt entry named; a cache folder that cannot be
// written keeps them in memory.
TEST(Blend, IndicesCachedAndReused) {
  ScratchDir dir;
  GptDatasetConfig cfg = blend_of_a_and_b(dir, "1,0,0");
  const BlendingIndices fresh = build_blending_indices({0.3, 0.7}, 1000);
  auto build = [&] {
    auto tvt = build_gpt_datasets(cfg);
    EXPECT_TRUE(dynamic_cast<BlendedSource*>(tvt.train.get()));
    return std::unique_ptr<BlendedSource>(dynamic_cast<BlendedSource*>(tvt.train.release()));
  };
  std::string file;
  {
    const auto first = build();
    EXPECT_FALSE(first->loaded_from_cache());
    file = first->cache_file();
    EXPECT_EQ(std::filesystem::path(file).parent_path(), std::filesystem::path(cfg.cache_dir));
    EXPECT_TRUE(std::filesystem::exists(file));
    const auto again = build();
    EXPECT_TRUE(again->loaded_from_cache());
    EXPECT_EQ(again->cache_file(), file);
    EXPECT_EQ(vec(again->indices().dataset_index), fresh.dataset_index);
    EXPECT_EQ(vec(again->indices().dataset_sample_index), fresh.dataset_sample_index);
    std::vector<int32_t> a(9), b(9);
    for (uint64_t i = 0; i < 1000; i += 37) {
      first->get(i, a.data());
      again->get(i, b.data());
      ASSERT_EQ(a, b) << "sample " << i;
    }
  }
  cfg.train_samples = 999;
  const auto other_size = build();
  EXPECT_FALSE(other_size->loaded_from_cache());
  EXPECT_NE(other_size->cache_file(), file);
  cfg.train_samples = 1000;
  cfg.blend = parse_data_path({"4", dir / "A", "6", dir / "B"});
  const auto other_weights = build();
  EXPECT_FALSE(other_weights->loaded_from_cache());
  EXPECT_NE(other_weights->cache_file(), file);
  cfg.blend = parse_data_path({"3", dir / "A", "7", dir / "B"});
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 8);
  {
    const auto rebuilt = build();
    EXPECT_FALSE(rebuilt->loaded_from_cache());
    EXPECT_EQ(vec(rebuilt->indices().dataset_sample_index), fresh.dataset_sample_index);
  }
  // The first dataset_index entry (after the 72-byte header) names a dataset the blend lacks.
  std::string bytes = testing::read_file(file);
  bytes[72] = 9;
  testing::write_file(file, bytes);
  try {
    build();
    FAIL() << "a corrupt blend cache was followed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file + ": corrupt blend cache (sample 0); delete it"), std::string::npos)
        << e.what();
  }
  testing::write_file(dir / "not_a_folder", "");
  cfg.cache_dir = dir / "not_a_folder";
  ::testing::internal::CaptureStderr();
  const auto in_memory = build();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(in_memory->loaded_from_cache());
  EXPECT_EQ(vec(in_memory->indices().dataset_index), fresh.dataset_index);
  EXPECT_NE(err.find("cannot write the index cache " + in_memory->cache_file()), std::string::npos) << err;
}

// "--data-path 1 A" is a weighted blend of one prefix, as in Megatron-LM: A's index maps are
// built for ceil(n * 1.005) samples (here one more epoch than n needs) and the blend reads
// their first n in order; "A" alone is A's dataset, built for n, and so is "--train-data-path 1 A".
TEST(Blend, WeightedSinglePrefixIsABlend) {
  ScratchDir dir;
  write_docs(dir / "A", 200, 1, 0);
  const GptDataset one_epoch(std::make_shared<const IndexedDataset>(dir / "A"), "train", 0, 200, 8, 1234, 0, "");
  ASSERT_EQ(one_epoch.maps().epochs, 1u);
  ASSERT_GT(one_epoch.size(), 300u);  // so that 0.5% more samples pass the epoch
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({"1", dir / "A"});
  cfg.split = "1,0,0";
  cfg.seq_length = 8;
  cfg.train_samples = one_epoch.size() - 1;
  cfg.cache_dir = dir / "cache";
  auto weighted = build_gpt_datasets(cfg);
  auto* blend = dynamic_cast<BlendedSource*>(weighted.train.get());
  ASSERT_TRUE(blend);
  ASSERT_EQ(blend->size(), cfg.train_samples);
  const auto* part = dynamic_cast<const GptDataset*>(&blend->dataset(0));
  ASSERT_TRUE(part);
  EXPECT_EQ(part->maps().epochs, 2u);
  for (uint64_t i = 0; i < blend->size(); ++i) {
    ASSERT_EQ(blend->indices().dataset_index[i], 0);
    ASSERT_EQ(blend->indices().dataset_sample_index[i], static_cast<int64_t>(i));
  }
  cfg.blend = parse_data_path({dir / "A"});
  auto lone = build_gpt_datasets(cfg);
  const auto* alone = dynamic_cast<const GptDataset*>(lone.train.get());
  ASSERT_TRUE(alone);
  EXPECT_EQ(alone->maps().epochs, 1u);
  // A per-split path of one prefix is its dataset, weight or not (Megatron-core's
  // blend_per_split: "Blend consists of a single prefix"), built for n.
  GptDatasetConfig per_split;
  per_split.per_split[0] = parse_data_path({"1", dir / "A"}, "--train-data-path");
  per_split.seq_length = 8;
  per_split.train_samples = cfg.train_samples;
  per_split.cache_dir = dir / "cache";
  auto split_data = build_gpt_datasets(per_split);
  const auto* whole = dynamic_cast<const GptDataset*>(split_data.train.get());
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->maps().epochs, 1u);
}

// The (dataset, sample) pairs a blend reads, counted.
std::map<std::pair<int, int64_t>, int> blend_reads(const BlendedSource& blend) {
  std::map<std::pair<int, int64_t>, int> reads;
  for (uint64_t i = 0; i < blend.size(); ++i)
    ++reads[{blend.indices().dataset_index[i], blend.indices().dataset_sample_index[i]}];
  return reads;
}

TEST(Blend, UnweightedBlendReadsOneEpochOfEachByTheirSizes) {
  ScratchDir dir;
  write_docs(dir / "A", 60, 1, 0);
  write_docs(dir / "B", 20, 2, 100000);
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({dir / "A", dir / "B"});
  cfg.split = "1,0,0";
  cfg.seq_length = 8;
  cfg.cache_dir = dir / "cache";
  // One epoch of A and B: the same samples as each prefix alone asked for nothing more.
  const GptDataset a(std::make_shared<const IndexedDataset>(dir / "A"), "train", 0, 60, 8, cfg.seed, 0, "");
  const GptDataset b(std::make_shared<const IndexedDataset>(dir / "B"), "train", 0, 20, 8, cfg.seed, 0, "");
  EXPECT_EQ(a.maps().epochs, 1u);
  const uint64_t total = a.size() + b.size();
  ASSERT_GT(b.size(), 10u);

  cfg.train_samples = 1000000;  // more than there is: the blend stops at one epoch of each
  auto all = build_gpt_datasets(cfg);
  auto* blend = dynamic_cast<BlendedSource*>(all.train.get());
  ASSERT_TRUE(blend);
  ASSERT_EQ(blend->size(), total);
  EXPECT_EQ(blend->dataset(0).size(), a.size());
  EXPECT_EQ(blend->dataset(1).size(), b.size());
  const auto reads = blend_reads(*blend);
  EXPECT_EQ(reads.size(), total);  // every sample of both, each once
  for (const auto& [key, n] : reads) ASSERT_EQ(n, 1);
  std::vector<int32_t> s(9), ref(9);
  for (uint64_t i = 0; i < total; i += 7) {
    all.train->get(i, s.data());
    const int d = blend->indices().dataset_index[i];
    (d == 0 ? static_cast<const SampleSource&>(a) : b).get(blend->indices().dataset_sample_index[i], ref.data());
    ASSERT_EQ(s, ref) << i;
  }

  cfg.train_samples = total / 2;  // fewer: mixed in proportion to the epochs' sizes
  all = build_gpt_datasets(cfg);
  blend = dynamic_cast<BlendedSource*>(all.train.get());
  ASSERT_TRUE(blend && blend->size() == total / 2);
  int64_t from_b = 0;
  for (uint64_t i = 0; i < blend->size(); ++i) from_b += blend->indices().dataset_index[i] == 1;
  const double expected_b = static_cast<double>(b.size()) / static_cast<double>(total) * static_cast<double>(total / 2);
  EXPECT_LE(std::abs(static_cast<double>(from_b) - expected_b), 1.0) << from_b << " vs " << expected_b;
}

TEST(Blend, PerSplitPathsReadWholeDatasets) {
  ScratchDir dir;
  write_docs(dir / "A", 40, 1, 0);
  write_docs(dir / "B", 30, 2, 100000);
  write_docs(dir / "C", 30, 3, 200000);
  GptDatasetConfig cfg;
  cfg.per_split[0] = parse_data_path({dir / "A"}, "--train-data-path");
  cfg.per_split[1] = parse_data_path({"1", dir / "B", "3", dir / "C"}, "--valid-data-path");
  cfg.split = "0,0,1";  // ignored: each split's data is read whole
  cfg.seq_length = 8;
  cfg.train_samples = 500;
  cfg.valid_samples = 40;
  cfg.test_samples = 40;  // no --test-data-path: no test split
  cfg.cache_dir = dir / "cache";
  auto tvt = build_gpt_datasets(cfg);
  ASSERT_TRUE(tvt.train && tvt.valid);
  EXPECT_FALSE(tvt.test);
  const GptDataset whole_a(std::make_shared<const IndexedDataset>(dir / "A"), "train", 0, 40, 8, cfg.seed, 500, "");
  ASSERT_EQ(tvt.train->size(), whole_a.size());
  std::vector<int32_t> s(9), ref(9);
  for (uint64_t i = 0; i < tvt.train->size(); i += 5) {
    tvt.train->get(i, s.data());
    whole_a.get(i, ref.data());
    ASSERT_EQ(s, ref);
  }
  ASSERT_EQ(tvt.valid->size(), 40u);
  int from_c = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    tvt.valid->get(i, s.data());
    ASSERT_GE(s[0], 100000);  // never A's
    from_c += s[0] >= 200000;
  }
  EXPECT_EQ(from_c, 30);

  // A test path without documents: no test split, and a warning naming the flag.
  IndexedDatasetBuilder(dir / "none", IndexDType::kUInt16).finish();
  cfg.per_split[2] = parse_data_path({dir / "none"}, "--test-data-path");
  tvt = build_gpt_datasets(cfg);
  EXPECT_FALSE(tvt.test);
  EXPECT_EQ(tvt.warnings, (std::vector<std::string>{"--test-data-path: " + (dir / "none") + " (0 documents): no test"}));

  cfg.blend = parse_data_path({dir / "A"});
  try {
    build_gpt_datasets(cfg);
    FAIL() << "--data-path with per-split paths was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("alternatives"), std::string::npos) << e.what();
  }
}

TEST(Blend, MissingSplitOfOneDatasetNamesItsPrefixAndSplit) {
  ScratchDir dir;
  write_docs(dir / "A", 50, 1, 0);
  write_docs(dir / "B", 3, 2, 100000);  // --split 9,1,0 leaves B no validation documents
  GptDatasetConfig cfg;
  cfg.blend = parse_data_path({"1", dir / "A", "1", dir / "B"});
  cfg.split = "9,1,0";
  cfg.seq_length = 8;
  cfg.train_samples = 100;
  cfg.valid_samples = 40;
  cfg.cache_dir = dir / "cache";
  try {
    build_gpt_datasets(cfg);
    FAIL() << "a blend without B's validation split was built";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--data-path"), std::string::npos) << m;
    EXPECT_NE(m.find(dir / "B" + std::string(" (valid split)")), std::string::npos) << m;
    EXPECT_NE(m.find("--split"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace trident
