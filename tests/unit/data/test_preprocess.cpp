// preprocess_jsonl end to end with a byte-level stub tokenizer: outputs compared token by
// token with the documents written directly; order kept with several workers; several
// --json-keys; --append-eod; empty documents skipped; lists of sentences (bytes written out
// by hand); .xz input; every bad-input error names file:line and leaves no outputs;
// --skip-invalid counts. Python's number forms (NaN, Infinity, huge numbers) outside the text
// are read as Megatron's json.loads reads them. A repeated JSON key takes its last value; a repeated --json-keys
// entry is refused; the keys' outputs appear together or not at all; stale temporary files
// of dead runs go; an interrupt leaves nothing. The CLI is run with the real GPT-2 files
// when both are present (signals included).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/process_id.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::ByteTokenizer;
using testing::ScratchDir;
using testing::write_file;

std::vector<int32_t> bytes_of(const std::string& s, int32_t base = 0) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(base + c);
  return v;
}

// Reads every document of a dataset as one token list (items of a document concatenated).
std::vector<std::vector<int32_t>> documents_of(const std::string& prefix) {
  IndexedDataset d(prefix);
  std::vector<std::vector<int32_t>> out;
  for (uint64_t k = 0; k + 1 < d.doc_idx().size(); ++k) {
    std::vector<int32_t> doc;
    for (int64_t i = d.doc_idx()[k]; i < d.doc_idx()[k + 1]; ++i) {
      auto item = d.item(static_cast<uint64_t>(i));
      doc.insert(doc.end(), item.begin(), item.end());
    }
    out.push_back(doc);
  }
  return out;
}

PreprocessOptions options(const ScratchDir& dir, const std::string& input) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = dir / "out";
  o.log = nullptr;
  return o;
}

// Random texts with JSON escapes and multi-byte UTF-8 mixed in; every text non-empty.
std::vector<std::string> corpus(int n, uint32_t seed) {
  std::mt19937 g(seed);
  const char* pieces[] = {"a", "b c", " ", "\u00e9", "\u4e2d\u6587", "x\ny", "q\"t", "s\\l", "\t", "42"};
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string t = "#";
    t.append(std::to_string(i)).append(":");
    for (int k = static_cast<int>(g() % 30); k > 0; --k) t += pieces[g() % 10];
    out.push_back(t);
  }
  return out;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else o += c;
  }
  return o;
}

TEST(Preprocess, OrderKeptWithSeveralWorkers) {
  ScratchDir dir;
  const auto texts = corpus(500, 7);
  std::string jsonl;
  for (size_t i = 0; i < texts.size(); ++i)
    jsonl += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + json_escape(texts[i]) + "\"}\n";
  write_file(dir / "in.jsonl", jsonl);
  for (int workers : {1, 4}) {
    auto o = options(dir, dir / "in.jsonl");
    o.workers = workers;
    o.batch_lines = 7;  // many batches, so workers finish out of order
    o.output_prefix = dir / ("w" + std::to_string(workers));
    ByteTokenizer tok;
    const auto st = preprocess_jsonl(o, tok);
    EXPECT_EQ(st.documents, 500u);
    EXPECT_EQ(st.lines, 500u);
    ASSERT_EQ(st.output_prefixes, (std::vector<std::string>{dir / ("w" + std::to_string(workers) + "_text_document")}));
    const auto docs = documents_of(st.output_prefixes[0]);
    ASSERT_EQ(docs.size(), 500u);
    uint64_t tokens = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(docs[i], bytes_of(texts[i])) << "document " << i;
      tokens += texts[i].size();
    }
    EXPECT_EQ(st.tokens[0], tokens);
    IndexedDataset d(st.output_prefixes[0]);
    EXPECT_EQ(d.dtype(), IndexDType::kUInt16);  // vocab 257 < 65500
  }
  EXPECT_EQ(testing::read_file(dir / "w1_text_document.bin"), testing::read_file(dir / "w4_text_document.bin"));
  EXPECT_EQ(testing::read_file(dir / "w1_text_document.idx"), testing::read_file(dir / "w4_text_document.idx"));
}

TEST(Preprocess, KeysEodEmptyDocsAndXz) {
  ScratchDir dir;
  // title is empty on line 2, text empty on line 3; line 4 is blank (ignored).
  const std::string jsonl =
      "{\"text\": \"hello\", \"title\": \"T1\"}\n"
      "{\"title\": \"\", \"text\": \"world\"}\n"
      "{\"text\": \"\", \"title\": \"T3\", \"extra\": [1, {\"a\": null}]}\n"
      "\n"
      "{\"text\": \"\\u00e9\\n\", \"title\": \"T5\"}";
  write_file(dir / "in.jsonl", jsonl);
  ASSERT_EQ(std::system(("xz -k -T1 '" + dir / "in.jsonl" + "'").c_str()), 0);
  for (const std::string input : {"in.jsonl", "in.jsonl.xz"}) {
    auto o = options(dir, dir / input);
    o.output_prefix = dir / ("o_" + input);
    o.json_keys = {"text", "title"};
    o.append_eod = true;
    o.workers = 2;
    ByteTokenizer tok(70000);  // vocab 70257: int32 output
    const auto st = preprocess_jsonl(o, tok);
    EXPECT_EQ(st.lines, 5u);
    EXPECT_EQ(st.documents, 4u);
    EXPECT_EQ(st.written, (std::vector<uint64_t>{3, 3}));
    EXPECT_EQ(st.empty, (std::vector<uint64_t>{1, 1}));
    const int32_t eod = 70256;
    auto with_eod = [&](const std::string& s) {
      auto v = bytes_of(s, 70000);
      v.push_back(eod);
      return v;
    };
    EXPECT_EQ(documents_of(st.output_prefixes[0]),
              (std::vector<std::vector<int32_t>>{with_eod("hello"), with_eod("world"), with_eod("\u00e9\n")}));
    EXPECT_EQ(documents_of(st.output_prefixes[1]),
              (std::vector<std::vector<int32_t>>{with_eod("T1"), with_eod("T3"), with_eod("T5")}));
    EXPECT_EQ(st.output_prefixes[1], dir / ("o_" + input + "_title_document"));
    IndexedDataset d(st.output_prefixes[0]);
    EXPECT_EQ(d.dtype(), IndexDType::kInt32);
    EXPECT_EQ(d.size(), 3u);  // one item per document
  }
}

// Megatron's Encoder.encode on a list of sentences (what --split-sentences writes): one
// document, one item per sentence that tokenizes to something, the eod on the last item
// only; a document without such sentences is skipped. The bytes are written out by hand.
TEST(Preprocess, ListOfSentencesIsOneDocumentOfItems) {
  ScratchDir dir;
  write_file(dir / "in.jsonl",
             "{\"text\": [\"ab\", \"\", \"c\"]}\n"  // items "ab", "c" (the empty sentence is dropped)
             "{\"text\": []}\n"                // no sentences: skipped
             "{\"text\": \"de\"}\n"              // a string: one item
             "{\"text\": [\"\", \"\"]}\n"          // only empty sentences: skipped
             "{\"text\": [\"f\"]}\n");
  auto u16 = [](std::initializer_list<uint16_t> v) {
    std::string b;
    for (uint16_t x : v) b.append(reinterpret_cast<const char*>(&x), 2);
    return b;
  };
  auto le = [](auto v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); };
  // The .idx of items with `sizes` (uint16 tokens) in documents starting at doc_idx.
  auto idx = [&](std::initializer_list<int32_t> sizes, std::initializer_list<int64_t> doc_idx) {
    std::string b("MMIDIDX\0\0", 9);
    b += le(uint64_t{1}) + le(uint8_t{8}) + le(uint64_t{sizes.size()}) + le(uint64_t{doc_idx.size()});
    for (int32_t n : sizes) b += le(n);
    int64_t ptr = 0;
    for (int32_t n : sizes) {
      b += le(ptr);
      ptr += 2 * n;
    }
    for (int64_t d : doc_idx) b += le(d);
    return b;
  };
  const uint16_t a = 'a', b = 'b', c = 'c', d = 'd', e = 'e', f = 'f', eod = 256;
  for (const bool append_eod : {true, false}) {
    auto o = options(dir, dir / "in.jsonl");
    o.append_eod = append_eod;
    o.output_prefix = dir / (append_eod ? "eod" : "plain");
    o.workers = 2;
    o.batch_lines = 2;
    ByteTokenizer tok;
    const auto st = preprocess_jsonl(o, tok);
    EXPECT_EQ(st.documents, 5u);
    EXPECT_EQ(st.written, (std::vector<uint64_t>{3}));
    EXPECT_EQ(st.empty, (std::vector<uint64_t>{2}));
    const std::string out = st.output_prefixes[0];
    if (append_eod) {
      EXPECT_EQ(st.tokens, (std::vector<uint64_t>{9}));
      EXPECT_EQ(testing::read_file(out + ".bin"), u16({a, b, c, eod, d, e, eod, f, eod}));
      EXPECT_EQ(testing::read_file(out + ".idx"), idx({2, 2, 3, 2}, {0, 2, 3, 4}));
    } else {
      EXPECT_EQ(st.tokens, (std::vector<uint64_t>{6}));
      EXPECT_EQ(testing::read_file(out + ".bin"), u16({a, b, c, d, e, f}));
      EXPECT_EQ(testing::read_file(out + ".idx"), idx({2, 1, 2, 1}, {0, 2, 3, 4}));
    }
  }
}

struct BadCase {
  std::string line, reason;
};

TEST(Preprocess, BadInputNamesFileLineAndLeavesNothing) {
  const std::vector<BadCase> cases = {
      {"{\"text\": \"unterminated}", "invalid JSON"},
      {"{\"text\": \"a\",}", "invalid JSON"},
      {"not json", "invalid JSON"},
      {"{\"body\": \"a\"}", "missing key \"text\""},
      {"{\"text\": 12}", "key \"text\" is not a string or a list of strings (got number)"},
      {"{\"text\": null}", "key \"text\" is not a string or a list of strings (got null)"},
      {"{\"text\": {\"a\": \"b\"}}", "key \"text\" is not a string or a list of strings (got object)"},
      {"{\"text\": [\"a\", 3]}", "key \"text\": item 1 of the list is not a string (got number)"},
      {"{\"text\": [[\"a\"]]}", "key \"text\": item 0 of the list is not a string (got array)"},
      {"[\"text\"]", "not a JSON object (got array)"},
      {"{\"text\": \"bad utf8 \xff\"}", "invalid JSON"},
  };
  for (const auto& c : cases) {
    ScratchDir dir;
    std::string jsonl;
    for (int i = 0; i < 40; ++i) jsonl += "{\"text\": \"ok " + std::to_string(i) + "\"}\n";
    jsonl += c.line + "\n";  // line 41
    for (int i = 0; i < 40; ++i) jsonl += "{\"text\": \"after\"}\n";
    write_file(dir / "bad.jsonl", jsonl);
    auto o = options(dir, dir / "bad.jsonl");
    o.workers = 3;
    o.batch_lines = 4;
    ByteTokenizer tok;
    try {
      preprocess_jsonl(o, tok);
      ADD_FAILURE() << "accepted: " << c.line;
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(dir / "bad.jsonl:41: " + c.reason, 0), 0u) << e.what();
    }
    EXPECT_EQ(dir.files(), (std::set<std::string>{"bad.jsonl"})) << c.line;

    o.skip_invalid = true;
    const auto st = preprocess_jsonl(o, tok);
    EXPECT_EQ(st.invalid, 1u) << c.line;
    EXPECT_EQ(st.documents, 80u);
    EXPECT_EQ(documents_of(st.output_prefixes[0]).size(), 80u);
  }
}

TEST(Preprocess, OnlyFirstBadLineReported) {
  ScratchDir dir;
  std::string jsonl;
  for (int i = 1; i <= 300; ++i) jsonl += (i % 50 == 0 ? std::string("{oops}") : "{\"text\": \"t\"}") + "\n";
  write_file(dir / "many.jsonl", jsonl);
  auto o = options(dir, dir / "many.jsonl");
  o.workers = 4;
  o.batch_lines = 3;
  ByteTokenizer tok;
  try {
    preprocess_jsonl(o, tok);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "many.jsonl:50: invalid JSON", 0), 0u) << e.what();
  }
  o.skip_invalid = true;
  EXPECT_EQ(preprocess_jsonl(o, tok).invalid, 6u);
}

TEST(Preprocess, MissingInputNamed) {
  ScratchDir dir;
  auto o = options(dir, dir / "nope.jsonl");
  ByteTokenizer tok;
  try {
    preprocess_jsonl(o, tok);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.jsonl"), std::string::npos);
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(Preprocess, RepeatedJsonKeyTakesItsLastValue) {
  // Python's json.loads keeps the last value of a repeated key, so Megatron does.
  ScratchDir dir;
  write_file(dir / "in.jsonl",
             "{\"text\": \"first\", \"text\": \"second\"}\n"
             "{\"text\": \"a\", \"title\": \"T\", \"text\": \"b\", \"text\": \"c\"}\n"
             "{\"text\": 1, \"text\": \"number, then a string\"}\n"
             "{\"te\\u0078t\": \"escaped\", \"text\": \"plain\"}\n"
             "{\"text\": \"plain\", \"te\\u0078t\": \"escaped\"}\n");
  auto o = options(dir, dir / "in.jsonl");
  ByteTokenizer tok;
  const auto st = preprocess_jsonl(o, tok);
  EXPECT_EQ(documents_of(st.output_prefixes[0]),
            (std::vector<std::vector<int32_t>>{bytes_of("second"), bytes_of("c"), bytes_of("number, then a string"),
                                               bytes_of("plain"), bytes_of("escaped")}));
  write_file(dir / "last_bad.jsonl", "{\"text\": \"a string, then null\", \"text\": null}\n");
  o = options(dir, dir / "last_bad.jsonl");
  o.output_prefix = dir / "bad";
  try {
    preprocess_jsonl(o, tok);
    FAIL() << "a null last value accepted";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir / "last_bad.jsonl:1: key \"text\" is not a string or a list of strings (got null)");
  }
}

TEST(Preprocess, PythonNumberFormsReadAsMegatronDoes) {
  // json.loads (Megatron's reader) takes NaN, Infinity, -Infinity, integers of any size and
  // 1e400 (as inf); simdjson refuses each, so these lines are parsed again with them as 0.
  ScratchDir dir;
  write_file(dir / "in.jsonl",
             "{\"text\": \"nan\", \"score\": NaN}\n"
             "{\"x\": -Infinity, \"text\": \"inf\", \"y\": [Infinity, 1]}\n"
             "{\"id\": 123456789012345678901234567890, \"text\": \"big int\"}\n"
             "{\"text\": \"big float NaN 1e400\", \"v\": 1e400, \"w\": -2.5E-7}\n");
  auto o = options(dir, dir / "in.jsonl");
  o.workers = 2;
  o.batch_lines = 1;
  ByteTokenizer tok;
  const auto st = preprocess_jsonl(o, tok);
  EXPECT_EQ(st.invalid, 0u);
  EXPECT_EQ(documents_of(st.output_prefixes[0]),
            (std::vector<std::vector<int32_t>>{bytes_of("nan"), bytes_of("inf"), bytes_of("big int"),
                                               bytes_of("big float NaN 1e400")}));
  // Still refused: a text value that is such a number (json.loads reads a float), forms
  // Python refuses too (nan, +Infinity, 01, 1.), and a broken line with numbers in it,
  // whose error is the strict parser's.
  const std::vector<BadCase> cases = {
      {"{\"text\": NaN}", "key \"text\" is not a string or a list of strings (got number)"},
      {"{\"text\": \"a\", \"s\": nan}", "invalid JSON"},
      {"{\"text\": \"a\", \"s\": +Infinity}", "invalid JSON"},
      {"{\"text\": \"a\", \"s\": 01}", "invalid JSON"},
      {"{\"text\": \"a\", \"s\": 1.}", "invalid JSON"},
      {"{\"text\": \"a\", \"s\": NaN,}", "invalid JSON"},
  };
  for (const auto& c : cases) {
    write_file(dir / "bad.jsonl", c.line + "\n");
    o = options(dir, dir / "bad.jsonl");
    o.output_prefix = dir / "bad";
    try {
      preprocess_jsonl(o, tok);
      ADD_FAILURE() << "accepted: " << c.line;
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(dir / "bad.jsonl:1: " + c.reason, 0), 0u) << e.what();
    }
  }
}

TEST(Preprocess, RepeatedJsonKeysEntryRefusedBeforeAnyOutput) {
  ScratchDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"x\", \"title\": \"y\"}\n");
  for (const std::vector<std::string>& keys : {std::vector<std::string>{"text", "text"},
                                               std::vector<std::string>{"text", "title", "text"}}) {
    auto o = options(dir, dir / "in.jsonl");
    o.json_keys = keys;
    ByteTokenizer tok;
    try {
      preprocess_jsonl(o, tok);
      FAIL() << "accepted a repeated key";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "--json-keys: key \"text\" is given twice (each key has its own output)");
    }
    EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl"}));
  }
  EXPECT_NO_THROW(check_json_keys({"text", "title"}));
  EXPECT_THROW(check_json_keys({}), ConfigError);
}

TEST(Preprocess, KeysOutputsAppearTogetherOrNotAtAll) {
  ScratchDir dir;
  write_file(dir / "in.jsonl", "{\"a\": \"x\", \"b\": \"y\", \"c\": \"z\"}\n");
  // The .idx of the second key cannot take its final name (a directory is there): the first
  // key's outputs, already renamed, are taken back, and nothing else is left.
  std::filesystem::create_directories(dir / "o_b_document.idx/inside");
  auto o = options(dir, dir / "in.jsonl");
  o.output_prefix = dir / "o";
  o.json_keys = {"a", "b", "c"};
  ByteTokenizer tok;
  try {
    preprocess_jsonl(o, tok);
    FAIL() << "renamed onto a directory";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "o_b_document.idx: cannot rename ", 0), 0u) << e.what();
  }
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl", "o_b_document.idx"}));
  std::filesystem::remove_all(dir / "o_b_document.idx");
  const auto st = preprocess_jsonl(o, tok);
  EXPECT_EQ(documents_of(st.output_prefixes[1]), (std::vector<std::vector<int32_t>>{bytes_of("y")}));
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl", "o_a_document.bin", "o_a_document.idx", "o_b_document.bin",
                                                "o_b_document.idx", "o_c_document.bin", "o_c_document.idx"}));
}

TEST(Preprocess, StaleTemporariesOfThisPrefixAndHostRemovedAtStart) {
  ScratchDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"x\"}\n");
  const std::string dead = "99999999", alive = std::to_string(::getppid());  // no pid reaches 99999999
  const std::string here = ".tmp." + host_token() + ".";
  // Kept: a running process's; a run on another host sharing the folder, whose pid means
  // nothing here; an older trident's, which names no host; another prefix's.
  const std::vector<std::string> kept = {"out_text_document.bin" + here + alive,
                                         "out_text_document.bin.tmp.otherhost0123456789." + dead,
                                         "out_text_document.idx.tmp." + dead, "other_text_document.bin" + here + dead};
  for (const std::string& name : kept) write_file(dir / name, "left behind");
  for (const std::string& name : {"out_text_document.bin" + here + dead, "out_text_document.idx" + here + dead})
    write_file(dir / name, "left behind");
  auto o = options(dir, dir / "in.jsonl");
  char* log_text = nullptr;
  size_t log_size = 0;
  o.log = ::open_memstream(&log_text, &log_size);
  ByteTokenizer tok;
  preprocess_jsonl(o, tok);
  std::fclose(o.log);
  const std::string log(log_text, log_size);
  std::free(log_text);
  const std::string removed_bin = dir / "out_text_document.bin" + here + dead;
  EXPECT_NE(log.find("Removed " + removed_bin + ", left by an earlier run that is gone."), std::string::npos) << log;
  EXPECT_NE(log.find("Removed " + dir / "out_text_document.idx" + here + dead), std::string::npos) << log;
  std::set<std::string> expected(kept.begin(), kept.end());
  expected.insert({"in.jsonl", "out_text_document.bin", "out_text_document.idx"});
  EXPECT_EQ(dir.files(), expected);
}

// Polls `done` for up to `seconds`.
bool eventually(const std::function<bool()>& done, double seconds = 30) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool has_temporaries(const ScratchDir& dir) {
  for (const std::string& f : dir.files())
    if (f.find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST(Preprocess, InterruptLeavesNothing) {
  ScratchDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"x\"}\n");
  auto o = options(dir, dir / "in.jsonl");
  std::atomic<int> interrupt{SIGTERM};  // set before the start: nothing is created
  o.interrupt = &interrupt;
  ByteTokenizer tok;
  try {
    preprocess_jsonl(o, tok);
    FAIL() << "not interrupted";
  } catch (const PreprocessInterrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_EQ(std::string(e.what()), "interrupted by SIGTERM: no output written, temporary files removed");
  }
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl"}));

  // Set while the reader waits on a pipe that stays open: the temporary files go at once,
  // and the run ends when the pipe closes.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string lines = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  ASSERT_EQ(::write(fds[1], lines.data(), lines.size()), static_cast<ssize_t>(lines.size()));
  o.input = "/dev/fd/" + std::to_string(fds[0]);
  interrupt = 0;
  auto run = std::async(std::launch::async, [&] { preprocess_jsonl(o, tok); });
  EXPECT_TRUE(eventually([&] { return has_temporaries(dir); }));
  interrupt = SIGINT;
  EXPECT_TRUE(eventually([&] { return !has_temporaries(dir); }));
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl"}));
  ::close(fds[1]);
  EXPECT_THROW(run.get(), PreprocessInterrupted);
  ::close(fds[0]);
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl"}));
}

// ---- the command-line tool (built beside the tests), with the real GPT-2 files

std::string tool() { return std::string(TRIDENT_BINARY_DIR) + "/tools/trident-preprocess"; }

int run(const std::string& cmd, std::string* err) {
  const std::string full = cmd + " 2>" + "/tmp/trident-pp-test-err." + std::to_string(::getpid());
  const int rc = std::system(full.c_str());
  *err = testing::read_file("/tmp/trident-pp-test-err." + std::to_string(::getpid()));
  std::remove(("/tmp/trident-pp-test-err." + std::to_string(::getpid())).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(PreprocessTool, Gpt2EndToEnd) {
  const std::string vocab = std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-vocab.json";
  const std::string merges = std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-merges.txt";
  if (!std::filesystem::exists(tool()) || !std::filesystem::exists(vocab))
    GTEST_SKIP() << "needs " << tool() << " and " << vocab;
  ScratchDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"Hello world\"}\n{\"text\": \" the cat sat on the mat\"}\n");
  const std::string base = tool() + " --tokenizer-type GPT2BPETokenizer --vocab-file " + vocab +
                           " --merge-file " + merges + " --output-prefix " + dir / "g";
  std::string err;
  ASSERT_EQ(run(base + " --input " + dir / "in.jsonl" + " --append-eod --workers 2", &err), 0) << err;
  EXPECT_EQ(documents_of(dir / "g_text_document"),
            (std::vector<std::vector<int32_t>>{{15496, 995, 50256}, {262, 3797, 3332, 319, 262, 2603, 50256}}));
  EXPECT_EQ(IndexedDataset(dir / "g_text_document").dtype(), IndexDType::kUInt16);

  write_file(dir / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": 3}\n");
  EXPECT_EQ(run(base + " --input " + dir / "bad.jsonl", &err), 2);
  EXPECT_NE(err.find("trident-preprocess: error: " + dir / "bad.jsonl:2: key \"text\" is not a string"),
            std::string::npos) << err;
  // A repeated key takes its last value, as json.loads does.
  write_file(dir / "dup.jsonl", "{\"text\": \"first\", \"text\": \"Hello world\"}\n");
  ASSERT_EQ(run(tool() + " --tokenizer-type GPT2BPETokenizer --vocab-file " + vocab + " --merge-file " + merges +
                    " --output-prefix " + dir / "dup --input " + dir / "dup.jsonl",
                &err),
            0)
      << err;
  EXPECT_EQ(documents_of(dir / "dup_text_document"), (std::vector<std::vector<int32_t>>{{15496, 995}}));
  // A repeated --json-keys entry: one line naming it, exit 2, nothing written.
  for (const char* keys : {" --json-keys text text", " --json-keys text,title,text"}) {
    EXPECT_EQ(run(tool() + " --tokenizer-type GPT2BPETokenizer --vocab-file " + vocab + " --merge-file " + merges +
                      " --output-prefix " + dir / "twice --input " + dir / "in.jsonl" + keys,
                  &err),
              2);
    EXPECT_EQ(err, "trident-preprocess: error: --json-keys: key \"text\" is given twice (each key has its own "
                   "output)\n");
  }
  for (const std::string& f : dir.files()) EXPECT_EQ(f.find("twice"), std::string::npos) << f;
  EXPECT_EQ(run(base + " --input " + dir / "in.jsonl" + " --dataset-impl lazy", &err), 2);
  EXPECT_NE(err.find("--dataset-impl"), std::string::npos) << err;
  // Megatron's partition and sentence flags: one partition and the flags that only matter
  // with more or with sentence splitting are accepted with a note; the rest are one line.
  ASSERT_EQ(run(base + "p --input " + dir / "in.jsonl" + " --append-eod --partitions 1 --keep-sequential-samples "
                "--keep-newlines --lang english",
                &err),
            0)
      << err;
  EXPECT_NE(err.find("trident-preprocess: note: --keep-sequential-samples --keep-newlines --lang: without effect"),
            std::string::npos)
      << err;
  EXPECT_EQ(documents_of(dir / "gp_text_document"), documents_of(dir / "g_text_document"));
  for (const std::string flag : {"--partitions", "--split-sentences"}) {
    EXPECT_EQ(run(base + "q --input " + dir / "in.jsonl " + flag + (flag == "--partitions" ? " 4" : ""), &err), 2);
    EXPECT_EQ(err.rfind("trident-preprocess: error: " + flag + ": ", 0), 0u) << err;
  }
  EXPECT_EQ(run(tool() + " --tokenizer-type GPT2BPETokenizer --vocab-file " + dir / "none.json" +
                    " --merge-file " + merges + " --output-prefix " + dir / "h --input " + dir / "in.jsonl",
                &err),
            2);
  EXPECT_NE(err.find(dir / "none.json"), std::string::npos) << err;
}

// Starts the tool on the read end of a pipe (the write end comes back in *input) with stderr
// going to err_path: the run waits for input for as long as the pipe stays open.
pid_t start_on_pipe(const std::vector<std::string>& args, const std::string& err_path, int* input) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const std::string lines = "{\"text\": \"Hello world\"}\n{\"text\": \"more\"}\n";
  if (::write(fds[1], lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) return -1;
  std::vector<std::string> words = {tool()};
  words.insert(words.end(), args.begin(), args.end());
  words.push_back("--input");
  words.push_back("/dev/fd/" + std::to_string(fds[0]));
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err, 2);
    ::close(fds[1]);
    std::signal(SIGINT, SIG_DFL);  // not ignored even if the test runs in the background
    std::signal(SIGTERM, SIG_DFL);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(err);
  ::close(fds[0]);
  *input = fds[1];
  return pid;
}

TEST(PreprocessTool, SignalsLeaveNoTemporaries) {
  const std::string vocab = std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-vocab.json";
  const std::string merges = std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-merges.txt";
  if (!std::filesystem::exists(tool()) || !std::filesystem::exists(vocab))
    GTEST_SKIP() << "needs " << tool() << " and " << vocab;
  ScratchDir dir, logs;
  const std::vector<std::string> args = {"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab,
                                         "--merge-file", merges, "--output-prefix", dir / "g"};
  // SIGINT or SIGTERM while the run waits for input: the temporary files go at once, the
  // process ends by that signal once its reader sees the pipe close, nothing is left.
  for (const int sig : {SIGINT, SIGTERM}) {
    int input = -1;
    const pid_t pid = start_on_pipe(args, logs / "err", &input);
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(eventually([&] { return has_temporaries(dir); })) << testing::read_file(logs / "err");
    ::kill(pid, sig);
    EXPECT_TRUE(eventually([&] { return !has_temporaries(dir); })) << sig;
    ::close(input);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    EXPECT_NE(testing::read_file(logs / "err")
                  .find("trident-preprocess: interrupted by " + name + ": no output written, temporary files removed\n"),
              std::string::npos)
        << testing::read_file(logs / "err");
    EXPECT_TRUE(dir.files().empty()) << sig;
  }
  // SIGKILL cannot be caught: its temporary files stay until the next run of the prefix.
  int input = -1;
  const pid_t pid = start_on_pipe(args, logs / "err", &input);
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(eventually([&] { return has_temporaries(dir); }));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(input);
  const std::set<std::string> left = {"g_text_document.bin.tmp." + host_token() + "." + std::to_string(pid)};
  EXPECT_EQ(dir.files(), left);
  write_file(logs / "in.jsonl", "{\"text\": \"Hello world\"}\n");
  std::string err;
  std::string cmd = tool() + " --input " + logs / "in.jsonl";
  for (const auto& a : args) cmd += " " + a;
  ASSERT_EQ(run(cmd, &err), 0) << err;
  EXPECT_NE(err.find("Removed " + dir / *left.begin() + ", left by an earlier run that is gone."), std::string::npos)
      << err;
  EXPECT_EQ(dir.files(), (std::set<std::string>{"g_text_document.bin", "g_text_document.idx"}));
  EXPECT_EQ(documents_of(dir / "g_text_document"), (std::vector<std::vector<int32_t>>{{15496, 995}}));
}

// The demo corpus script's output must be strict JSON throughout (simdjson rejects bad
// escapes and bad UTF-8); preprocess it compressed, with two keys, through the CLI.
TEST(PreprocessTool, DemoCorpusThroughXz) {
  const std::string vocab = std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-vocab.json";
  const std::string merges = std::string(TRIDENT_SHARED_GPT2_DIR) + "/gpt2-merges.txt";
  if (!std::filesystem::exists(tool()) || !std::filesystem::exists(vocab) ||
      !std::filesystem::exists("/usr/share/games/fortunes/tang300"))
    GTEST_SKIP() << "needs the tool, the GPT-2 files and the fortunes packages";
  ScratchDir dir;
  std::string err;
  ASSERT_EQ(run(std::string(TRIDENT_SOURCE_DIR) + "/tools/make-demo-data.sh " + dir / "demo.jsonl", &err), 0) << err;
  const std::string text = testing::read_file(dir / "demo.jsonl");
  const uint64_t lines = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
  ASSERT_GT(lines, 10000u);
  ASSERT_EQ(std::system(("xz -T1 -1 '" + dir / "demo.jsonl" + "'").c_str()), 0);
  ASSERT_EQ(run(tool() + " --tokenizer-type GPT2BPETokenizer --vocab " + vocab + " --merge-file " + merges +
                    " --output-prefix " + dir / "demo --input " + dir / "demo.jsonl.xz" +
                    " --json-keys text id --append-eod --workers 2 --log-interval 5000",
                &err),
            0)
      << err;
  EXPECT_NE(err.find("Processed 5000 documents"), std::string::npos) << err;
  EXPECT_NE(err.find("Done: " + std::to_string(lines) + " documents"), std::string::npos) << err;
  IndexedDataset t(dir / "demo_text_document"), id(dir / "demo_id_document");
  EXPECT_EQ(t.num_documents(), lines);
  EXPECT_EQ(id.num_documents(), lines);
  // every document ends with <|endoftext|>
  for (uint64_t i = 0; i < t.size(); i += 997) EXPECT_EQ(t.item(i).back(), 50256);
}

}  // namespace
}  // namespace trident
