// BERT WordPiece: basic tokenisation (cleaning, CJK, punctuation, lower-casing and accent
// stripping), greedy longest-match-first pieces, [UNK] rules, decode and bad files. The
// vocab is written by the test, so every expected id is checked by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/wordpiece.h"

namespace fs = std::filesystem;
using trident::BertWordPieceTokenizer;
using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

namespace {

// id = line number.
const std::vector<std::string> kVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",                 // 0-4
    "hello", "world", "un", "##want", "##ed",                      // 5-9
    "runn", "##ing", ",", ".", "!",                                // 10-14
    "cafe", "naive", "日", "本", "a",                                // 15-19
    "##b", "Hello", "World", "Café", "$",                          // 20-24
    "5", "i", "fox", "¿", "##s",                                   // 25-29
};

class WordPieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("trident_wordpiece_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream out(dir_ / "vocab.txt", std::ios::binary);
    for (size_t i = 0; i < kVocab.size(); ++i) out << kVocab[i] << (i == 7 ? "\r\n" : "\n");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string vocab_path() { return (dir_ / "vocab.txt").string(); }
  static fs::path dir_;
};
fs::path WordPieceTest::dir_;

}  // namespace

TEST_F(WordPieceTest, SpecialTokensAndSizes) {
  BertWordPieceTokenizer lower(vocab_path(), true);
  EXPECT_EQ(lower.vocab_size(), 30);
  EXPECT_EQ(lower.eod(), 3);  // [SEP]
  EXPECT_EQ(lower.unk_id(), 1);
  EXPECT_EQ(lower.cls_id(), 2);
  EXPECT_EQ(lower.pad_id(), 0);
  EXPECT_EQ(lower.mask_id(), 4);
  EXPECT_EQ(lower.name(), "BertWordPieceLowerCase");
  EXPECT_EQ(BertWordPieceTokenizer(vocab_path(), false).name(), "BertWordPieceCase");
  // "\r\n" line ending on line 7 ("un") is stripped.
  EXPECT_EQ(lower.encode("un"), (Ids{7}));
}

TEST_F(WordPieceTest, LowerCaseStripsAccentsAndSplitsPunctuation) {
  BertWordPieceTokenizer t(vocab_path(), true);
  EXPECT_EQ(t.basic_tokenize("Hello, World!"), (Words{"hello", ",", "world", "!"}));
  EXPECT_EQ(t.encode("Hello, World!"), (Ids{5, 12, 6, 14}));
  EXPECT_EQ(t.basic_tokenize("Café  NAÏVE"), (Words{"cafe", "naive"}));
  EXPECT_EQ(t.encode("Café  NAÏVE"), (Ids{15, 16}));
  EXPECT_EQ(t.encode("cafe\u0301"), (Ids{15}));  // decomposed accent too
  EXPECT_EQ(t.encode("\u0130"), (Ids{26}));      // İ -> i (dot above stripped)
  EXPECT_EQ(t.basic_tokenize("hello...world"), (Words{"hello", ".", ".", ".", "world"}));
  // ASCII symbols count as punctuation although they are S* categories; so does ¿ (Po).
  EXPECT_EQ(t.basic_tokenize("$5 a^b ¿fox"), (Words{"$", "5", "a", "^", "b", "¿", "fox"}));
  EXPECT_EQ(t.encode("$5 ¿fox"), (Ids{24, 25, 28, 27}));
}

// Python's str.lower() gives a capital sigma that ends a word the final form U+03C2, which
// NFD keeps (expected values from Python 3: BERT's lower-casing, NFD, marks dropped).
TEST_F(WordPieceTest, LowerCaseFinalSigmaAsPython) {
  BertWordPieceTokenizer t(vocab_path(), true);
  EXPECT_EQ(t.basic_tokenize("ΟΔΟΣ ΣΑ Σ 1Σ"), (Words{"οδος", "σα", "σ", "1σ"}));
  // Case-ignorable characters are skipped on both sides (full stop, apostrophe, a combining
  // accent, the middle dot); a hyphen is not case-ignorable, so the sigma before it is final.
  EXPECT_EQ(t.basic_tokenize("ΑΣ."), (Words{"ας", "."}));
  EXPECT_EQ(t.basic_tokenize("ΑΣ'Β"), (Words{"ασ", "'", "β"}));
  EXPECT_EQ(t.basic_tokenize("ΑΣ\u0301Β"), (Words{"ασβ"}));
  EXPECT_EQ(t.basic_tokenize("Α.Σ"), (Words{"α", ".", "ς"}));
  EXPECT_EQ(t.basic_tokenize("ΑΣ-Β"), (Words{"ας", "-", "β"}));
  EXPECT_EQ(t.basic_tokenize("ΟΔΟΣ\u00b7"), (Words{"οδος", "\u00b7"}));
}

TEST_F(WordPieceTest, CaseVariantKeepsCaseAndAccents) {
  BertWordPieceTokenizer t(vocab_path(), false);
  EXPECT_EQ(t.encode("Hello World"), (Ids{21, 22}));
  EXPECT_EQ(t.encode("hello HELLO"), (Ids{5, 1}));
  EXPECT_EQ(t.encode("Café cafe"), (Ids{23, 15}));
  EXPECT_EQ(t.basic_tokenize("Naïve"), (Words{"Naïve"}));
}

TEST_F(WordPieceTest, CjkIdeographsAreSplit) {
  BertWordPieceTokenizer t(vocab_path(), true);
  EXPECT_EQ(t.basic_tokenize("日本語abc"), (Words{"日", "本", "語", "abc"}));
  EXPECT_EQ(t.encode("日本語"), (Ids{17, 18, 1}));
  // Hiragana is not in BERT's CJK ranges: it stays one word.
  EXPECT_EQ(BertWordPieceTokenizer(vocab_path(), false).basic_tokenize("ひらがな"),
            (Words{"ひらがな"}));
  // BERT's quirk: accent stripping also drops the kana voicing mark (U+3099 is Mn).
  EXPECT_EQ(t.basic_tokenize("ひらがな"), (Words{"ひらかな"}));
}

TEST_F(WordPieceTest, CleaningDropsControlsAndNormalisesWhitespace) {
  BertWordPieceTokenizer t(vocab_path(), true);
  EXPECT_EQ(t.encode("hel\x07lo"), (Ids{5}));                   // control char
  EXPECT_EQ(t.encode(std::string("hel\0lo", 6)), (Ids{5}));     // NUL
  EXPECT_EQ(t.encode("hel\u200Blo"), (Ids{5}));                 // Cf (zero-width space)
  EXPECT_EQ(t.encode("hel\uFFFDlo"), (Ids{5}));                 // U+FFFD
  EXPECT_EQ(t.encode("hel\xff" "lo"), (Ids{5}));                // invalid UTF-8 = U+FFFD
  EXPECT_EQ(t.encode("hello\tworld\r\nfox\u3000a"), (Ids{5, 6, 27, 19}));
}

TEST_F(WordPieceTest, GreedyLongestMatchWithContinuations) {
  BertWordPieceTokenizer t(vocab_path(), true);
  EXPECT_EQ(t.encode("unwanted running"), (Ids{7, 8, 9, 10, 11}));
  EXPECT_EQ(t.encode("abbb"), (Ids{19, 20, 20, 20}));
  // One unmatched position makes the whole word [UNK], not a partial match.
  EXPECT_EQ(t.encode("unwantedx fox"), (Ids{1, 27}));
  EXPECT_EQ(t.encode("zebra"), (Ids{1}));
}

TEST_F(WordPieceTest, WordsOver100CharsAreUnknown) {
  BertWordPieceTokenizer t(vocab_path(), true);
  const std::string at_limit = "a" + std::string(99, 'b');   // 100 chars
  const std::string over = "a" + std::string(100, 'b');      // 101 chars
  Ids expect(100, 20);
  expect[0] = 19;
  EXPECT_EQ(t.encode(at_limit), expect);
  EXPECT_EQ(t.encode(over), (Ids{1}));
}

TEST_F(WordPieceTest, DecodeGluesContinuations) {
  BertWordPieceTokenizer t(vocab_path(), true);
  EXPECT_EQ(t.decode({7, 8, 9, 12, 5}), "unwanted , hello");
  EXPECT_EQ(t.decode(t.encode("Hello running fox")), "hello running fox");
  EXPECT_THROW(t.decode({30}), trident::Error);
}

TEST_F(WordPieceTest, FactoryAndBadFiles) {
  auto t = trident::make_tokenizer("BertWordPieceLowerCase", vocab_path(), "");
  EXPECT_EQ(t->encode("Hello"), (Ids{5}));
  auto c = trident::make_tokenizer("BertWordPieceCase", vocab_path(), "");
  EXPECT_EQ(c->encode("Hello"), (Ids{21}));

  const std::string missing = (dir_ / "nope.txt").string();
  try {
    BertWordPieceTokenizer bad(missing, true);
    ADD_FAILURE() << "no error for a missing vocab";
  } catch (const trident::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  const std::string no_unk = (dir_ / "no_unk.txt").string();
  std::ofstream(no_unk) << "[PAD]\n[SEP]\nhello\n";
  try {
    BertWordPieceTokenizer bad(no_unk, true);
    ADD_FAILURE() << "no error for a vocab without [UNK]";
  } catch (const trident::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(no_unk), std::string::npos) << e.what();
  }
}
