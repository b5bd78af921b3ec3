// .bin/.idx: the bytes of a known tiny dataset parsed by hand against Megatron's layout,
// reader round trip, and rejection of truncated / foreign files (file named, no crash);
// ids outside the vocabulary and int64 tokens past int32 refused when read.
// The builder's two-phase finish (prepare, commit, abort taking a commit back) and the
// removal of temporary files that dead processes left.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/process_id.h"
#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::read_file;
using testing::ScratchDir;
using testing::write_file;

template <typename T>
T at(const std::string& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// Documents: {[1,2,3]}, {[4], [5,6]}, {[65535]}: three documents, four items.
void write_known(const std::string& prefix, IndexDType dt) {
  IndexedDatasetBuilder b(prefix, dt);
  b.add_item(std::vector<int32_t>{1, 2, 3});
  b.end_document();
  b.add_item(std::vector<int32_t>{4});
  b.add_item(std::vector<int32_t>{5, 6});
  b.end_document();
  b.add_item(std::vector<int32_t>{65535});
  b.end_document();
  EXPECT_EQ(b.documents(), 3u);
  EXPECT_EQ(b.items(), 4u);
  EXPECT_EQ(b.tokens(), 7u);
  b.finish();
}

TEST(IndexedDataset, IdxBytesFieldByField) {
  ScratchDir dir;
  const std::string prefix = dir / "known";
  write_known(prefix, IndexDType::kUInt16);
  const std::string idx = read_file(prefix + ".idx");
  ASSERT_EQ(idx.size(), 9u + 8 + 1 + 8 + 8 + 4 * 4 + 4 * 8 + 4 * 8);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(at<uint64_t>(idx, 9), 1u);  // version
  EXPECT_EQ(at<uint8_t>(idx, 17), 8u);  // uint16
  EXPECT_EQ(at<uint64_t>(idx, 18), 4u); // items
  EXPECT_EQ(at<uint64_t>(idx, 26), 4u); // doc_idx length = documents + 1
  const size_t s = 34, p = s + 16, d = p + 32;
  const int32_t sizes[4] = {3, 1, 2, 1};
  const int64_t ptrs[4] = {0, 6, 8, 12};  // bytes: uint16 -> 2 per token
  const int64_t docs[4] = {0, 1, 3, 4};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(at<int32_t>(idx, s + 4 * i), sizes[i]) << i;
    EXPECT_EQ(at<int64_t>(idx, p + 8 * i), ptrs[i]) << i;
    EXPECT_EQ(at<int64_t>(idx, d + 8 * i), docs[i]) << i;
  }
  const std::string bin = read_file(prefix + ".bin");
  ASSERT_EQ(bin.size(), 14u);
  const uint16_t want[7] = {1, 2, 3, 4, 5, 6, 65535};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(at<uint16_t>(bin, 2 * i), want[i]) << i;
  // no temporary files remain
  EXPECT_EQ(dir.files(), (std::set<std::string>{"known.bin", "known.idx"}));
}

TEST(IndexedDataset, Int32LayoutAndRoundTrip) {
  ScratchDir dir;
  const std::string prefix = dir / "wide";
  {
    IndexedDatasetBuilder b(prefix, IndexDType::kInt32);
    b.add_item(std::vector<int32_t>{70000, 1});
    b.end_document();
    b.add_item(std::vector<int32_t>{2, 3, 70256});
    b.end_document();
    b.finish();
  }
  const std::string idx = read_file(prefix + ".idx");
  EXPECT_EQ(at<uint8_t>(idx, 17), 4u);
  EXPECT_EQ(at<int64_t>(idx, 34 + 8 + 8), 8);  // second pointer: 2 tokens x 4 bytes
  EXPECT_EQ(read_file(prefix + ".bin").size(), 20u);
  IndexedDataset r(prefix);
  EXPECT_EQ(r.dtype(), IndexDType::kInt32);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.num_documents(), 2u);
  EXPECT_EQ(r.item(0), (std::vector<int32_t>{70000, 1}));
  EXPECT_EQ(r.item(1), (std::vector<int32_t>{2, 3, 70256}));
  int32_t two[2];
  r.read(1, 1, 2, two);
  EXPECT_EQ(two[0], 3);
  EXPECT_EQ(two[1], 70256);
}

TEST(IndexedDataset, ReaderRoundTripUInt16) {
  ScratchDir dir;
  const std::string prefix = dir / "known";
  write_known(prefix, IndexDType::kUInt16);
  IndexedDataset r(prefix);
  EXPECT_EQ(r.dtype(), IndexDType::kUInt16);
  EXPECT_EQ(r.size(), 4u);
  EXPECT_EQ(r.num_documents(), 3u);
  EXPECT_EQ(std::vector<int64_t>(r.doc_idx().begin(), r.doc_idx().end()), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(r.item(0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.item(2), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.item(3), (std::vector<int32_t>{65535}));  // read back unsigned
}

// A .bin truncated by another process while mapped: reading it ends the process with one line
// naming the file and exit status 2 (not "Bus error" and a core dump).
TEST(IndexedDatasetDeathTest, BinTruncatedWhileMappedIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string prefix = dir / "shrunk";
  write_known(prefix, IndexDType::kUInt16);
  IndexedDataset before(prefix);
  EXPECT_EQ(before.item(2), (std::vector<int32_t>{5, 6}));
  EXPECT_EXIT(
      {
        IndexedDataset r(prefix);
        if (::truncate((prefix + ".bin").c_str(), 0) != 0) std::_Exit(9);
        r.item(2);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(2),
      "trident: error: .*shrunk\\.bin: the file shrank while it was read \\(truncated or rewritten by another "
      "process\\?\\): a read past its new end \\(SIGBUS\\)");
}

// An .idx truncated while mapped: the same one line, naming the index.
TEST(IndexedDatasetDeathTest, IdxTruncatedWhileMappedIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string prefix = dir / "shrunk";
  write_known(prefix, IndexDType::kUInt16);
  EXPECT_EXIT(
      {
        IndexedDataset r(prefix);
        if (::truncate((prefix + ".idx").c_str(), 0) != 0) std::_Exit(9);
        std::printf("%d\n", r.sizes()[3]);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(2), "trident: error: .*shrunk\\.idx: the file shrank while it was read");
}

// An index rewritten in place while mapped (same file, new bytes): a pointer past the data
// is named when read, not followed.
TEST(IndexedDataset, IndexRewrittenInPlaceIsNamedNotFollowed) {
  ScratchDir dir;
  const std::string prefix = dir / "rewritten";
  write_known(prefix, IndexDType::kUInt16);
  IndexedDataset r(prefix);
  EXPECT_EQ(r.item(3), (std::vector<int32_t>{65535}));
  std::FILE* f = std::fopen((prefix + ".idx").c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const int64_t far = int64_t{1} << 40;  // item 3's pointer: after the header and 4 sizes
  ASSERT_EQ(std::fseek(f, 34 + 4 * 4 + 3 * 8, SEEK_SET), 0);
  ASSERT_EQ(std::fwrite(&far, 8, 1, f), 1u);
  ASSERT_EQ(std::fclose(f), 0);
  try {
    r.item(3);
    FAIL() << "read through a pointer past the data";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rewritten.idx: item 3 now points past the end of"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(r.item(2), (std::vector<int32_t>{5, 6}));
}

// Resident anonymous memory of this process in KiB (/proc/self/status RssAnon).
long rss_anon_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "RssAnon: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

// The index is mapped, not copied: opening a 192 MiB index (2^24 empty items, a sparse
// file) and reading all of it leaves this process's private memory where it was. A copy, as
// the reader made before, costs every rank of a node the whole index.
TEST(IndexedDataset, IndexIsMappedNotCopied) {
  if (rss_anon_kib() < 0) GTEST_SKIP() << "no RssAnon in /proc/self/status";
  ScratchDir dir;
  const std::string prefix = dir / "wide";
  const uint64_t n = uint64_t{1} << 24, d = 1;
  std::string header("MMIDIDX\0\0", 9);
  auto put = [&](auto v) { header.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint64_t{1});
  put(uint8_t{8});
  put(n);
  put(d);
  write_file(prefix + ".idx", header);  // sizes, pointers and doc_idx: all zero (holes)
  ASSERT_EQ(::truncate((prefix + ".idx").c_str(), static_cast<off_t>(header.size() + n * 12 + d * 8)), 0);
  write_file(prefix + ".bin", "");
  const long before = rss_anon_kib();
  IndexedDataset r(prefix);
  EXPECT_EQ(r.size(), n);
  EXPECT_EQ(r.num_documents(), 0u);
  EXPECT_EQ(r.sizes()[n - 1], 0);
  EXPECT_EQ(r.pointers()[n - 1], 0);
  EXPECT_LT(rss_anon_kib() - before, 32 * 1024) << "KiB of private memory for a "
                                               << (n * 12 + d * 8) / (1024 * 1024) << " MiB index";
}

TEST(IndexedDataset, DtypeRule) {
  EXPECT_EQ(best_fitting_dtype(50257), IndexDType::kUInt16);
  EXPECT_EQ(best_fitting_dtype(65499), IndexDType::kUInt16);
  EXPECT_EQ(best_fitting_dtype(65500), IndexDType::kInt32);
  EXPECT_EQ(best_fitting_dtype(250000), IndexDType::kInt32);
}

TEST(IndexedDataset, TokenTooLargeForUInt16Throws) {
  ScratchDir dir;
  IndexedDatasetBuilder b(dir / "x", IndexDType::kUInt16);
  EXPECT_THROW(b.add_item(std::vector<int32_t>{65536}), IoError);
  EXPECT_THROW(b.add_item(std::vector<int32_t>{-1}), IoError);
}

// The message a read gives for `id` at (item, position) outside a vocabulary of `vocab`.
std::string outside_vocab(const std::string& prefix, int64_t id, int item, int position, int64_t vocab) {
  return prefix + ".bin: token id " + std::to_string(id) + " (item " + std::to_string(item) + ", position " +
         std::to_string(position) + ") is outside the tokenizer's vocabulary of " + std::to_string(vocab) +
         " ids: was the data made with another tokenizer?";
}

TEST(IndexedDataset, IdsOutsideTheVocabularyThrowNamingFileItemAndId) {
  ScratchDir dir;
  const std::string prefix = dir / "known";
  write_known(prefix, IndexDType::kInt32);  // {1, 2, 3}, {4}, {5, 6}, {65535}
  std::vector<int32_t> out(3);
  const IndexedDataset wide(prefix, 65536);
  EXPECT_EQ(wide.item(3), (std::vector<int32_t>{65535}));  // the largest id of 65536
  const IndexedDataset narrow(prefix, 3);
  EXPECT_EQ(narrow.vocab_size(), 3);
  narrow.read(0, 0, 2, out.data());  // ids 1, 2: fine
  EXPECT_EQ(out[1], 2);
  try {
    narrow.read(0, 1, 2, out.data());  // ids 2, 3
    FAIL() << "id 3 read with a vocabulary of 3";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), outside_vocab(prefix, 3, 0, 2, 3));
  }
  try {
    IndexedDataset(prefix, 65535).item(3);
    FAIL() << "id 65535 read with a vocabulary of 65535";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), outside_vocab(prefix, 65535, 3, 0, 65535));
  }
  // Negative ids are outside any vocabulary.
  IndexedDatasetBuilder b(dir / "negative", IndexDType::kInt16);
  b.add_item(std::vector<int32_t>{7, -2});
  b.end_document();
  b.finish();
  EXPECT_EQ(IndexedDataset(dir / "negative").item(0), (std::vector<int32_t>{7, -2}));  // unchecked
  try {
    IndexedDataset(dir / "negative", 50257).item(0);
    FAIL() << "id -2 accepted";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), outside_vocab(dir / "negative", -2, 0, 1, 50257));
  }
}

TEST(IndexedDataset, Int64TokensThatInt32CannotHoldThrow) {
  ScratchDir dir;
  const std::string prefix = dir / "known";
  write_known(prefix, IndexDType::kInt64);  // {1, 2, 3}, {4}, {5, 6}, {65535}
  std::string bin = read_file(prefix + ".bin");
  const int64_t big = (int64_t{1} << 33) + 5, small = int64_t{INT32_MIN} - 1, lowest = INT32_MIN;
  std::memcpy(bin.data() + 5 * 8, &big, 8);     // item 2, position 1
  std::memcpy(bin.data() + 0 * 8, &small, 8);   // item 0, position 0
  std::memcpy(bin.data() + 2 * 8, &lowest, 8);  // item 0, position 2: fits
  write_file(prefix + ".bin", bin);
  const IndexedDataset r(prefix);
  EXPECT_EQ(r.item(1), (std::vector<int32_t>{4}));
  std::vector<int32_t> out(2);
  r.read(0, 1, 2, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{2, INT32_MIN}));
  auto message = [&](int item, int position, int64_t v) {
    return prefix + ".bin: token " + std::to_string(v) + " (item " + std::to_string(item) + ", position " +
           std::to_string(position) + ") does not fit an int32 token id";
  };
  try {
    r.item(2);
    FAIL() << "2^33 + 5 read as an int32";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), message(2, 1, big));
  }
  try {
    r.item(0);
    FAIL() << "INT32_MIN - 1 read as an int32";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), message(0, 0, small));
  }
}

TEST(IndexedDataset, AbandonedBuilderLeavesNothing) {
  ScratchDir dir;
  {
    IndexedDatasetBuilder b(dir / "gone", IndexDType::kUInt16);
    b.add_item(std::vector<int32_t>{1, 2});
    b.end_document();
  }
  EXPECT_TRUE(dir.files().empty());
}

void write_small(IndexedDatasetBuilder& b) {
  b.add_item(std::vector<int32_t>{7, 8});
  b.end_document();
}

TEST(IndexedDataset, PrepareKeepsTemporaryNamesUntilCommit) {
  ScratchDir dir;
  const std::string tag = ".tmp." + host_token() + "." + std::to_string(::getpid());
  IndexedDatasetBuilder b(dir / "p", IndexDType::kUInt16);
  write_small(b);
  b.prepare();
  EXPECT_EQ(dir.files(), (std::set<std::string>{"p.bin" + tag, "p.idx" + tag}));
  b.commit();
  EXPECT_EQ(dir.files(), (std::set<std::string>{"p.bin", "p.idx"}));
  EXPECT_EQ(IndexedDataset(dir / "p").item(0), (std::vector<int32_t>{7, 8}));
  b.abort();  // takes the commit back
  EXPECT_TRUE(dir.files().empty());
}

TEST(IndexedDataset, CommittedBuilderKeepsItsOutputs) {
  ScratchDir dir;
  {
    IndexedDatasetBuilder b(dir / "kept", IndexDType::kUInt16);
    write_small(b);
    b.finish();
  }
  EXPECT_EQ(dir.files(), (std::set<std::string>{"kept.bin", "kept.idx"}));
  {
    IndexedDatasetBuilder b(dir / "half", IndexDType::kUInt16);
    write_small(b);
    b.prepare();  // destroyed before commit(): nothing of it stays
  }
  EXPECT_EQ(dir.files(), (std::set<std::string>{"kept.bin", "kept.idx"}));
}

TEST(IndexedDataset, FailedIndexRenameLeavesNoBin) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "p.idx/inside");  // the .idx cannot be renamed onto it
  IndexedDatasetBuilder b(dir / "p", IndexDType::kUInt16);
  write_small(b);
  b.prepare();
  try {
    b.commit();
    FAIL() << "renamed onto a directory";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "p.idx: cannot rename ", 0), 0u) << e.what();
  }
  // The .bin that was renamed first is gone again; the .idx is still a temporary.
  const std::string idx_tmp = "p.idx.tmp." + host_token() + "." + std::to_string(::getpid());
  EXPECT_EQ(dir.files(), (std::set<std::string>{"p.idx", idx_tmp}));
  b.abort();
  EXPECT_EQ(dir.files(), (std::set<std::string>{"p.idx"}));  // only the directory that was there
}

TEST(IndexedDataset, StaleTemporariesOfDeadProcessesOfThisHostRemoved) {
  ScratchDir dir;
  // Linux pids stay below pid_max (at most 2^22), so 99999999 is no process.
  const std::string dead = "99999999", self = std::to_string(::getpid()), parent = std::to_string(::getppid());
  const std::string here = ".tmp." + host_token() + ".";
  const std::vector<std::string> removed_names = {"p.bin" + here + dead, "p.idx" + here + dead};
  const std::vector<std::string> kept_names = {
      "p.bin" + here + self,                   // this process
      "p.idx" + here + parent,                 // a running process
      "p.bin.tmp.otherhost0123456789." + dead,  // another host's: its pid says nothing here
      "p.idx.tmp." + dead,                     // an older trident's, host unknown
      "p.bin",                                 // outputs
      "p.idx",
      "p.bin" + here + "0" + dead,             // not a name a builder writes
      "p.bin" + here + dead + "x",
      "p.bin" + here,
      "p.bin" + here + "-5",
      "p.bin" + here + dead + ".bak",
      "p.txt" + here + dead,
      "q.bin" + here + dead,                   // other prefixes
      "p_x.bin" + here + dead,
      "xp.bin" + here + dead,
  };
  for (const auto& n : removed_names) write_file(dir / n, "stale");
  for (const auto& n : kept_names) write_file(dir / n, "keep");
  std::filesystem::create_directory(dir / ("p.idx" + here + "99999998"));  // not a regular file
  std::vector<std::string> removed = remove_stale_builder_temps(dir / "p");
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dir / removed_names[0], dir / removed_names[1]}));
  std::set<std::string> expected(kept_names.begin(), kept_names.end());
  expected.insert("p.idx" + here + "99999998");
  EXPECT_EQ(dir.files(), expected);
  EXPECT_TRUE(remove_stale_builder_temps(dir / "p").empty());
  EXPECT_TRUE(remove_stale_builder_temps(dir / "no/such/dir/p").empty());
  // A prefix without a directory part is looked up in the working directory.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  write_file("r.bin" + here + dead, "stale");
  removed = remove_stale_builder_temps("r");
  std::filesystem::current_path(cwd);
  EXPECT_EQ(removed, (std::vector<std::string>{"r.bin" + here + dead}));
  EXPECT_FALSE(std::filesystem::exists(dir / ("r.bin" + here + dead)));
}

// Expects IoError whose message names `file`.
void expect_rejected(const std::string& prefix, const std::string& file, const std::string& words) {
  try {
    IndexedDataset r(prefix);
    FAIL() << "accepted " << file;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(IndexedDataset, RejectsTruncatedAndForeignFiles) {
  ScratchDir dir;
  const std::string good = dir / "good";
  write_known(good, IndexDType::kUInt16);
  const std::string idx = read_file(good + ".idx"), bin = read_file(good + ".bin");
  auto make = [&](const std::string& name, const std::string& i, const std::string& b) {
    write_file(dir / (name + ".idx"), i);
    write_file(dir / (name + ".bin"), b);
    return dir / name;
  };
  expect_rejected(make("short_idx", idx.substr(0, idx.size() - 3), bin), "short_idx.idx", "truncated");
  expect_rejected(make("header_only", idx.substr(0, 20), bin), "header_only.idx", "");
  expect_rejected(make("empty_idx", "", bin), "empty_idx.idx", "magic");
  std::string foreign = idx;
  foreign[0] = 'X';
  expect_rejected(make("foreign", foreign, bin), "foreign.idx", "magic");
  std::string v2 = idx;
  v2[9] = 2;
  expect_rejected(make("v2", v2, bin), "v2.idx", "version");
  std::string dt = idx;
  dt[17] = 9;
  expect_rejected(make("dtype9", dt, bin), "dtype9.idx", "dtype");
  dt[17] = 6;  // float32 is a valid Megatron code but not tokens
  expect_rejected(make("dtype6", dt, bin), "dtype6.idx", "dtype");
  std::string huge = idx;  // item count that overflows when multiplied by 12
  const uint64_t n = (~0ull) / 4;
  std::memcpy(huge.data() + 18, &n, 8);
  expect_rejected(make("huge", huge, bin), "huge.idx", "truncated");
  expect_rejected(make("short_bin", idx, bin.substr(0, bin.size() - 2)), "short_bin.bin", "truncated");
  write_file(dir / "nobin.idx", idx);
  expect_rejected(dir / "nobin", "nobin.bin", "cannot open");
  expect_rejected(dir / "missing", "missing.idx", "cannot open");
  std::filesystem::create_directory(dir / "folder.idx");
  write_file(dir / "folder.bin", bin);
  expect_rejected(dir / "folder", "folder.idx", "not a regular file");
  // A prefix given with its file's suffix: the error says what a data path is.
  expect_rejected(good + ".bin", "good.bin.idx", "cannot open: No such file or directory (a data path is the prefix");
  expect_rejected(good + ".idx", "good.idx.idx", "(a data path is the prefix, without .bin or .idx)");
}

}  // namespace
}  // namespace trident
