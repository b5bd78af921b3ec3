#include "data/gpt_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <optional>
#include <random>

#include "core/decimal.h"
#include "core/error.h"
#include "core/hex.h"
#include "core/mapped_files.h"
#include "core/process_id.h"
#include "data/blend.h"
#include "data/indexed_dataset.h"

namespace trident {
namespace {

// The index maps' cache key and file: kIndexMapVersion changes when the maps or the file's
// arrays change meaning.
constexpr uint64_t kIndexMapVersion = 3;  // 3: numpy's shuffles (Megatron's order)
constexpr uint32_t kIndexMapArrayBytes[3] = {4, 8, 8};  // doc_idx, sample_idx, shuffle_idx

// Where index caches go: --data-cache-path, else the folder of the (first) prefix, as Megatron.
std::string index_cache_dir(const std::string& prefix, const std::string& cache_dir) {
  if (!cache_dir.empty()) return cache_dir;
  std::error_code ec;
  return std::filesystem::absolute(prefix, ec).parent_path().string();
}

// The maps of a cache file, when it holds them for `hash` (its scalars epochs and the
// separate-last-epoch flag, its arrays doc_idx, sample_idx and shuffle_idx, shaped alike).
std::optional<MappedArrayCache> open_index_maps(const std::string& path, uint64_t hash, GptIndexView& v) {
  auto c = MappedArrayCache::open(path, hash, 2, kIndexMapArrayBytes);
  if (!c || c->scalar(1) > 1 || c->array<int64_t>(1).size() != 2 * (c->array<int64_t>(2).size() + 1))
    return std::nullopt;
  v = {c->scalar(0), c->scalar(1) == 1, c->array<int32_t>(0), c->array<int64_t>(1), c->array<int64_t>(2)};
  return c;
}

bool save_index_maps(const std::string& path, uint64_t hash, const GptIndexMaps& m) {
  const uint64_t scalars[2] = {m.epochs, m.separate_last_epoch ? 1u : 0u};
  const CacheArray arrays[3] = {cache_array(m.doc_idx), cache_array(m.sample_idx), cache_array(m.shuffle_idx)};
  return save_array_cache(path, hash, scalars, arrays, "an index-map build");
}

}  // namespace

// ---------------------------------------------------------------- pieces

uint64_t NumpyShuffler::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
  for (;;) {
    uint64_t v;
    if (max <= 0xffffffffu) {
      v = gen_() & mask;
    } else {
      const uint64_t hi = gen_();
      v = ((hi << 32) | gen_()) & mask;
    }
    if (v <= max) return v;
  }
}

std::array<uint64_t, 4> split_boundaries(const std::string& split, uint64_t n) {
  const char sep = split.find(',') != std::string::npos ? ',' : '/';
  std::vector<double> w;
  std::stringstream ss(split);
  std::string part;
  const auto refuse = [&] {
    throw ConfigError("--split: expected up to three non-negative weights like 969,30,1, got \"" + split + "\"");
  };
  while (std::getline(ss, part, sep)) {
    const std::optional<double> v = parse_decimal(part);  // Python's float(): no hexadecimal
    if (!v || !std::isfinite(*v) || *v < 0 || w.size() == 3) refuse();
    w.push_back(*v);
  }
  while (w.size() < 3) w.push_back(0.0);
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) throw ConfigError("--split: weights sum to zero (\"" + split + "\")");
  // Megatron-LM's rule (BlendedMegatronDatasetBuilder): each boundary is the running sum of
  // the normalised weights times n, rounded half to even; not Megatron-DeepSpeed's older
  // get_train_valid_test_split_, which rounded each split's size and shifted the boundaries
  // so that they end at n (949,50,1 of 10 documents: no validation document there, one here).
  std::array<uint64_t, 4> out{0, 0, 0, 0};
  double cumulative = 0.0;
  for (int i = 0; i < 3; ++i) {
    cumulative += w[i] / sum;
    const double b = std::nearbyint(cumulative * static_cast<double>(n));
    out[i + 1] = std::min<uint64_t>(n, static_cast<uint64_t>(std::max(0.0, b)));
  }
  return out;
}

std::pair<uint64_t, uint64_t> document_range(const DocumentFractions& f, uint64_t n) {
  // Python's round(x) of a float: the nearest integer, halves to even, which nearbyint gives in
  // the default rounding mode (0.5 * 5 = 2.5 -> 2, 0.5 * 7 = 3.5 -> 4).
  const auto python_round = [](double x) { return static_cast<uint64_t>(std::nearbyint(x)); };
  const double docs = static_cast<double>(n);
  return {python_round(f.start * docs), python_round(f.end * docs)};
}

uint64_t num_epochs(uint64_t tokens_per_epoch, int seq_length, uint64_t samples) {
  TRIDENT_CHECK(tokens_per_epoch > 0 && seq_length > 0, "tokens ", tokens_per_epoch);
  uint64_t epochs = 0, total = 0;
  do {
    ++epochs;
    total += tokens_per_epoch;
  } while ((total - 1) / static_cast<uint64_t>(seq_length) < samples);
  return epochs;
}

GptIndexMaps build_index_maps(UnalignedArray<int32_t> sizes, uint64_t begin, uint64_t end, int seq_length,
                              uint64_t seed, uint64_t samples) {
  TRIDENT_CHECK(begin < end && end <= sizes.size() && seq_length > 0, "range ", begin, "..", end);
  TRIDENT_CHECK(end <= kMaxIndexedDocuments, "document ids past int32 in doc_idx: ", end);
  const uint64_t seq = static_cast<uint64_t>(seq_length);
  uint64_t tokens = 0;
  for (uint64_t d = begin; d < end; ++d) tokens += static_cast<uint64_t>(sizes[d]);
  GptIndexMaps m;
  m.epochs = num_epochs(tokens, seq_length, samples);
  const uint64_t from_first = ((m.epochs - 1) * tokens - (m.epochs > 1 ? 1 : 0)) / seq;
  if (m.epochs > 1) {
    const uint64_t last_epoch_samples = samples - from_first;
    const uint64_t per_epoch = (tokens - 1) / seq;
    m.separate_last_epoch =
        last_epoch_samples < static_cast<uint64_t>(kSeparateLastEpochCutoff * static_cast<double>(per_epoch));
  }
  TRIDENT_CHECK(seed <= kMaxDataSeed, "seed ", seed, " past numpy's RandomState");
  NumpyShuffler rng(static_cast<uint32_t>(seed));
  // doc_idx: documents tiled over the epochs, shuffled (last epoch apart when separate)
  const uint64_t ndocs = end - begin;
  m.doc_idx.resize(ndocs * m.epochs);
  for (uint64_t e = 0; e < m.epochs; ++e)
    for (uint64_t d = 0; d < ndocs; ++d) m.doc_idx[e * ndocs + d] = static_cast<int32_t>(begin + d);
  if (m.separate_last_epoch) {
    rng.shuffle(m.doc_idx.data(), ndocs * (m.epochs - 1));
    rng.shuffle(m.doc_idx.data() + ndocs * (m.epochs - 1), ndocs);
  } else {
    rng.shuffle(m.doc_idx.data(), m.doc_idx.size());
  }
  // sample_idx: walk doc_idx in steps of seq_length tokens
  const uint64_t n = (m.epochs * tokens - 1) / seq;
  m.sample_idx.assign(2 * (n + 1), 0);
  int64_t pos = 0, offset = 0;
  for (uint64_t s = 1; s <= n; ++s) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      TRIDENT_CHECK(static_cast<uint64_t>(pos) < m.doc_idx.size(), "sample walk ran past doc_idx");
      const int64_t doc_len = sizes[static_cast<size_t>(m.doc_idx[pos])] - offset;
      remaining -= doc_len;
      if (remaining <= 0) {
        offset += remaining + doc_len - 1;
        remaining = 0;
      } else {
        ++pos;
        offset = 0;
      }
    }
    m.sample_idx[2 * s] = pos;
    m.sample_idx[2 * s + 1] = offset;
  }
  // shuffle_idx: a permutation of the samples (first epochs and last epoch apart when separate)
  const uint64_t first = m.separate_last_epoch ? from_first : n;
  m.shuffle_idx.resize(n);
  for (uint64_t i = 0; i < n; ++i) m.shuffle_idx[i] = static_cast<int64_t>(i);
  rng.shuffle(m.shuffle_idx.data(), first);
  rng.shuffle(m.shuffle_idx.data() + first, n - first);
  return m;
}

// ---------------------------------------------------------------- one split of one prefix

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> data, const std::string& name, uint64_t begin,
                       uint64_t end, int seq_length, uint64_t seed, uint64_t samples, const std::string& cache_dir)
    : data_(std::move(data)), seq_length_(seq_length) {
  namespace fs = std::filesystem;
  const std::string prefix = data_->prefix();
  uint64_t tokens = 0;
  for (uint64_t d = begin; d < end; ++d) tokens += static_cast<uint64_t>(data_->sizes()[d]);
  if (tokens == 0)
    throw IoError(detail::concat(idx_path(prefix), ": the ", name, " split (documents ", begin, "..", end,
                                 ") holds no tokens"));
  // doc_idx holds document ids as int32, as Megatron's: a split reaching past id 2^31 - 1
  // (a later split of a corpus of more documents) cannot be indexed.
  if (end > kMaxIndexedDocuments)
    throw ConfigError(detail::concat(idx_path(prefix), ": the ", name, " split (documents ", begin, "..", end,
                                     ") reaches past document ", kMaxIndexedDocuments - 1,
                                     ", the last the index maps can hold (int32 ids, as Megatron's); split the "
                                     "corpus into prefixes of fewer documents and blend them"));
  // Everything the maps depend on goes into the hash, the data file's size and mtime included.
  struct stat st {};
  ::stat(idx_path(prefix).c_str(), &st);
  std::error_code ec;
  const fs::path abs = fs::absolute(prefix, ec);
  const std::string key = detail::concat(
      "trident-gpt-index-v", kIndexMapVersion, "|", abs.string(), "|", name, "|", begin, "|", end, "|", seq_length,
      "|", seed, "|", samples, "|", kSeparateLastEpochCutoff, "|", st.st_size, "|", st.st_mtim.tv_sec, ".",
      st.st_mtim.tv_nsec);
  const uint64_t hash = cache_key_hash(key);
  const std::string hex = hex64(hash);
  const fs::path dir = index_cache_dir(prefix, cache_dir);
  cache_file_ = (dir / detail::concat(fs::path(prefix).filename().string(), "_", name, "_indexmap_", samples, "ns_",
                                      seq_length, "sl_", seed, "s_", hex, ".tidx"))
                    .string();
  begin_ = begin;
  end_ = end;
  cache_ = open_index_maps(cache_file_, hash, view_);
  if (cache_) {
    from_cache_ = true;
    return;
  }
  owned_ = build_index_maps(data_->sizes(), begin, end, seq_length, seed, samples);
  fs::create_directories(dir, ec);
  if (save_index_maps(cache_file_, hash, owned_) && (cache_ = open_index_maps(cache_file_, hash, view_))) {
    owned_ = GptIndexMaps();  // serve from the shared mapping
    return;
  }
  view_ = {owned_.epochs, owned_.separate_last_epoch, owned_.doc_idx, owned_.sample_idx, owned_.shuffle_idx};
}

void GptDataset::get(uint64_t i, int32_t* tokens) const {
  TRIDENT_CHECK(i < size(), "sample ", i, " of ", size());
  const auto& v = view_;
  // Every value read from the (possibly cached) maps is checked before use.
  auto corrupt = [&] { return IoError(detail::concat(cache_file_, ": corrupt index cache (sample ", i, "); delete it")); };
  const int64_t s = v.shuffle_idx[i];
  if (s < 0 || static_cast<uint64_t>(s) >= size()) throw corrupt();
  const int64_t first = v.sample_idx[2 * s], first_off = v.sample_idx[2 * s + 1];
  const int64_t last = v.sample_idx[2 * s + 2], last_off = v.sample_idx[2 * s + 3];
  const int64_t ndoc = static_cast<int64_t>(v.doc_idx.size());
  if (first < 0 || last < first || last >= ndoc || first_off < 0 || last_off < 0) throw corrupt();
  auto doc = [&](int64_t pos) {
    const int32_t d = v.doc_idx[static_cast<size_t>(pos)];
    if (d < static_cast<int64_t>(begin_) || d >= static_cast<int64_t>(end_)) throw corrupt();
    return static_cast<uint64_t>(d);
  };
  auto len = [&](uint64_t d) { return static_cast<int64_t>(data_->sizes()[d]); };
  const int64_t want = seq_length_ + 1;
  if (first == last) {
    const uint64_t d = doc(first);
    if (last_off - first_off + 1 != want || last_off >= len(d)) throw corrupt();
    data_->read(d, first_off, want, tokens);
    return;
  }
  const uint64_t d0 = doc(first);
  int64_t n = len(d0) - first_off;
  if (n < 0 || n > want) throw corrupt();
  data_->read(d0, first_off, n, tokens);
  for (int64_t p = first + 1; p < last; ++p) {
    const uint64_t d = doc(p);
    if (n + len(d) > want) throw corrupt();
    data_->read(d, 0, len(d), tokens + n);
    n += len(d);
  }
  const uint64_t dl = doc(last);
  if (n + last_off + 1 != want || last_off >= len(dl)) throw corrupt();
  data_->read(dl, 0, last_off + 1, tokens + n);
}

// ---------------------------------------------------------------- train/valid/test

namespace {

// A weight as Megatron's float(word) reads it: decimal, not C's hexadecimal.
bool is_number(const std::string& word) {
  const std::optional<double> v = parse_decimal(word);
  return v && std::isfinite(*v);
}

// One split of a blend: documents ranges[k] of prefix k (an empty range: none of it).
struct SplitOfBlend {
  const DataBlend& blend;
  const std::vector<std::shared_ptr<const IndexedDataset>>& data;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::string name;   // "train", "valid", "test"
  std::string where;  // how errors name a prefix's part: " (valid split)", " (--valid-data-path)"
  std::string flag;   // the flag that gave the blend
  // A per-split path (--train-data-path, ...): Megatron-core builds one prefix's dataset alone
  // there, weight or not ("Blend consists of a single prefix").
  bool per_split = false;
};

// Megatron's BlendedMegatronDatasetBuilder for one split: a lone prefix without a weight is
// its GptDataset (of a per-split path with a weight too); a weighted blend, even of one prefix
// ("1 P" of --data-path), asks each prefix for
// ceil(w n 1.005) samples (or Megatron-core's count with a surplus: blended_dataset_samples;
// which can change the epochs) and blends them back to n; an
// unweighted one builds one epoch of each and blends them by size, capped at their sum.
std::unique_ptr<SampleSource> build_split(const SplitOfBlend& sb, uint64_t wanted, const GptDatasetConfig& cfg) {
  if (wanted == 0) return nullptr;
  const size_t n = sb.blend.prefixes.size();
  const bool weighted = !sb.blend.weights.empty();
  auto dataset = [&](size_t k, uint64_t samples) -> std::unique_ptr<SampleSource> {
    const auto [begin, end] = sb.ranges[k];
    if (end <= begin) return nullptr;
    return std::make_unique<GptDataset>(sb.data[k], sb.name, begin, end, cfg.seq_length, cfg.seed, samples,
                                        cfg.cache_dir);
  };
  const bool whole = wanted == GptDatasetConfig::kWholeSplit;  // one epoch: GptDataset's 0 samples
  const bool any_documents = std::any_of(sb.ranges.begin(), sb.ranges.end(), [](const auto& r) { return r.second > r.first; });
  if (whole && weighted && !(n == 1 && sb.per_split) && any_documents)
    throw ConfigError(sb.flag + ": --full-validation reads each validation dataset once, which a weighted blend "
                      "cannot (its weights need a size: Megatron's 'Using client-specified weights requires "
                      "client-specified size'); give the prefixes without weights");
  if (n == 1 && (!weighted || sb.per_split)) return dataset(0, whole ? 0 : wanted);
  std::vector<std::unique_ptr<SampleSource>> parts;
  std::vector<std::string> names;
  for (size_t k = 0; k < n; ++k) {
    parts.push_back(dataset(k, weighted ? blended_dataset_samples(sb.blend.weights[k], wanted, cfg.mid_level_dataset_surplus) : 0));
    names.push_back(sb.blend.prefixes[k] + sb.where);
  }
  std::vector<double> weights = sb.blend.weights;
  uint64_t size = wanted;
  if (!weighted) {
    uint64_t total = 0;
    for (const auto& p : parts) total += p ? p->size() : 0;
    if (total == 0) return nullptr;
    for (const auto& p : parts) weights.push_back(p ? static_cast<double>(p->size()) / static_cast<double>(total) : 0.0);
    size = std::min(wanted, total);
  } else if (std::none_of(parts.begin(), parts.end(), [](const auto& p) { return p != nullptr; })) {
    return nullptr;
  }
  return std::make_unique<BlendedSource>(std::move(parts), weights, size, names, sb.flag,
                                         index_cache_dir(sb.blend.prefixes[0], cfg.cache_dir));
}

// --multiple-validation-sets (Megatron-core's builder): each prefix of the validation path
// alone, all its documents, `wanted` samples each; weights are refused, as Megatron's help
// says ("requires that no weights are included in the list"), and so is a prefix without
// documents (it would have nothing to report).
std::vector<std::unique_ptr<SampleSource>> build_validation_sets(
    const DataBlend& blend, const std::vector<std::shared_ptr<const IndexedDataset>>& data, uint64_t wanted,
    const GptDatasetConfig& cfg) {
  if (!blend.weights.empty())
    throw ConfigError(blend.flag + ": --multiple-validation-sets evaluates each prefix alone: give the prefixes "
                      "without weights");
  std::vector<std::unique_ptr<SampleSource>> sets;
  if (wanted == 0) return sets;
  const bool whole = wanted == GptDatasetConfig::kWholeSplit;  // one epoch: GptDataset's 0 samples
  for (size_t k = 0; k < data.size(); ++k) {
    if (data[k]->size() == 0)
      throw ConfigError(detail::concat(blend.flag, ": ", blend.prefixes[k], " holds no documents: validation set ", k,
                                       " (--multiple-validation-sets) would be empty"));
    sets.push_back(std::make_unique<GptDataset>(data[k], "valid", 0, data[k]->size(), cfg.seq_length, cfg.seed,
                                                whole ? 0 : wanted, cfg.cache_dir));
  }
  return sets;
}

// "--split 949,50,1 leaves no validation documents in P (10 documents): no validation"
// "P (10 documents), Q (3 documents)"
std::string prefixes_and_documents(const std::vector<std::shared_ptr<const IndexedDataset>>& data) {
  std::string prefixes;
  for (const auto& d : data)
    prefixes += detail::concat(prefixes.empty() ? "" : ", ", d->prefix(), " (", d->size(), " documents)");
  return prefixes;
}

std::string empty_split_warning(const std::string& split, const std::string& what,
                                const std::vector<std::shared_ptr<const IndexedDataset>>& data) {
  return detail::concat("--split ", split, " leaves no ", what, " documents in ", prefixes_and_documents(data), ": no ",
                        what);
}

// The XXH3 of 16 windows of 4 KiB spread evenly over `bytes` (its first and last among
// them; all of it when smaller). Every rank identifies its data at every start
// (same_data_check.h): a corpus's tokens, and the .idx of a corpus of billions of documents,
// are too large to read whole there, and two corpora, or two versions of one, differ within
// these windows all but surely.
uint64_t sampled_hash(std::span<const char> bytes) {
  constexpr size_t kWindows = 16, kWindow = 4096;
  if (bytes.size() <= kWindows * kWindow) return XXH3_64bits(bytes.data(), bytes.size());
  std::vector<char> windows;
  windows.reserve(kWindows * kWindow);
  const size_t last = bytes.size() - kWindow;
  for (size_t w = 0; w < kWindows; ++w) {
    const size_t at = last / (kWindows - 1) * w + (w == kWindows - 1 ? last % (kWindows - 1) : 0);
    windows.insert(windows.end(), bytes.data() + at, bytes.data() + at + kWindow);
  }
  return XXH3_64bits(windows.data(), windows.size());
}

// The content of prefix `k` of `blend`, not its path: its weight, counts and token type, and
// windows of its .idx (sizes, pointers and documents: the samples' layout) and of its tokens.
// `role`: which data the blend is ("split", or a split's name for a per-split path).
DatasetIdentity dataset_identity(const DataBlend& blend, const char* role, size_t k, const IndexedDataset& d) {
  const std::span<const char> idx = d.idx_bytes(), bin = d.bin_bytes();
  return {detail::concat(blend.flag, "'s prefix ", k + 1, " of ", blend.prefixes.size()),
          detail::concat(role, " prefix ", k + 1, " of ", blend.prefixes.size()),
          detail::concat(blend.weights.empty() ? "" : detail::concat("weight ", blend.weights[k], ", "), d.size(),
                         " sequences in ", d.num_documents(), " documents of ", index_dtype_name(d.dtype()),
                         " tokens (", bin.size(), " bytes), XXH3 of .idx and .bin windows ",
                         hex64(sampled_hash(idx)), " ", hex64(sampled_hash(bin))),
          blend.prefixes[k]};
}

// BigScience's weighted split group: each prefix read over its fractions of its documents
// (document_range), blended as a per-split path's blend. A fraction that picks no document
// is refused (BigScience builds no dataset there and fails later, on None).
std::unique_ptr<SampleSource> build_weighted_split_group(const DataBlend& group,
                                                         const std::vector<std::shared_ptr<const IndexedDataset>>& data,
                                                         const char* split, uint64_t wanted,
                                                         const GptDatasetConfig& cfg) {
  TRIDENT_CHECK(group.fractions.size() == group.prefixes.size(), group.flag, ": ", group.fractions.size(),
                " document ranges for ", group.prefixes.size(), " prefixes");
  if (wanted == GptDatasetConfig::kWholeSplit && group.prefixes.size() > 1)
    throw ConfigError(group.flag + ": --full-validation reads each validation dataset once, which a blend of " +
                      std::to_string(group.prefixes.size()) + " datasets by weights cannot (its weights need a size): "
                      "drop --full-validation, or give the group one dataset");
  SplitOfBlend sb{group, data, {}, split, " (" + group.flag + ")", group.flag, /*per_split=*/true};
  for (size_t k = 0; k < data.size(); ++k) {
    const DocumentFractions& f = group.fractions[k];
    const auto [begin, end] = document_range(f, data[k]->size());
    if (end <= begin)
      throw ConfigError(detail::concat(group.flag, ": ", f.start, ":", f.end, " of ", group.prefixes[k], " (",
                                       data[k]->size(), " documents) is documents [", begin, ", ", end,
                                       "): none to read"));
    sb.ranges.emplace_back(begin, end);
  }
  return build_split(sb, wanted, cfg);
}

}  // namespace

DataBlend parse_data_path(const std::vector<std::string>& words, const std::string& flag) {
  if (words.empty()) throw ConfigError(flag + ": expected PREFIX, WEIGHT PREFIX pairs, or prefixes");
  DataBlend out;
  out.flag = flag;
  // Megatron-LM's get_blend_from_list (megatron/core/datasets/utils.py): weights only when the
  // number of words is even and every other word from the first is a number; when none of
  // those is, the words are prefixes, as are an odd number of words, whatever they hold.
  size_t weights = 0, a_weight = 0, not_weight = 0;  // how many, and the first of each kind
  for (size_t i = words.size(); i-- > 0;) {
    if (i % 2 != 0) continue;
    if (is_number(words[i])) {
      ++weights;
      a_weight = i;
    } else {
      not_weight = i;
    }
  }
  const bool even = words.size() % 2 == 0;
  if (even && weights == words.size() / 2) {
    double sum = 0;
    for (size_t i = 0; i < words.size(); i += 2) {
      const double w = *parse_decimal(words[i]);
      if (w < 0) throw ConfigError(flag + ": \"" + words[i] + "\" is not a non-negative weight");
      out.weights.push_back(w);
      out.prefixes.push_back(words[i + 1]);
      sum += w;
    }
    if (!(sum > 0)) throw ConfigError(flag + ": weights sum to zero");
    for (double& w : out.weights) w /= sum;
    return out;
  }
  if (even && weights > 0)  // Megatron: an AssertionError (or, in some orders, the weights taken for prefixes)
    throw ConfigError(detail::concat(flag, ": \"", words[not_weight], "\" (word ", not_weight + 1,
                                     ") is not a weight, while \"", words[a_weight], "\" (word ", a_weight + 1,
                                     ") is: give WEIGHT PREFIX pairs, or prefixes without weights"));
  // Prefixes without weights. A word that reads as a number is most likely a weight that lost
  // its pairing (Megatron goes on to open it, and fails on a missing file): unless a dataset
  // of that name exists, say so here.
  for (const std::string& w : words)
    if (is_number(w) && !std::filesystem::exists(idx_path(w)))
      throw ConfigError(detail::concat(
          flag, ": \"", w, "\" is read as a dataset prefix and there is no ", idx_path(w), ": ",
          words.size() == 1 ? std::string("one word is one prefix")
          : even ? std::string("words whose first is not a weight are prefixes without weights, as Megatron reads them")
                 : detail::concat(words.size(), " words, an odd number, are prefixes without weights, as Megatron "
                                                "reads them"),
          "; a weighted blend is WEIGHT PREFIX pairs"));
  out.prefixes = words;
  return out;
}

std::shared_ptr<const IndexedDataset> OpenedDatasets::open(const std::string& prefix) {
  std::shared_ptr<const IndexedDataset>& d = opened_[prefix];
  if (!d) d = std::make_shared<const IndexedDataset>(prefix, vocab_size_);
  return d;
}

std::vector<DatasetIdentity> data_blend_identities(const DataBlend& blend, const char* role, OpenedDatasets& opened) {
  std::vector<DatasetIdentity> ids;
  for (size_t k = 0; k < blend.prefixes.size(); ++k)
    ids.push_back(dataset_identity(blend, role, k, *opened.open(blend.prefixes[k])));
  return ids;
}

std::vector<DatasetIdentity> gpt_dataset_identities(const GptDatasetConfig& cfg, OpenedDatasets& opened) {
  std::vector<DatasetIdentity> ids = data_blend_identities(cfg.blend, "split", opened);
  const char* names[3] = {"train", "valid", "test"};
  const auto append = [&](const DataBlend& blend, const char* role) {
    const std::vector<DatasetIdentity> more = data_blend_identities(blend, role, opened);
    ids.insert(ids.end(), more.begin(), more.end());
  };
  for (int s = 0; s < 3; ++s) append(cfg.per_split[s], names[s]);
  for (int s = 0; s < 3; ++s)
    for (const DataBlend& group : cfg.weighted_split_groups[s]) append(group, names[s]);
  return ids;
}

TrainValidTest build_gpt_datasets(const GptDatasetConfig& cfg, OpenedDatasets* opened) {
  std::optional<OpenedDatasets> own;
  if (!opened) opened = &own.emplace(cfg.vocab_size);
  TRIDENT_CHECK(opened->vocab_size() == cfg.vocab_size, "datasets opened for vocabulary ", opened->vocab_size(),
                ", built for ", cfg.vocab_size);
  const bool per_split = std::any_of(cfg.per_split.begin(), cfg.per_split.end(), [](const auto& b) { return !b.empty(); });
  const bool weighted_groups = std::any_of(cfg.weighted_split_groups.begin(), cfg.weighted_split_groups.end(),
                                           [](const auto& groups) { return !groups.empty(); });
  if (!cfg.blend.empty() && per_split)
    throw ConfigError("--data-path and --train-data-path/--valid-data-path/--test-data-path are alternatives: give one");
  if (weighted_groups && (!cfg.blend.empty() || per_split))
    throw ConfigError("--train/--valid/--test-weighted-split-paths and --data-path or the per-split paths are "
                      "alternatives: give one");
  if (weighted_groups && cfg.weighted_split_groups[0].size() > 1)
    throw ConfigError(cfg.weighted_split_groups[0][1].flag + ": the training takes one group");
  if (cfg.blend.empty() && !per_split && !weighted_groups) throw ConfigError("--data-path is required");
  if (cfg.seq_length < 1) throw ConfigError("--seq-length must be positive");
  if (cfg.seed > kMaxDataSeed)
    throw ConfigError(detail::concat("--seed ", cfg.seed, ": the samples are ordered as Megatron orders them, by "
                                     "numpy's RandomState(seed), which takes seeds 0 to ", kMaxDataSeed));
  const uint64_t wanted[3] = {cfg.train_samples, cfg.valid_samples, cfg.test_samples};
  const char* names[3] = {"train", "valid", "test"};
  TrainValidTest out;
  auto warn = [&](const std::string& line) {
    if (std::find(out.warnings.begin(), out.warnings.end(), line) == out.warnings.end()) out.warnings.push_back(line);
  };
  auto open = [&](const DataBlend& blend) {
    std::vector<std::shared_ptr<const IndexedDataset>> data;
    for (const auto& prefix : blend.prefixes) {
      data.push_back(opened->open(prefix));
      if (cfg.vocab_size > 0 && data.back()->dtype() == IndexDType::kInt32 &&
          best_fitting_dtype(cfg.vocab_size) != IndexDType::kInt32)
        warn(detail::concat(prefix, ": int32 tokens, while Megatron stores a vocabulary of ", cfg.vocab_size,
                            " ids as uint16: was the data made with another tokenizer?"));
    }
    return data;
  };
  std::unique_ptr<SampleSource>* split_out[3] = {&out.train, &out.valid, &out.test};
  if (weighted_groups) {
    std::vector<std::unique_ptr<SampleSource>>* sets_out[3] = {nullptr, &out.valid_sets, &out.test_sets};
    for (int s = 0; s < 3; ++s)
      for (const DataBlend& group : cfg.weighted_split_groups[s]) {
        std::unique_ptr<SampleSource> set = build_weighted_split_group(group, open(group), names[s], wanted[s], cfg);
        if (!set) continue;  // not wanted (no evaluation): then no group of the split is
        if (s == 0)
          out.train = std::move(set);
        else
          sets_out[s]->push_back(std::move(set));
      }
    // The sets are named after their groups by position: all of a split's groups or none.
    for (int s = 1; s < 3; ++s)
      TRIDENT_CHECK(sets_out[s]->empty() || sets_out[s]->size() == cfg.weighted_split_groups[s].size(), names[s], ": ",
                    sets_out[s]->size(), " sets of ", cfg.weighted_split_groups[s].size(), " groups");
    return out;
  }
  if (!per_split) {
    const auto data = open(cfg.blend);
    if (std::all_of(data.begin(), data.end(), [](const auto& d) { return d->size() == 0; }))  // not --split's fault
      throw ConfigError(detail::concat(cfg.blend.flag, ": ", prefixes_and_documents(data), ": no documents"));
    std::vector<std::array<uint64_t, 4>> bounds;
    for (const auto& d : data) bounds.push_back(split_boundaries(cfg.split, d->size()));
    const char* evaluation[3] = {"", "validation", "test"};
    for (int s = 0; s < 3; ++s) {
      SplitOfBlend sb{cfg.blend, data, {}, names[s], detail::concat(" (", names[s], " split)"), cfg.blend.flag};
      for (const auto& b : bounds) sb.ranges.emplace_back(b[s], b[s + 1]);
      *split_out[s] = build_split(sb, wanted[s], cfg);
      // An empty training split is the caller's error; an empty evaluation split would
      // silently evaluate nothing.
      const bool empty =
          std::all_of(sb.ranges.begin(), sb.ranges.end(), [](const auto& r) { return r.second <= r.first; });
      if (s > 0 && wanted[s] > 0 && empty) warn(empty_split_warning(cfg.split, evaluation[s], data));
    }
  } else {
    for (int s = 0; s < 3; ++s) {
      const DataBlend& blend = cfg.per_split[s];
      if (blend.empty()) continue;
      const auto data = open(blend);
      const std::string& flag = blend.flag;
      if (s == 1 && cfg.multiple_validation_sets) {
        out.valid_sets = build_validation_sets(blend, data, wanted[s], cfg);
        continue;
      }
      SplitOfBlend sb{blend, data, {}, names[s], " (" + flag + ")", flag, /*per_split=*/true};
      for (const auto& d : data) sb.ranges.emplace_back(0, d->size());
      *split_out[s] = build_split(sb, wanted[s], cfg);
      if (s > 0 && wanted[s] > 0 && !*split_out[s])
        warn(detail::concat(flag, ": ", prefixes_and_documents(data), ": no ", s == 1 ? "validation" : "test"));
    }
  }
  if (cfg.multiple_validation_sets && out.valid) out.valid_sets.push_back(std::move(out.valid));
  return out;
}

}  // namespace trident
