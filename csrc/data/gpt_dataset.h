// Megatron-compatible GPT samples over Megatron .bin/.idx data.
//
// For each prefix: the documents (items) are cut into contiguous train/valid/test ranges by
// the normalised --split weights (boundaries round(frac x N), Python rounding, then shifted so
// the last one is N). A split with W wanted samples and T tokens per epoch runs E epochs, the
// smallest E with (E*T - 1) / seq_length >= W. Index maps, as in Megatron:
//   doc_idx     the split's documents tiled E times and shuffled; when the last epoch is needed
//               for fewer than kSeparateLastEpochCutoff (0.80, Megatron-LM's rule; Megatron-
//               DeepSpeed uses 0.95) of its samples, the first E-1 epochs and the last one are
//               shuffled separately;
//   sample_idx  (position in doc_idx, token offset) where each sample starts; sample i spans
//               seq_length + 1 tokens from sample_idx[i] and ends where sample i+1 starts
//               (the last token is shared);
//   shuffle_idx a permutation of the (E*T - 1) / seq_length samples (first E-1 epochs and last
//               epoch shuffled separately in the case above).
// Both shuffles draw from one numpy.random.RandomState(seed), doc_idx's first, as Megatron's
// GPTDataset does (NumpyShuffler below): the maps, and so the order of the samples, are
// Megatron's for the same data, --split, --seq-length, --seed and sample counts.
// The maps are cached in one file per split, named by a hash of everything they depend on,
// written to a unique temporary name and renamed, so concurrent ranks can build them; the
// file is then memory-mapped (ranks on a node share it through the page cache).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/array_cache.h"
#include "data/unaligned_array.h"

namespace trident {

class IndexedDataset;

// BigScience's document range of one dataset of a weighted split path ("0.3 0.1:0.8 PREFIX"): the
// fractions [start, end) of its documents, 0 <= start < end <= 1.
struct DocumentFractions {
  double start = 0, end = 1;
};

// The documents [begin, end) that `f` picks of n, by BigScience's get_split_by_range_:
// round(start * n) and round(end * n) in double arithmetic, Python's round (halves to even).
std::pair<uint64_t, uint64_t> document_range(const DocumentFractions& f, uint64_t n);

// Megatron's blend: prefixes with normalised weights, or without weights ("A B C"): then each
// prefix contributes one epoch of its split, mixed in proportion to those epochs' sample
// counts, and the blend holds at most their sum (Megatron's "unweighted" case).
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: unweighted
  // Per prefix, the part of its documents read (BigScience's weighted split paths); empty:
  // all of them, or --split's part of them.
  std::vector<DocumentFractions> fractions;
  std::string flag;             // what gave it, as errors name it ("--data-path")
  bool empty() const { return prefixes.empty(); }
};

struct GptDatasetConfig {
  // Either one blend whose prefixes are cut into train/valid/test by `split` (--data-path),
  // or a blend per split read whole (--train-data-path, --valid-data-path, --test-data-path;
  // an empty one gives no such split).
  DataBlend blend;
  std::array<DataBlend, 3> per_split;
  std::string split = "969, 30, 1";
  int seq_length = 1024;
  uint64_t seed = 1234;
  uint64_t train_samples = 0, valid_samples = 0, test_samples = 0;  // wanted
  // A split's wanted count that asks for all of it once (Megatron's --full-validation: one
  // epoch of each dataset, blended by their sizes).
  static constexpr uint64_t kWholeSplit = UINT64_MAX;
  std::optional<double> mid_level_dataset_surplus;  // blend.h's blended_dataset_samples
  // Megatron's --multiple-validation-sets: each prefix of the validation path (per_split[1],
  // without weights) is a validation set of its own, of valid_samples samples (kWholeSplit:
  // one epoch); with `blend` the validation split stays one blended set. Either way the sets
  // land in TrainValidTest::valid_sets.
  bool multiple_validation_sets = false;
  // BigScience's --train/--valid/--test-weighted-split-paths: per split, named blends (their
  // names stay with the options) whose prefixes are each read over their `fractions`, weighted
  // or not as a per-split path's blend (one prefix: its dataset alone, its weight unused).
  // The training takes one group; each validation group is a validation set of its own
  // (TrainValidTest::valid_sets), each test group a test set (test_sets), in their order.
  // Instead of `blend` and `per_split`.
  std::array<std::vector<DataBlend>, 3> weighted_split_groups;
  std::string cache_dir;  // empty: beside the data
  int64_t vocab_size = 0;  // the tokenizer's: samples with ids outside [0, vocab_size) throw (0: unchecked)
};

class SampleSource {  // a split (or blend of splits) as an indexable list of samples
 public:
  virtual ~SampleSource() = default;
  virtual uint64_t size() const = 0;
  virtual void get(uint64_t i, int32_t* tokens) const = 0;  // writes seq_length + 1 tokens
};

// What a dataset prefix holds, for comparing the data of ranks that name it by other paths.
struct DatasetIdentity {
  std::string label;    // "--data-path's prefix 2 of 3" (the flag that gave it: a --data-args-path names its file)
  std::string role;     // the same without the flag, which may name a node's own path: "split prefix 2 of 3",
                        // "valid prefix 1 of 1" (per-split paths)
  std::string content;  // "weight 0.7, 40 sequences in 38 documents of uint16 tokens (52100 bytes), XXH3 of .idx
                        // and .bin windows 0123456789abcdef ..." (dataset_identity in gpt_dataset.cpp)
  std::string path;     // the prefix as given
};

struct TrainValidTest {
  std::unique_ptr<SampleSource> train, valid, test;  // null when a split is empty/0 wanted
  // With multiple_validation_sets, the validation sets in the order of their prefixes, with
  // validation weighted split groups in the order of the groups (valid is then null).
  std::vector<std::unique_ptr<SampleSource>> valid_sets;
  // With test weighted split groups, the test sets in their order (test is then null).
  std::vector<std::unique_ptr<SampleSource>> test_sets;
  // One line each (without "warning: ") for the run's start: a validation or test split
  // that is wanted but that --split leaves without documents; int32 tokens for a vocabulary
  // that Megatron would have stored as uint16 (data made with another tokenizer?).
  std::vector<std::string> warnings;
};

// The prefixes a process has opened, each once: comparing the ranks' data
// (gpt_dataset_identities) and then building the splits (build_gpt_datasets) with one of these
// open and validate every item of a prefix once, not twice. Opened with the tokenizer's
// vocab_size (IndexedDataset's check of the ids read).
class OpenedDatasets {
 public:
  explicit OpenedDatasets(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::shared_ptr<const IndexedDataset> open(const std::string& prefix);
  int64_t vocab_size() const { return vocab_size_; }

 private:
  int64_t vocab_size_;
  std::map<std::string, std::shared_ptr<const IndexedDataset>> opened_;
};

// `opened`: the prefixes an earlier call opened, for cfg.vocab_size (null: opened here).
TrainValidTest build_gpt_datasets(const GptDatasetConfig& cfg, OpenedDatasets* opened = nullptr);

// What each prefix of cfg's blend, then of its per-split paths, holds, in the order of their
// words: cheap (every prefix opened, 16 windows of each file read), for comparing ranks' data
// before the index maps are built. IoError for a prefix that does not open, as the build's.
std::vector<DatasetIdentity> gpt_dataset_identities(const GptDatasetConfig& cfg, OpenedDatasets& opened);
// The same for the prefixes of one blend, whose role ("split", "valid", "sequential") the
// identities name.
std::vector<DatasetIdentity> data_blend_identities(const DataBlend& blend, const char* role, OpenedDatasets& opened);

// Megatron's blend words (--data-path and the per-split paths), read as Megatron-LM's
// get_blend_from_list reads them: "W1 P1 W2 P2 ..." (weights normalised) when the number of
// words is even and every other word from the first is a number, else "P1 P2 ..." (prefixes
// without weights; an odd number of words always, a single PREFIX too). ConfigError naming
// `flag` and the word for weights before some prefixes only, for a negative weight, and for
// a word read as a prefix that is a number while no such dataset exists (".idx"): a weight
// that lost its prefix, as in "0.3 A 0.7" or "A 0.5 B", which Megatron would try to open.
DataBlend parse_data_path(const std::vector<std::string>& words, const std::string& flag = "--data-path");

// ---- the pieces, exposed for tests and tools

constexpr double kSeparateLastEpochCutoff = 0.80;

// Document boundaries [b0=0, b1, b2, b3=n] of train/valid/test; ConfigError naming --split.
std::array<uint64_t, 4> split_boundaries(const std::string& split, uint64_t n);

// Smallest E >= 1 with (E * tokens_per_epoch - 1) / seq_length >= samples.
uint64_t num_epochs(uint64_t tokens_per_epoch, int seq_length, uint64_t samples);

struct GptIndexMaps {
  uint64_t epochs = 0;
  bool separate_last_epoch = false;
  std::vector<int32_t> doc_idx;     // document ids (absolute item indices)
  std::vector<int64_t> sample_idx;  // 2 * (samples + 1): (doc_idx position, offset) pairs
  std::vector<int64_t> shuffle_idx; // samples
  uint64_t num_samples() const { return shuffle_idx.size(); }
};

// Document ids in doc_idx are int32 (Megatron's dtype): ids below this.
inline constexpr uint64_t kMaxIndexedDocuments = uint64_t{1} << 31;

// Builds the maps for documents [begin, end) with the given item sizes (no caching).
GptIndexMaps build_index_maps(UnalignedArray<int32_t> sizes, uint64_t begin, uint64_t end,
                              int seq_length, uint64_t seed, uint64_t samples);

// The shuffles' primitive: numpy's legacy RandomState(seed).shuffle of a 1-D array, which
// Megatron's index maps call. RandomState seeds MT19937 with init_genrand(seed), as
// std::mt19937 does; shuffle runs Fisher-Yates from the back, swapping element i with
// j = random_interval(i): the next 32-bit draw masked to the smallest all-ones mask >= i,
// drawn again while above i (64-bit draws, two words high first, above 2^32 - 1: that range
// is not checked against numpy).
class NumpyShuffler {
 public:
  explicit NumpyShuffler(uint32_t seed) : gen_(seed) {}
  uint64_t interval(uint64_t max);  // uniform in [0, max]
  template <typename T>
  void shuffle(T* data, uint64_t n) {
    for (uint64_t i = n; i > 1; --i) std::swap(data[i - 1], data[interval(i - 1)]);
  }

 private:
  std::mt19937 gen_;
};
// numpy's RandomState takes seeds 0 to 2^32 - 1 (Megatron's data fails on others too).
inline constexpr uint64_t kMaxDataSeed = 0xffffffffu;

// Read-only view of index maps, owned by a GptIndexMaps or by a mapped cache file.
struct GptIndexView {
  uint64_t epochs = 0;
  bool separate_last_epoch = false;
  std::span<const int32_t> doc_idx;
  std::span<const int64_t> sample_idx;
  std::span<const int64_t> shuffle_idx;
};

// One split of one prefix (the building block of build_gpt_datasets).
class IndexedDataset;
class GptDataset : public SampleSource {
 public:
  // name: "train", "valid" or "test" (part of the cache file name).
  GptDataset(std::shared_ptr<const IndexedDataset> data, const std::string& name, uint64_t begin,
             uint64_t end, int seq_length, uint64_t seed, uint64_t samples, const std::string& cache_dir);
  GptDataset(const GptDataset&) = delete;
  GptDataset& operator=(const GptDataset&) = delete;
  uint64_t size() const override { return view_.shuffle_idx.size(); }
  void get(uint64_t i, int32_t* tokens) const override;
  const GptIndexView& maps() const { return view_; }
  const std::string& cache_file() const { return cache_file_; }
  bool loaded_from_cache() const { return from_cache_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  int seq_length_;
  uint64_t begin_ = 0, end_ = 0;
  GptIndexMaps owned_;        // used when the cache cannot be written
  std::optional<MappedArrayCache> cache_;  // the mapped cache file
  GptIndexView view_;
  std::string cache_file_;
  bool from_cache_ = false;
};

}  // namespace trident
