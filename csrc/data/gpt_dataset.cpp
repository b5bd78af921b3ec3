#include "data/gpt_dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/blend.h"
#include "data/indexed_dataset.h"

namespace trident {
namespace {

constexpr char kCacheMagic[8] = {'T', 'R', 'I', 'D', 'X', 'M', 'A', 'P'};
constexpr uint64_t kCacheVersion = 1;
constexpr size_t kCacheHeader = 8 + 6 * 8;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

template <typename T>
void append(std::string& out, const T* p, size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

// Reads a cache file; false (and the maps untouched) when it is absent or not valid.
bool load_cache(const std::string& path, uint64_t hash, uint64_t begin, uint64_t end, GptIndexMaps& m) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  std::string buf;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) buf.append(chunk, got);
  std::fclose(f);
  if (buf.size() < kCacheHeader || std::memcmp(buf.data(), kCacheMagic, 8) != 0) return false;
  uint64_t h[6];
  std::memcpy(h, buf.data() + 8, sizeof h);
  const uint64_t version = h[0], file_hash = h[1], epochs = h[2], separate = h[3], ndoc = h[4], n = h[5];
  if (version != kCacheVersion || file_hash != hash || separate > 1) return false;
  const uint64_t body = buf.size() - kCacheHeader;
  if (ndoc > body / 4 || n > body / 24 || ndoc * 4 + (2 * (n + 1)) * 8 + n * 8 != body) return false;
  GptIndexMaps r;
  r.epochs = epochs;
  r.separate_last_epoch = separate == 1;
  r.doc_idx.resize(ndoc);
  r.sample_idx.resize(2 * (n + 1));
  r.shuffle_idx.resize(n);
  const char* p = buf.data() + kCacheHeader;
  std::memcpy(r.doc_idx.data(), p, ndoc * 4);
  std::memcpy(r.sample_idx.data(), p + ndoc * 4, r.sample_idx.size() * 8);
  std::memcpy(r.shuffle_idx.data(), p + ndoc * 4 + r.sample_idx.size() * 8, n * 8);
  for (int32_t d : r.doc_idx)
    if (d < static_cast<int64_t>(begin) || d >= static_cast<int64_t>(end)) return false;
  for (int64_t s : r.shuffle_idx)
    if (s < 0 || static_cast<uint64_t>(s) >= n) return false;
  for (size_t i = 0; i < r.sample_idx.size(); i += 2)
    if (r.sample_idx[i] < 0 || static_cast<uint64_t>(r.sample_idx[i]) >= ndoc || r.sample_idx[i + 1] < 0) return false;
  m = std::move(r);
  return true;
}

// Writes the maps under a unique temporary name and renames it into place.
void save_cache(const std::string& path, uint64_t hash, const GptIndexMaps& m) {
  std::string out(kCacheMagic, 8);
  const uint64_t h[6] = {kCacheVersion, hash, m.epochs, m.separate_last_epoch ? 1u : 0u, m.doc_idx.size(),
                         m.shuffle_idx.size()};
  append(out, h, 6);
  append(out, m.doc_idx.data(), m.doc_idx.size());
  append(out, m.sample_idx.data(), m.sample_idx.size());
  append(out, m.shuffle_idx.data(), m.shuffle_idx.size());
  std::ostringstream tmp;
  tmp << path << ".tmp." << ::getpid() << "." << std::hash<std::thread::id>{}(std::this_thread::get_id());
  const std::string tmp_path = tmp.str();
  std::FILE* f = std::fopen(tmp_path.c_str(), "wb");
  bool ok = f && std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (f) ok = std::fclose(f) == 0 && ok;
  if (ok) ok = std::rename(tmp_path.c_str(), path.c_str()) == 0;
  if (!ok) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_path.c_str());
    throw IoError(detail::concat(path, ": cannot write the index cache: ", why));
  }
}

}  // namespace

// ---------------------------------------------------------------- pieces

uint64_t DeterministicShuffler::uniform_upto(uint64_t n) {
  if (n == UINT64_MAX) return gen_();
  const uint64_t range = n + 1;
  const uint64_t reject_below = (0 - range) % range;  // 2^64 mod range
  for (;;) {
    const uint64_t x = gen_();
    if (x >= reject_below) return x % range;
  }
}

std::array<uint64_t, 4> split_boundaries(const std::string& split, uint64_t n) {
  const char sep = split.find(',') != std::string::npos ? ',' : '/';
  std::vector<double> w;
  std::stringstream ss(split);
  std::string part;
  while (std::getline(ss, part, sep)) {
    const std::string t = trim(part);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (t.empty() || used != t.size() || !std::isfinite(v) || v < 0)
      throw ConfigError("--split: expected up to three non-negative weights like 969,30,1, got \"" + split + "\"");
    w.push_back(v);
  }
  while (w.size() < 3) w.push_back(0.0);
  w.resize(3);
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) throw ConfigError("--split: weights sum to zero (\"" + split + "\")");
  std::array<int64_t, 4> b{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i)
    b[i + 1] = b[i] + static_cast<int64_t>(std::nearbyint(w[i] / sum * static_cast<double>(n)));  // half to even
  const int64_t diff = b[3] - static_cast<int64_t>(n);
  for (int i = 1; i < 4; ++i) b[i] -= diff;
  std::array<uint64_t, 4> out{};
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint64_t>(std::max<int64_t>(0, b[i]));
  return out;
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

GptIndexMaps build_index_maps(std::span<const int32_t> sizes, uint64_t begin, uint64_t end, int seq_length,
                              uint64_t seed, uint64_t samples) {
  TRIDENT_CHECK(begin < end && end <= sizes.size() && seq_length > 0, "range ", begin, "..", end);
  TRIDENT_CHECK(end - begin < (1ull << 31), "too many documents for int32 doc_idx");
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
  DeterministicShuffler rng(seed);
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
  // Everything the maps depend on goes into the hash, the data file's size and mtime included.
  struct stat st {};
  ::stat(idx_path(prefix).c_str(), &st);
  std::error_code ec;
  const fs::path abs = fs::absolute(prefix, ec);
  const std::string key = detail::concat(
      "trident-gpt-index-v", kCacheVersion, "|", abs.string(), "|", name, "|", begin, "|", end, "|", seq_length,
      "|", seed, "|", samples, "|", kSeparateLastEpochCutoff, "|", st.st_size, "|", st.st_mtim.tv_sec, ".",
      st.st_mtim.tv_nsec);
  const uint64_t hash = fnv1a(key);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  const fs::path dir = cache_dir.empty() ? abs.parent_path() : fs::path(cache_dir);
  cache_file_ = (dir / detail::concat(fs::path(prefix).filename().string(), "_", name, "_indexmap_", samples, "ns_",
                                      seq_length, "sl_", seed, "s_", hex, ".tidx"))
                    .string();
  if (load_cache(cache_file_, hash, begin, end, maps_)) {
    from_cache_ = true;
    return;
  }
  maps_ = build_index_maps(data_->sizes(), begin, end, seq_length, seed, samples);
  fs::create_directories(dir, ec);
  save_cache(cache_file_, hash, maps_);
}

void GptDataset::get(uint64_t i, int32_t* tokens) const {
  TRIDENT_CHECK(i < size(), "sample ", i, " of ", size());
  const uint64_t s = static_cast<uint64_t>(maps_.shuffle_idx[i]);
  const int64_t first = maps_.sample_idx[2 * s], first_off = maps_.sample_idx[2 * s + 1];
  const int64_t last = maps_.sample_idx[2 * s + 2], last_off = maps_.sample_idx[2 * s + 3];
  auto doc = [&](int64_t pos) { return static_cast<uint64_t>(maps_.doc_idx[static_cast<size_t>(pos)]); };
  if (first == last) {
    data_->read(doc(first), first_off, last_off - first_off + 1, tokens);
    return;
  }
  int64_t n = data_->sizes()[doc(first)] - first_off;
  data_->read(doc(first), first_off, n, tokens);
  for (int64_t p = first + 1; p < last; ++p) {
    const int64_t len = data_->sizes()[doc(p)];
    data_->read(doc(p), 0, len, tokens + n);
    n += len;
  }
  data_->read(doc(last), 0, last_off + 1, tokens + n);
  TRIDENT_CHECK(n + last_off + 1 == seq_length_ + 1, "sample ", i, " has ", n + last_off + 1, " tokens");
}

// ---------------------------------------------------------------- train/valid/test

std::vector<std::pair<double, std::string>> parse_data_path(const std::vector<std::string>& words) {
  if (words.empty()) throw ConfigError("--data-path: expected PREFIX or WEIGHT PREFIX pairs");
  if (words.size() == 1) return {{1.0, words[0]}};
  if (words.size() % 2 != 0)
    throw ConfigError(detail::concat("--data-path: expected WEIGHT PREFIX pairs, got ", words.size(), " words"));
  std::vector<std::pair<double, std::string>> out;
  double sum = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    size_t used = 0;
    double w = -1;
    try {
      w = std::stod(words[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != words[i].size() || !std::isfinite(w) || w < 0)
      throw ConfigError("--data-path: \"" + words[i] + "\" is not a non-negative weight");
    out.emplace_back(w, words[i + 1]);
    sum += w;
  }
  if (!(sum > 0)) throw ConfigError("--data-path: weights sum to zero");
  for (auto& p : out) p.first /= sum;
  return out;
}

TrainValidTest build_gpt_datasets(const GptDatasetConfig& cfg) {
  if (cfg.blend.empty()) throw ConfigError("--data-path is required");
  if (cfg.seq_length < 1) throw ConfigError("--seq-length must be positive");
  double sum = 0;
  for (const auto& [w, p] : cfg.blend) {
    if (!std::isfinite(w) || w < 0) throw ConfigError("--data-path: weights must be non-negative");
    sum += w;
  }
  if (!(sum > 0)) throw ConfigError("--data-path: weights sum to zero");
  std::vector<double> weights;
  for (const auto& bp : cfg.blend) weights.push_back(bp.first / sum);
  const uint64_t wanted[3] = {cfg.train_samples, cfg.valid_samples, cfg.test_samples};
  const char* names[3] = {"train", "valid", "test"};
  const bool blending = cfg.blend.size() > 1;

  std::vector<std::vector<std::unique_ptr<SampleSource>>> per_split(3);
  for (size_t k = 0; k < cfg.blend.size(); ++k) {
    auto data = std::make_shared<const IndexedDataset>(cfg.blend[k].second);
    const auto b = split_boundaries(cfg.split, data->size());
    for (int s = 0; s < 3; ++s) {
      const uint64_t n = blending ? blended_dataset_samples(weights[k], wanted[s]) : wanted[s];
      std::unique_ptr<SampleSource> ds;
      if (wanted[s] > 0 && b[s + 1] > b[s])
        ds = std::make_unique<GptDataset>(data, names[s], b[s], b[s + 1], cfg.seq_length, cfg.seed, n,
                                          cfg.cache_dir);
      per_split[s].push_back(std::move(ds));
    }
  }
  std::unique_ptr<SampleSource> out[3];
  for (int s = 0; s < 3; ++s) {
    if (wanted[s] == 0) continue;
    if (!blending) {
      out[s] = std::move(per_split[s][0]);
    } else {
      bool any = false;
      for (auto& d : per_split[s]) any = any || d;
      if (any) out[s] = std::make_unique<BlendedSource>(std::move(per_split[s]), weights, wanted[s]);
    }
  }
  return {std::move(out[0]), std::move(out[1]), std::move(out[2])};
}

}  // namespace trident
