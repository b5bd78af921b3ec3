// GPT-2 byte-level BPE: hand-checked ids, pre-tokenisation pieces, the invalid-UTF-8 rule,
// round trips, bad files, thread safety, and agreement with an independent Python
// reference (tokenizer_reference.py) on random Unicode strings.
#include <gtest/gtest.h>

#include <ctime>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "data/gpt2_bpe.h"
#include "data/tokenizer.h"
#include "data/unicode_text.h"

namespace fs = std::filesystem;
using trident::GPT2BPETokenizer;
using Ids = std::vector<int32_t>;

namespace {

const std::string kGpt2Dir = TRIDENT_SHARED_GPT2_DIR;
const std::string kVocab = kGpt2Dir + "/gpt2-vocab.json";
const std::string kMerges = kGpt2Dir + "/gpt2-merges.txt";

const GPT2BPETokenizer& tok() {
  static const GPT2BPETokenizer t(kVocab, kMerges);
  return t;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  trident::Gpt2PieceScanner scanner(text);
  std::string_view p;
  while (scanner.next(p)) out.emplace_back(p);
  return out;
}

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("trident_gpt2_test_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream(p, std::ios::binary) << content;
}

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string utf8(char32_t cp) {
  std::string s;
  trident::unicode::append_utf8(s, cp);
  return s;
}

// Random text built from fragments that exercise every branch of the pattern.
class TextGen {
 public:
  explicit TextGen(uint32_t seed) : rng_(seed) {}

  std::string text(bool allow_invalid) {
    std::string s;
    const int n = pick(0, 24);
    for (int i = 0; i < n; ++i) s += fragment(allow_invalid);
    if (pick(0, 60) == 0) s += std::string(pick(100, 1500), "ab=-x"[pick(0, 4)]);  // long runs
    return s;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  char32_t any_of(std::initializer_list<char32_t> cps) { return cps.begin()[pick(0, int(cps.size()) - 1)]; }

  char32_t random_assigned() {
    for (;;) {
      // Mostly the BMP, sometimes the supplementary planes (emoji, CJK extensions ...).
      char32_t cp = pick(0, 3) ? char32_t(pick(0x80, 0xFFFF)) : char32_t(pick(0x10000, 0x3FFFF));
      if ((cp >= 0xD800 && cp <= 0xDFFF) || !trident::unicode::is_assigned(cp)) continue;
      return cp;
    }
  }

  std::string word(int len, char32_t lo, char32_t hi) {
    std::string s;
    for (int i = 0; i < len; ++i) s += utf8(char32_t(pick(int(lo), int(hi))));
    return s;
  }

  std::string fragment(bool allow_invalid) {
    switch (pick(0, allow_invalid ? 15 : 13)) {
      case 0: case 1: return word(pick(1, 8), 'a', 'z');
      case 2: return word(pick(1, 6), 'A', 'Z');
      case 3: return std::string(pick(1, 4), " \n\t\r "[pick(0, 4)]);
      case 4: return word(pick(1, 5), '0', '9');
      case 5: {
        static const char* tails[] = {"s", "t", "re", "ve", "m", "ll", "d", "x", "S", "", "r", "l"};
        return "'" + std::string(tails[pick(0, 11)]);
      }
      case 6: return std::string(1, "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'"[pick(0, 31)]);
      case 7: return word(pick(1, 4), 0xC0, 0x24F);    // Latin with accents
      case 8: return word(pick(1, 4), 0x4E00, 0x9FFF);  // CJK
      case 9:  // combining marks after a letter, emoji with modifiers and ZWJ
        return pick(0, 1) ? "e" + utf8(0x301) + utf8(char32_t(pick(0x300, 0x36F)))
                          : utf8(char32_t(pick(0x1F600, 0x1F64F))) + utf8(0x1F3FB) +
                                utf8(0x200D) + utf8(0x2764);
      case 10:  // Unicode spaces and look-alikes (U+200B, U+180E, U+FEFF are not \s)
        return utf8(any_of({0xA0, 0x1680, 0x2000, 0x2005, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F,
                            0x3000, 0x85, 0x0B, 0x0C, 0x1C, 0x1F, 0x200B, 0x180E, 0xFEFF}));
      case 11:  // other numbers: Arabic-Indic digits, superscripts, fractions, Roman numerals
        return utf8(any_of({0x660, 0x669, 0xB2, 0xBD, 0x2160, 0x216B, 0x2460, 0xFF11}));
      case 12: case 13: return utf8(random_assigned());
      case 14: {  // invalid UTF-8: stray bytes, truncated, overlong, encoded surrogate
        static const char* bad[] = {"\xff", "\x80", "\xc3", "\xe2\x82", "\xc0\x80", "\xed\xa0\x80",
                                    "\xf4\x90\x80\x80", "\xf0\x9f\x98"};
        return bad[pick(0, 7)];
      }
      default: return std::string(1, char(pick(0x80, 0xFF)));
    }
  }

  std::mt19937 rng_;
};

}  // namespace

TEST(Gpt2Bpe, LoadsGpt2Files) {
  EXPECT_EQ(tok().vocab_size(), 50257);
  EXPECT_EQ(tok().eod(), 50256);
  EXPECT_EQ(tok().name(), "GPT2BPETokenizer");
  EXPECT_EQ(tok().token_bytes(50256), "<|endoftext|>");
  EXPECT_EQ(tok().token_bytes(220), " ");  // "Ġ" stands for the space byte
}

TEST(Gpt2Bpe, HandCheckedIds) {
  EXPECT_EQ(tok().encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok().encode(" the cat sat on the mat"), (Ids{262, 3797, 3332, 319, 262, 2603}));
  EXPECT_EQ(tok().encode(""), Ids{});
  // The tokens carry their spaces: their texts joined with no separator are the decode.
  EXPECT_STREQ(tok().token_separator(), "");
  EXPECT_EQ(tok().decode({262}) + tok().decode({3797}), tok().decode({262, 3797}));
}

// Like GPT-2's encoder.encode(), plain text never yields the special token.
TEST(Gpt2Bpe, EndOfTextIsPlainText) {
  EXPECT_EQ(tok().encode("<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(tok().decode({50256}), "<|endoftext|>");
}

TEST(Gpt2Bpe, PiecesFollowThePattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("I'm they'll it's"), (V{"I", "'m", " they", "'ll", " it", "'s"}));
  EXPECT_EQ(pieces("we're I've he'd don't"), (V{"we", "'re", " I", "'ve", " he", "'d", " don", "'t"}));
  EXPECT_EQ(pieces("'sup ''s 's"), (V{"'s", "up", " ''", "s", " '", "s"}));  // `'` + `'` is a run
  EXPECT_EQ(pieces("I'M"), (V{"I", "'", "M"}));  // contractions are case-sensitive
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a\n\n b"), (V{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces("a\nb"), (V{"a", "\n", "b"}));
  EXPECT_EQ(pieces("end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces("   x"), (V{"  ", " x"}));
  EXPECT_EQ(pieces("abc123 45 6.7"), (V{"abc", "123", " 45", " 6", ".", "7"}));
  EXPECT_EQ(pieces("Hi!!! ...ok"), (V{"Hi", "!!!", " ...", "ok"}));
  // Ideographic space is \s but only ASCII space prefixes a word.
  EXPECT_EQ(pieces("a\u3000\u3000b"), (V{"a", "\u3000", "\u3000", "b"}));
  // U+001C is not White_Space (str.isspace() would say yes): " \x1c" is one "other" piece.
  EXPECT_EQ(pieces("a \x1c" "b"), (V{"a", " \x1c", "b"}));
  // Combining marks are "other": a decomposed é splits.
  EXPECT_EQ(pieces("caf" "e\u0301!"), (V{"cafe", "\u0301!"}));
  EXPECT_EQ(pieces("日本語 テスト"), (V{"日本語", " テスト"}));
  EXPECT_EQ(pieces("x \U0001F600\U0001F600y"), (V{"x", " \U0001F600\U0001F600", "y"}));
}

TEST(Gpt2Bpe, InvalidUtf8BytesAreOtherAndRoundTrip) {
  // Each invalid byte is one "other" character carried through as its own byte.
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a\xff" "b"), (V{"a", "\xff", "b"}));
  EXPECT_EQ(pieces("ab\xe2\x82z"), (V{"ab", "\xe2\x82", "z"}));  // truncated € does not eat z
  EXPECT_EQ(pieces(" \xc3(x"), (V{" \xc3(", "x"}));
  // Checked with tokenizer_reference.py (surrogateescape decoding).
  const std::string bad = "ab\xff\xc3(";
  EXPECT_EQ(tok().encode(bad), (Ids{397, 187, 127, 7}));
  EXPECT_EQ(tok().decode(tok().encode(bad)), bad);
}

TEST(Gpt2Bpe, RoundTripRandomText) {
  TextGen gen(1234);
  for (int i = 0; i < 3000; ++i) {
    const std::string s = gen.text(/*allow_invalid=*/i % 2 == 1);
    ASSERT_EQ(tok().decode(tok().encode(s)), s) << "case " << i << " hex " << hex(s);
  }
  std::mt19937 rng(7);  // arbitrary bytes too
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = char(rng());
    ASSERT_EQ(tok().decode(tok().encode(s)), s) << "bytes case " << i;
  }
}

TEST(Gpt2Bpe, DecodeRejectsOutOfRangeIds) {
  EXPECT_THROW(tok().decode({50257}), trident::Error);
  EXPECT_THROW(tok().decode({-1}), trident::Error);
}

TEST(Gpt2Bpe, ConcurrentEncodeMatchesSerial) {
  TextGen gen(99);
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) texts.push_back(gen.text(true));
  std::vector<Ids> expect;
  for (auto& t : texts) expect.push_back(tok().encode(t));
  GPT2BPETokenizer fresh(kVocab, kMerges);  // cold cache, filled concurrently
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (fresh.encode(texts[(i + t * 97) % texts.size()]) != expect[(i + t * 97) % texts.size()])
            ++mismatches[t];
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// The independent reference: same ids on random strings (valid and invalid UTF-8).
TEST(Gpt2Bpe, MatchesPythonReference) {
  if (std::system("python3 -c 'import json, unicodedata' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 not found; reference comparison skipped";
  const std::string script = std::string(TRIDENT_SOURCE_DIR) + "/tests/unit/data/tokenizer_reference.py";
  TextGen gen(20240601);
  std::vector<std::string> texts = {"Hello world", " the cat sat on the mat", "<|endoftext|>",
                                    "I'm they'll it's", "a  b", "a\n\n b", "trailing   ",
                                    "x = 12345678901234567890", "naïve café", "ﬁ ǅ Ⅻ ½ ²",
                                    std::string(3000, 'a')};
  for (int i = 0; i < 2500; ++i) texts.push_back(gen.text(/*allow_invalid=*/i % 4 == 3));
  // Long single pieces (the priority-queue BPE path): random letters, digits, symbols.
  std::mt19937 rng(5);
  for (const char* alphabet : {"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "etaoinshrdlu",
                               "0123456789", "=-_*#~.!?", "ab"})
    for (int len : {255, 256, 300, 1000}) {
      std::string s(len, ' ');
      const size_t k = std::strlen(alphabet);
      for (char& ch : s) ch = alphabet[rng() % k];
      texts.push_back(s);
      texts.push_back(" " + s);
    }
  const fs::path dir = temp_dir();
  std::string cases;
  for (auto& t : texts) cases += hex(t) + "\n";
  write_file(dir / "cases.hex", cases);
  const std::string cmd = "python3 '" + script + "' '" + kVocab + "' '" + kMerges + "' '" +
                          (dir / "cases.hex").string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, got);
  ASSERT_EQ(pclose(pipe), 0) << "reference script failed: " << cmd;
  std::istringstream lines(output);
  std::string line;
  size_t i = 0, skipped = 0;
  for (; std::getline(lines, line) && i < texts.size(); ++i) {
    if (line == "SKIP") {
      ++skipped;
      continue;
    }
    Ids want;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) want.push_back(id);
    ASSERT_EQ(tok().encode(texts[i]), want) << "case " << i << " hex " << hex(texts[i]);
  }
  EXPECT_EQ(i, texts.size()) << "reference printed too few lines";
  EXPECT_LT(skipped, texts.size() / 20) << "too many cases skipped for Unicode-version reasons";
  std::printf("[ reference ] %zu strings compared, %zu skipped (code points newer than Python's "
              "Unicode database)\n", texts.size() - skipped, skipped);
  fs::remove_all(dir);
}

TEST(Gpt2Bpe, BadFilesNameTheFile) {
  const fs::path dir = temp_dir();
  auto expect_io_error = [](const std::string& vocab, const std::string& merges,
                            const std::string& must_mention) {
    try {
      GPT2BPETokenizer t(vocab, merges);
      ADD_FAILURE() << "no error for " << vocab << " / " << merges;
    } catch (const trident::IoError& e) {
      EXPECT_NE(std::string(e.what()).find(must_mention), std::string::npos) << e.what();
    }
  };
  expect_io_error((dir / "missing.json").string(), kMerges, (dir / "missing.json").string());
  write_file(dir / "notjson.json", "{\"a\": 0,, oops");
  expect_io_error((dir / "notjson.json").string(), kMerges, (dir / "notjson.json").string());
  write_file(dir / "array.json", "[1, 2]");
  expect_io_error((dir / "array.json").string(), kMerges, (dir / "array.json").string());
  write_file(dir / "noversion.txt", "\xc4\xa0 t\n\xc4\xa0 a\n");
  expect_io_error(kVocab, (dir / "noversion.txt").string(), (dir / "noversion.txt").string() + ":1");
  write_file(dir / "badline.txt", "#version: 0.2\n\xc4\xa0 t\nthree parts here\n");
  expect_io_error(kVocab, (dir / "badline.txt").string(), (dir / "badline.txt").string() + ":3");
  expect_io_error(kVocab, (dir / "missing.txt").string(), (dir / "missing.txt").string());
  fs::remove_all(dir);
}

TEST(Gpt2Bpe, FactoryBuildsAndRejects) {
  auto t = trident::make_tokenizer("GPT2BPETokenizer", kVocab, kMerges);
  EXPECT_EQ(t->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_THROW(trident::make_tokenizer("SentencePiece", kVocab, kMerges), trident::ConfigError);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Not a pass/fail check: prints single-thread encode speed on the English fortune files.
TEST(Gpt2Bpe, EncodeThroughput) {
  std::string text;
  const fs::path fortunes = "/usr/share/games/fortunes";
  if (fs::is_directory(fortunes))
    for (auto& e : fs::directory_iterator(fortunes))
      if (e.is_regular_file() && e.path().extension().empty() && e.path().filename() != "chinese") {
        std::ifstream in(e.path(), std::ios::binary);
        text += std::string(std::istreambuf_iterator<char>(in), {});
      }
  if (text.size() < (1u << 20)) GTEST_SKIP() << "no fortune files to measure on";
  GPT2BPETokenizer cold(kVocab, kMerges);
  for (int round = 0; round < 2; ++round) {
    const double t0 = thread_cpu_seconds();  // CPU time: other jobs may share the cores
    const Ids ids = cold.encode(text);
    const double s = thread_cpu_seconds() - t0;
    std::printf("[ throughput ] %s cache: %.1f MB in %.3f s CPU = %.1f MB/s, %zu tokens\n",
                round ? "warm" : "cold", text.size() / 1e6, s, text.size() / 1e6 / s, ids.size());
    EXPECT_EQ(cold.decode(ids), text);
  }
}
