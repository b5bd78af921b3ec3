#include "data/null_tokenizer.h"

#include <charconv>
#include <limits>

#include "core/error.h"

namespace trident {

NullTokenizer::NullTokenizer(int64_t vocab_size_without_eod) {
  // The end of document is an id too: V itself must fit an int32 token.
  if (vocab_size_without_eod < 1 || vocab_size_without_eod > std::numeric_limits<int32_t>::max())
    throw ConfigError(detail::concat("--vocab-size ", vocab_size_without_eod, ": NullTokenizer's ids are 0 to ",
                                     "--vocab-size (its end of document), which must be 1 to ",
                                     std::numeric_limits<int32_t>::max()));
  eod_ = static_cast<int32_t>(vocab_size_without_eod);
}

namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
}  // namespace

std::vector<int32_t> NullTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !is_space(text[end])) ++end;
    const std::string_view word = text.substr(i, end - i);
    int64_t id = -1;
    const auto [stop, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || stop != word.data() + word.size() || id < 0 || id > eod_)
      throw TokenizeError(detail::concat("NullTokenizer: \"", word.substr(0, 40), word.size() > 40 ? "..." : "",
                                         "\" is not a token id in [0, ", eod_, "] (--vocab-size ", eod_,
                                         "; its end of document is ", eod_, ")"));
    ids.push_back(static_cast<int32_t>(id));
    i = end;
  }
  return ids;
}

std::string NullTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k > 0) out += ' ';
    out += std::to_string(ids[k]);
  }
  return out;
}

}  // namespace trident
