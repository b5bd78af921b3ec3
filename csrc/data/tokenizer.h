// Tokenizer interface shared by GPT-2 byte-level BPE and BERT WordPiece.
// encode() is const and thread-safe, so preprocessing workers can share one instance.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace trident {

// A text the tokenizer cannot encode (NullTokenizer: a word that is not a token id); the
// preprocessor reports its line as invalid.
class TokenizeError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // unpadded (GPT-2: 50257)
  virtual int32_t eod() const = 0;         // GPT-2: <|endoftext|> = 50256; BERT: [SEP]
  virtual std::string name() const = 0;    // the --tokenizer-type value
  // What decode() puts between two tokens' own texts (decode({id})), for joining them one by
  // one as generation does: nothing for GPT-2's byte-level BPE, whose tokens carry their
  // spaces; a space for NullTokenizer. (WordPiece's decode is no such join.)
  virtual const char* token_separator() const { return ""; }
};

// type: GPT2BPETokenizer (vocab_file = gpt2-vocab.json, merge_file = gpt2-merges.txt),
// BertWordPieceLowerCase or BertWordPieceCase (vocab_file = vocab.txt), or NullTokenizer
// (null_vocab_size = --vocab-size, ids 0 .. V - 1 and V the end of document; 0: not given,
// an error). Throws IoError naming the file when it is missing or malformed, ConfigError for
// an unknown type.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& vocab_file,
                                          const std::string& merge_file, int64_t null_vocab_size = 0);

}  // namespace trident
