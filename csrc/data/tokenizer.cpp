// make_tokenizer: the --tokenizer-type switch.
#include "data/tokenizer.h"

#include "core/error.h"
#include "data/gpt2_bpe.h"
#include "data/null_tokenizer.h"
#include "data/wordpiece.h"

namespace trident {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& vocab_file,
                                          const std::string& merge_file, int64_t null_vocab_size) {
  if (type == "NullTokenizer") {
    if (null_vocab_size == 0)
      throw ConfigError("--vocab-size is required for NullTokenizer (its ids are 0 to V - 1, V the end of document)");
    return std::make_unique<NullTokenizer>(null_vocab_size);
  }
  if (type == "GPT2BPETokenizer") {
    if (vocab_file.empty()) throw ConfigError("--vocab-file is required for GPT2BPETokenizer");
    if (merge_file.empty()) throw ConfigError("--merge-file is required for GPT2BPETokenizer");
    return std::make_unique<GPT2BPETokenizer>(vocab_file, merge_file);
  }
  if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    if (vocab_file.empty()) throw ConfigError(detail::concat("--vocab-file is required for ", type));
    return std::make_unique<BertWordPieceTokenizer>(vocab_file, type == "BertWordPieceLowerCase");
  }
  throw ConfigError(detail::concat("unknown --tokenizer-type ", type,
                                   " (expected GPT2BPETokenizer, BertWordPieceLowerCase, "
                                   "BertWordPieceCase or NullTokenizer)"));
}

}  // namespace trident
