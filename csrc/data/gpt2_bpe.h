// GPT-2 byte-level BPE (--tokenizer-type GPT2BPETokenizer), the same ids as OpenAI's
// encoder.py / Megatron's GPT2Tokenizer for valid UTF-8 text.
//
// encode(text):
//  1. Pre-tokenisation: the pieces GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     finds with findall(), by a hand-written scanner (Gpt2PieceScanner). \p{L}, \p{N} are
//     the L* and N* general categories; \s is the Unicode White_Space property (what the
//     Python `regex` module means by \s; see unicode::is_white_space). Categories come
//     from utf8proc, so characters assigned after its Unicode version count as "other".
//  2. Each piece's UTF-8 bytes become byte tokens (GPT-2's byte-to-unicode table decides
//     which vocab entry a byte is); then the adjacent pair with the lowest merge rank is
//     merged (all its occurrences, left to right) until no pair has a rank.
//  "<|endoftext|>" inside text is NOT special: like GPT-2's encode() it becomes plain
//  pieces ("<|", "endoftext", "|>"). Append eod() yourself (--append-eod).
//
// Invalid UTF-8 (a byte that does not start a valid, shortest-form, non-surrogate sequence,
// see unicode::decode_utf8): each such byte is one character of class "other" (as U+FFFD
// or Python's surrogateescape would be), so it joins a run of punctuation-like characters,
// and its original byte goes through the byte encoder unchanged. Hence encode never fails,
// is deterministic, and decode(encode(s)) == s for every byte string s. This equals
// GPT-2's encoder applied to s.decode("utf-8", "surrogateescape") with the tokens turned
// back into bytes by .encode("utf-8", "surrogateescape").
//
// Thread safety: encode/decode are const; the cache of word encodings is split into
// shards, each behind its own mutex and cleared when full, so memory stays bounded.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace trident {

// Yields the byte ranges of GPT-2's pre-tokenisation pieces, in order, covering the text.
class Gpt2PieceScanner {
 public:
  explicit Gpt2PieceScanner(std::string_view text) : text_(text) {}
  // Sets the next piece and returns true, or returns false at the end.
  bool next(std::string_view& piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// GPT-2's byte-to-unicode table: the code point that stands for each byte in the vocab and
// merges files. Printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves; the other 68 bytes, in increasing order, take U+0100, U+0101, ...
const std::array<char32_t, 256>& gpt2_byte_to_unicode();

class GPT2BPETokenizer final : public Tokenizer {
 public:
  // Throws IoError naming the file (and line for merges) when a file is missing or bad.
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~GPT2BPETokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Concatenates the tokens' bytes (may split a UTF-8 character across ids; the bytes
  // are exact). Throws Error on an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_bytes_.size()); }
  int32_t eod() const override { return eod_; }
  std::string name() const override { return "GPT2BPETokenizer"; }

  // The raw bytes a token id stands for.
  const std::string& token_bytes(int32_t id) const;

 private:
  struct MergeTable;  // flat hash map (id_a, id_b) -> (rank, merged id)
  struct WordCache;   // sharded, bounded cache piece bytes -> ids

  bool is_byte_token(int32_t id) const;

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // GPT-2's loop: find the lowest-rank pair, merge all its occurrences left to right.
  // O(length x merges applied); used for pieces up to kLongPiece bytes.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // The same result in O(n log n) for long pieces (a priority queue of pairs, one merge at
  // a time, lowest rank then leftmost first). Equal to bpe() when every merge only uses
  // tokens made by earlier merges, which the constructor checks (merges_ordered_).
  void bpe_long(std::string_view piece, std::vector<int32_t>& out) const;
  static constexpr size_t kLongPiece = 256;

  std::vector<std::string> id_bytes_;    // id -> raw bytes
  std::array<int32_t, 256> byte_id_{};   // byte -> id of its single-byte token
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<WordCache> cache_;
  int32_t eod_ = -1;
  bool merges_ordered_ = false;
};

}  // namespace trident
