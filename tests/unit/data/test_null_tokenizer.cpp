// Megatron's NullTokenizer: texts of token ids, V + 1 ids (V the end of document); any
// whitespace separates ids; words that are not ids in [0, V] are errors naming them; the
// --tokenizer-type switch needs --vocab-size for it; the separator between tokens' texts. And through preprocess_jsonl: the
// documents written are the ids (and the end of document), a line with a bad id is
// reported by file:line, or skipped with --skip-invalid and nothing of it written.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/null_tokenizer.h"
#include "data/preprocess.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::ScratchDir;
using testing::write_file;

TEST(NullTokenizer, IdsInIdsOut) {
  const NullTokenizer t(1000);
  EXPECT_EQ(t.vocab_size(), 1001);
  EXPECT_EQ(t.eod(), 1000);
  EXPECT_EQ(t.name(), "NullTokenizer");
  EXPECT_EQ(t.encode("17 4 9"), (std::vector<int32_t>{17, 4, 9}));
  EXPECT_EQ(t.encode("  0\t999\n1000  "), (std::vector<int32_t>{0, 999, 1000}));
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_TRUE(t.encode(" \n ").empty());
  EXPECT_EQ(t.decode({17, 4, 9}), "17 4 9");
  EXPECT_EQ(t.decode({}), "");
  // Generation joins the tokens' own texts with the separator: the whole sequence's decode.
  EXPECT_EQ(t.decode({17}) + t.token_separator() + t.decode({4}) + t.token_separator() + t.decode({9}), "17 4 9");
  for (const char* bad : {"1001", "-1", "12a", "1.5", "x", "99999999999999999999"}) {
    try {
      t.encode(std::string("3 ") + bad + " 4");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const TokenizeError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("NullTokenizer: \"") + bad + "\" is not a token id in [0, 1000] (--vocab-size 1000; its end "
                                                         "of document is 1000)");
    }
  }
}

TEST(NullTokenizer, MadeByTheSwitchWithAVocabularySize) {
  EXPECT_EQ(make_tokenizer("NullTokenizer", "", "", 50)->vocab_size(), 51);
  try {
    make_tokenizer("NullTokenizer", "", "");
    ADD_FAILURE() << "no --vocab-size";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-size is required for NullTokenizer"), std::string::npos);
  }
  EXPECT_THROW(NullTokenizer(0), ConfigError);
  EXPECT_THROW(NullTokenizer(int64_t{1} << 31), ConfigError);
}

TEST(NullTokenizer, PreprocessWritesTheIdsAndNamesABadLine) {
  ScratchDir dir;
  // Line 4's first item is encoded before its second fails: nothing of the line may stay.
  write_file(dir / "ids.jsonl", "{\"text\": \"5 6 7\"}\n{\"text\": \"\"}\n{\"text\": [\"1 2\", \"3\"]}\n"
                                "{\"text\": [\"11 12\", \"8 70000 9\"]}\n{\"text\": \"10\"}\n");
  PreprocessOptions o;
  o.input = dir / "ids.jsonl";
  o.output_prefix = dir / "out";
  o.log = nullptr;
  o.append_eod = true;
  const NullTokenizer t(100);
  try {
    preprocess_jsonl(o, t);
    ADD_FAILURE() << "a token past the vocabulary was accepted";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), dir / "ids.jsonl:4: NullTokenizer: \"70000\" is not a token id in [0, 100] "
                                           "(--vocab-size 100; its end of document is 100)");
  }
  EXPECT_EQ(dir.files(), (std::set<std::string>{"ids.jsonl"}));
  o.skip_invalid = true;
  const auto st = preprocess_jsonl(o, t);
  EXPECT_EQ(st.invalid, 1u);
  IndexedDataset d(st.output_prefixes[0]);
  std::vector<std::vector<int32_t>> items;
  for (uint64_t i = 0; i < d.size(); ++i) {
    auto item = d.item(i);
    items.emplace_back(item.begin(), item.end());
  }
  // The empty text writes no document; the list is one document of two items.
  EXPECT_EQ(items, (std::vector<std::vector<int32_t>>{{5, 6, 7, 100}, {1, 2}, {3, 100}, {10, 100}}));
  EXPECT_EQ(d.doc_idx().size(), 4u);  // 3 documents
}

}  // namespace
}  // namespace trident
