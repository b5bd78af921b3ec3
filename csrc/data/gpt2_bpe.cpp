#include "data/gpt2_bpe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/unicode_text.h"

namespace trident {

using unicode::RegexClass;

// ---------------------------------------------------------------- pre-tokenisation

namespace {

struct Unit {
  RegexClass cls;
  uint32_t len;
};

// ASCII classes without a utf8proc call (the common case).
constexpr std::array<RegexClass, 128> make_ascii_classes() {
  std::array<RegexClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = RegexClass::kLetter;
    else if (c >= '0' && c <= '9') t[c] = RegexClass::kNumber;
    else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) t[c] = RegexClass::kSpace;
    else t[c] = RegexClass::kOther;
  }
  return t;
}
constexpr std::array<RegexClass, 128> kAsciiClass = make_ascii_classes();

inline Unit unit_at(std::string_view s, size_t pos) {
  const auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) return {kAsciiClass[b], 1};
  const unicode::Decoded d = unicode::decode_utf8(s, pos);
  if (d.cp == unicode::kInvalidCodepoint) return {RegexClass::kOther, 1};
  return {unicode::regex_class(d.cp), d.len};
}

}  // namespace

bool Gpt2PieceScanner::next(std::string_view& piece) {
  const std::string_view s = text_;
  const size_t n = s.size();
  const size_t begin = pos_;
  if (begin >= n) return false;
  size_t end;
  const char b = s[begin];

  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, as in GPT-2).
  if (b == '\'' && begin + 1 < n) {
    const char c1 = s[begin + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
      end = begin + 2;
      goto done;
    }
    if (begin + 2 < n) {
      const char c2 = s[begin + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        end = begin + 3;
        goto done;
      }
    }
  }
  {
    const Unit u0 = unit_at(s, begin);
    size_t p;
    RegexClass run;
    if (b == ' ' && begin + 1 < n && unit_at(s, begin + 1).cls != RegexClass::kSpace) {
      // " ?X+" with the optional space taken.
      const Unit u1 = unit_at(s, begin + 1);
      run = u1.cls;
      p = begin + 1 + u1.len;
    } else if (u0.cls != RegexClass::kSpace) {
      run = u0.cls;
      p = begin + u0.len;
    } else {
      // \s+(?!\S) | \s+ : the whole run when it ends the text or is one character long;
      // otherwise the run minus its last character, which then prefixes the next piece.
      size_t last = begin;
      size_t count = 1;
      p = begin + u0.len;
      while (p < n) {
        const Unit u = unit_at(s, p);
        if (u.cls != RegexClass::kSpace) break;
        last = p;
        p += u.len;
        ++count;
      }
      end = (p < n && count > 1) ? last : p;
      goto done;
    }
    while (p < n) {
      const Unit u = unit_at(s, p);
      if (u.cls != run) break;
      p += u.len;
    }
    end = p;
  }
done:
  pos_ = end;
  piece = s.substr(begin, end - begin);
  return true;
}

// ---------------------------------------------------------------- tables

const std::array<char32_t, 256>& gpt2_byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// Open addressing with linear probing; keys (a << 32 | b) of non-negative ids, so the
// all-ones key marks an empty slot.
struct GPT2BPETokenizer::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit MergeTable(size_t entries) {
    size_t cap = 16;
    while (cap < entries * 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key_of(int32_t a, int32_t b) {
    return uint64_t(uint32_t(a)) << 32 | uint32_t(b);
  }
  static uint64_t hash(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) >> 20; }
  // A pair listed twice keeps its later rank, as GPT-2's dict(zip(merges, range(n))) does.
  void insert(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k || slots[i].key == kEmpty) {
        slots[i] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t k = key_of(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

namespace {
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
}  // namespace

struct GPT2BPETokenizer::WordCache {
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxPerShard = 4096;  // ~256k words in all
  static constexpr size_t kMaxWordBytes = 64;   // longer pieces are not cached
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  std::array<Shard, kShards> shards;
};

// ---------------------------------------------------------------- loading

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(detail::concat("cannot open GPT-2 ", what, " file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Maps a vocab/merges string (byte-unicode characters) back to raw bytes. Characters
// outside the byte alphabet (none in GPT-2's files) are kept as their UTF-8.
std::string unicode_to_bytes(std::string_view s) {
  static const std::unordered_map<char32_t, unsigned char> inverse = [] {
    std::unordered_map<char32_t, unsigned char> m;
    const auto& t = gpt2_byte_to_unicode();
    for (int b = 0; b < 256; ++b) m[t[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    const unicode::Decoded d = unicode::decode_utf8(s, pos);
    auto it = d.cp == unicode::kInvalidCodepoint ? inverse.end() : inverse.find(d.cp);
    if (it != inverse.end()) out.push_back(static_cast<char>(it->second));
    else out.append(s.substr(pos, d.len));
    pos += d.len;
  }
  return out;
}

}  // namespace

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : cache_(std::make_unique<WordCache>()) {
  // Vocab: {"token": id, ...} with ids 0..N-1.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> encoder;
  {
    const std::string text = read_file(vocab_file, "vocab");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw IoError(detail::concat("GPT-2 vocab file ", vocab_file, " is not valid JSON: ", e.what()));
    }
    if (!j.is_object() || j.empty())
      throw IoError(detail::concat("GPT-2 vocab file ", vocab_file, " is not a JSON object of token ids"));
    id_bytes_.assign(j.size(), std::string());
    std::vector<bool> seen(j.size(), false);
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_number_integer())
        throw IoError(detail::concat("GPT-2 vocab file ", vocab_file, ": token ", it.key(),
                                     " has a non-integer id"));
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(j.size()) || seen[id])
        throw IoError(detail::concat("GPT-2 vocab file ", vocab_file, ": id ", id, " of token ",
                                     it.key(), " is out of range or repeated (ids must be 0..",
                                     j.size() - 1, ")"));
      seen[id] = true;
      id_bytes_[id] = unicode_to_bytes(it.key());
      encoder.emplace(it.key(), static_cast<int32_t>(id));
    }
  }
  const auto& b2u = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    unicode::append_utf8(ch, b2u[b]);
    auto it = encoder.find(ch);
    if (it == encoder.end())
      throw IoError(detail::concat("GPT-2 vocab file ", vocab_file, " lacks the token for byte ", b));
    byte_id_[b] = it->second;
  }
  auto eot = encoder.find(std::string_view("<|endoftext|>"));
  if (eot == encoder.end())
    throw IoError(detail::concat("GPT-2 vocab file ", vocab_file, " lacks <|endoftext|>"));
  eod_ = eot->second;

  // Merges: "#version: ..." then one "a b" pair per line, rank = order.
  const std::string text = read_file(merge_file, "merges");
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = nl + 1;
  }
  if (lines.empty() || lines[0].rfind("#version", 0) != 0)
    throw IoError(detail::concat("GPT-2 merges file ", merge_file,
                                 ":1: first line must be the '#version: 0.2' header"));
  merges_ = std::make_unique<MergeTable>(lines.size());
  int32_t rank = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      throw IoError(detail::concat("GPT-2 merges file ", merge_file, ":", i + 1,
                                   ": expected two tokens separated by one space"));
    const std::string_view a = line.substr(0, sp), b = line.substr(sp + 1);
    const std::string ab = std::string(a) + std::string(b);
    auto ia = encoder.find(a), ib = encoder.find(b), iab = encoder.find(std::string_view(ab));
    if (ia == encoder.end() || ib == encoder.end() || iab == encoder.end())
      throw IoError(detail::concat("GPT-2 merges file ", merge_file, ":", i + 1, ": merge '", line,
                                   "' uses or makes a token missing from ", vocab_file));
    merges_->insert(ia->second, ib->second, rank++, iab->second);
  }

  // merges_ordered_: each merge's parts are bytes or results of earlier merges (true of
  // GPT-2's file, and of any file BPE training writes).
  std::vector<int32_t> made_at(id_bytes_.size(), -1);
  for (const MergeTable::Slot& s : merges_->slots)
    if (s.key != MergeTable::kEmpty && (made_at[s.id] < 0 || s.rank < made_at[s.id]))
      made_at[s.id] = s.rank;
  for (int b = 0; b < 256; ++b) made_at[byte_id_[b]] = -1;
  merges_ordered_ = true;
  for (const MergeTable::Slot& s : merges_->slots) {
    if (s.key == MergeTable::kEmpty) continue;
    const auto a = static_cast<int32_t>(s.key >> 32), b = static_cast<int32_t>(s.key & 0xFFFFFFFFu);
    const bool a_ok = made_at[a] < s.rank && (made_at[a] >= 0 || is_byte_token(a));
    const bool b_ok = made_at[b] < s.rank && (made_at[b] >= 0 || is_byte_token(b));
    if (!a_ok || !b_ok) merges_ordered_ = false;
  }
}

bool GPT2BPETokenizer::is_byte_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < id_bytes_.size() && id_bytes_[id].size() == 1 &&
         byte_id_[static_cast<unsigned char>(id_bytes_[id][0])] == id;
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

// ---------------------------------------------------------------- encode / decode

void GPT2BPETokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
  thread_local std::vector<int32_t> ids, ranks;  // scratch; ranks[i] = rank of (ids[i], ids[i+1])
  const MergeTable& mt = *merges_;
  auto rank_of = [&](int32_t a, int32_t b) {
    const MergeTable::Slot* s = mt.find(a, b);
    return s ? s->rank : kNoRank;
  };
  size_t n = piece.size();
  ids.resize(n);
  ranks.resize(n);
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(ids[i], ids[i + 1]);

  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoRank) break;
    const int32_t a = ids[best], b = ids[best + 1];
    const int32_t merged = mt.find(a, b)->id;
    // Merge every (a, b) left to right, compacting in place. A pair between two untouched
    // neighbours keeps its rank; pairs next to a merged token are looked up again.
    // Tokens before `best` cannot start an (a, b) pair: best is the leftmost lowest rank.
    size_t out_n = best;
    size_t prev_old = best > 0 ? best - 1 : SIZE_MAX;  // old index of the last emitted token
                                                       // when it was not merged
    for (size_t i = best; i < n;) {
      int32_t v;
      size_t cur_old;
      if (i + 1 < n && ids[i] == a && ids[i + 1] == b) {
        v = merged;
        cur_old = SIZE_MAX;
        i += 2;
      } else {
        v = ids[i];
        cur_old = i;
        i += 1;
      }
      if (out_n > 0) {
        if (cur_old != SIZE_MAX && prev_old != SIZE_MAX && cur_old == prev_old + 1)
          ranks[out_n - 1] = ranks[prev_old];
        else
          ranks[out_n - 1] = rank_of(ids[out_n - 1], v);
      }
      ids[out_n++] = v;
      prev_old = cur_old;
    }
    n = out_n;
    if (n > 0) ranks[n - 1] = kNoRank;
  }
  out.insert(out.end(), ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n));
}

void GPT2BPETokenizer::bpe_long(std::string_view piece, std::vector<int32_t>& out) const {
  struct Cand {
    int32_t rank, pos, a, b;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const MergeTable& mt = *merges_;
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> ids(n), prev(n), next(n);
  std::vector<Cand> heap;
  auto push = [&](int32_t left) {
    const int32_t right = next[left];
    if (right >= n) return;
    if (const MergeTable::Slot* s = mt.find(ids[left], ids[right])) {
      heap.push_back({s->rank, left, ids[left], ids[right]});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i < n; ++i) {
    ids[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1;  // n marks the end
  }
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Cand c = heap.back();
    heap.pop_back();
    // Stale when either token has changed since the candidate was pushed; removed
    // tokens are marked with id -1.
    const int32_t right = next[c.pos];
    if (ids[c.pos] != c.a || right >= n || ids[right] != c.b) continue;
    ids[c.pos] = mt.find(c.a, c.b)->id;
    ids[right] = -1;
    next[c.pos] = next[right];
    if (next[right] < n) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i < n; i = next[i]) out.push_back(ids[i]);
}

void GPT2BPETokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > WordCache::kMaxWordBytes) {
    if (piece.size() >= kLongPiece && merges_ordered_) bpe_long(piece, out);
    else bpe(piece, out);
    return;
  }
  const size_t h = StringHash{}(piece);
  WordCache::Shard& shard = cache_->shards[(h >> 7) % WordCache::kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  bpe(piece, out);
  std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= WordCache::kMaxPerShard) shard.map.clear();
  shard.map.emplace(std::string(piece), std::move(ids));
}

std::vector<int32_t> GPT2BPETokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  Gpt2PieceScanner scanner(text);
  std::string_view piece;
  while (scanner.next(piece)) encode_piece(piece, out);
  return out;
}

const std::string& GPT2BPETokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size())
    throw Error(detail::concat("GPT-2 token id ", id, " is outside [0, ", id_bytes_.size(), ")"));
  return id_bytes_[id];
}

std::string GPT2BPETokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace trident
