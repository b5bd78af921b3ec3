// JsonlReader: line splitting (CRLF, no final newline, lines longer than a read chunk,
// empty lines), line numbers, and .xz input through liblzma (single and concatenated
// streams, corrupt data named); plain and xz input from a pipe, which cannot be rewound; a
// leading byte-order mark dropped; gzip, bzip2 and zstd input refused by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "data/jsonl_reader.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::ScratchDir;
using testing::write_file;

std::vector<std::string> read_all(const std::string& path, std::vector<uint64_t>* line_numbers = nullptr) {
  JsonlReader r(path);
  std::vector<std::string> out;
  std::string_view line;
  while (r.next(line)) {
    out.emplace_back(line);
    if (line_numbers) line_numbers->push_back(r.line_number());
  }
  return out;
}

void xz(const std::string& path) {  // compresses path to path.xz with the xz binary
  ASSERT_EQ(std::system(("xz -z -k -f -T1 '" + path + "'").c_str()), 0);
}

TEST(JsonlReader, SplitsLines) {
  ScratchDir dir;
  write_file(dir / "a.jsonl", "one\r\ntwo\n\nfour");
  std::vector<uint64_t> nums;
  EXPECT_EQ(read_all(dir / "a.jsonl", &nums), (std::vector<std::string>{"one", "two", "", "four"}));
  EXPECT_EQ(nums, (std::vector<uint64_t>{1, 2, 3, 4}));
  write_file(dir / "b.jsonl", "x\n");
  EXPECT_EQ(read_all(dir / "b.jsonl"), (std::vector<std::string>{"x"}));
  write_file(dir / "empty.jsonl", "");
  EXPECT_TRUE(read_all(dir / "empty.jsonl").empty());
  // Lone "\r" line ends (old Mac files), as Python's text mode reads them; "\r\r\n" is an
  // empty line between two ends.
  write_file(dir / "cr.jsonl", "a\rb\r\nc\r\r\nd\r");
  nums.clear();
  EXPECT_EQ(read_all(dir / "cr.jsonl", &nums), (std::vector<std::string>{"a", "b", "c", "", "d"}));
  EXPECT_EQ(nums, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

// A "\r\n" split across two reads of decoded text is one line end, and a "\r" ending a read
// before another line is one too. The reader's buffer holds the file's first 6 bytes (read to
// tell xz input) and then 1 MiB a read, so the "\r" at offset 1 MiB + 5 ends the first buffer;
// xz input decodes in other pieces, so both are read.
TEST(JsonlReader, CarriageReturnAtTheEndOfARead) {
  ScratchDir dir;
  for (const char* second_end : {"\n", "x"}) {
    const std::string first(1024 * 1024 + 5, 'q');
    const std::string content = first + "\r" + second_end + "tail\n";
    write_file(dir / "split.jsonl", content);
    xz(dir / "split.jsonl");
    for (const std::string& path : {dir / "split.jsonl", dir / "split.jsonl.xz"}) {
      const std::vector<std::string> lines = read_all(path);
      ASSERT_EQ(lines.size(), 2u) << second_end << " " << path;
      EXPECT_EQ(lines[0], first);
      EXPECT_EQ(lines[1], std::string(second_end[0] == 'x' ? "x" : "") + "tail");
      JsonlReader r(path);
      std::string_view line;
      while (r.next(line)) {
      }
      EXPECT_EQ(r.text_bytes(), content.size());
    }
  }
}

TEST(JsonlReader, LinesLongerThanAChunk) {
  ScratchDir dir;
  std::string big(3 * 1024 * 1024 + 17, 'q'), content;
  std::vector<std::string> want;
  for (int i = 0; i < 5; ++i) {
    want.push_back(std::to_string(i) + big.substr(0, big.size() - i * 1000));
    content += want.back() + "\n";
  }
  write_file(dir / "long.jsonl", content);
  EXPECT_EQ(read_all(dir / "long.jsonl"), want);
  JsonlReader r(dir / "long.jsonl");
  std::string_view line;
  while (r.next(line)) {
  }
  EXPECT_EQ(r.text_bytes(), content.size());
  EXPECT_EQ(r.raw_bytes_read(), content.size());
  EXPECT_FALSE(r.compressed());
}

TEST(JsonlReader, ReadsXz) {
  ScratchDir dir;
  std::string content;
  std::vector<std::string> want;
  for (int i = 0; i < 50000; ++i) {
    want.push_back("{\"text\": \"line " + std::to_string(i) + " \\u00e9t\u00e9\"}");
    content += want.back() + "\n";
  }
  write_file(dir / "c.jsonl", content);
  xz(dir / "c.jsonl");
  EXPECT_EQ(read_all(dir / "c.jsonl.xz"), want);
  JsonlReader r(dir / "c.jsonl.xz");
  EXPECT_TRUE(r.compressed());
}

TEST(JsonlReader, ReadsConcatenatedXzStreams) {
  ScratchDir dir;
  write_file(dir / "p1", "a\nb\n");
  write_file(dir / "p2", "c\nd");
  xz(dir / "p1");
  xz(dir / "p2");
  write_file(dir / "both.jsonl.xz", testing::read_file(dir / "p1.xz") + testing::read_file(dir / "p2.xz"));
  EXPECT_EQ(read_all(dir / "both.jsonl.xz"), (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST(JsonlReader, CorruptXzNamesTheFile) {
  ScratchDir dir;
  std::string content;
  for (int i = 0; i < 2000; ++i) content += "{\"text\": \"" + std::to_string(i * 7919) + "\"}\n";
  write_file(dir / "d.jsonl", content);
  xz(dir / "d.jsonl");
  std::string bytes = testing::read_file(dir / "d.jsonl.xz");
  std::string cut = bytes.substr(0, bytes.size() / 2);
  write_file(dir / "cut.jsonl.xz", cut);
  bytes[bytes.size() / 2] ^= 0x55;
  write_file(dir / "flip.jsonl.xz", bytes);
  for (const char* name : {"cut.jsonl.xz", "flip.jsonl.xz"}) {
    try {
      read_all(dir / name);
      FAIL() << name << " accepted";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// Reads `bytes` through a pipe, as "--input <(xzcat ...)" or /dev/stdin would give them.
std::vector<std::string> read_through_pipe(const std::string& bytes, bool* compressed) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    for (size_t at = 0; at < bytes.size();) {
      const ssize_t n = ::write(fds[1], bytes.data() + at, bytes.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::close(fds[1]);
  });
  std::vector<std::string> out;
  {
    JsonlReader r("/dev/fd/" + std::to_string(fds[0]));
    *compressed = r.compressed();
    std::string_view line;
    while (r.next(line)) out.emplace_back(line);
  }
  writer.join();
  ::close(fds[0]);
  return out;
}

TEST(JsonlReader, ReadsFromAPipe) {
  ScratchDir dir;
  std::string content;
  std::vector<std::string> want;
  for (int i = 0; i < 20000; ++i) {  // a few pipe buffers' worth
    want.push_back("{\"text\": \"line " + std::to_string(i) + "\"}");
    content += want.back() + (i % 2 ? "\r\n" : "\n");
  }
  bool compressed = true;
  EXPECT_EQ(read_through_pipe(content, &compressed), want);
  EXPECT_FALSE(compressed);
  EXPECT_EQ(read_through_pipe("ab", &compressed), (std::vector<std::string>{"ab"}));  // shorter than the xz magic
  EXPECT_TRUE(read_through_pipe("", &compressed).empty());
  write_file(dir / "c.jsonl", content);
  xz(dir / "c.jsonl");
  EXPECT_EQ(read_through_pipe(testing::read_file(dir / "c.jsonl.xz"), &compressed), want);
  EXPECT_TRUE(compressed);
}

TEST(JsonlReader, ByteOrderMarkDroppedOtherCompressionsNamed) {
  ScratchDir dir;
  // A BOM before the first line only (one later is text, for the JSON parser to refuse).
  write_file(dir / "bom.jsonl", "\xEF\xBB\xBF{\"a\": 1}\n\xEF\xBB\xBFx\n");
  EXPECT_EQ(read_all(dir / "bom.jsonl"), (std::vector<std::string>{"{\"a\": 1}", "\xEF\xBB\xBFx"}));
  write_file(dir / "bom_only.jsonl", "\xEF\xBB\xBF");
  EXPECT_EQ(read_all(dir / "bom_only.jsonl"), (std::vector<std::string>{""}));
  write_file(dir / "bom.txt", "\xEF\xBB\xBFline\n");
  xz(dir / "bom.txt");
  EXPECT_EQ(read_all(dir / "bom.txt.xz"), (std::vector<std::string>{"line"}));
  const std::pair<const char*, std::string> others[] = {
      {"gzip", std::string("\x1f\x8b\x08\x00\x00\x00", 6)}, {"bzip2", "BZh91AY&SY"}, {"zstd", "\x28\xb5\x2f\xfd\x04"}};
  for (const auto& [name, head] : others) {
    write_file(dir / "c.jsonl.x", head + "payload");
    try {
      read_all(dir / "c.jsonl.x");
      ADD_FAILURE() << name << " accepted";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()),
                dir / "c.jsonl.x" + ": " + name + "-compressed input is not supported: decompress it, or use xz");
    }
  }
}

TEST(JsonlReader, MissingFileNamesTheFile) {
  try {
    JsonlReader r("/nonexistent/dir/x.jsonl");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.jsonl"), std::string::npos);
  }
}

}  // namespace
}  // namespace trident
