// The TensorBoard writer, checked by an independent reader (read_tfevents.py: its own
// CRC32C, TFRecord framing and hand-decoded protobuf wire format with TensorFlow's field
// numbers), comparing tags, steps, values and wall times bit for bit.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/tensorboard.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

struct Scalar {
  std::string tag;
  double value;
  int64_t step;
  double wall_time;
};

struct ReaderResult {
  int status = -1;
  std::vector<std::string> lines;
};

ReaderResult read_events(const std::string& path) {
  const std::string cmd = std::string(TRIDENT_PYTHON3) + " " + TRIDENT_READ_TFEVENTS + " '" + path + "' 2>&1";
  ReaderResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  r.status = pclose(p);
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) r.lines.push_back(line);
  return r;
}

std::string hex(const std::string& s) {
  if (s.empty()) return "-";
  std::string h;
  char b[3];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof(b), "%02x", c);
    h += b;
  }
  return h;
}

std::string bits32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  char b[16];
  std::snprintf(b, sizeof(b), "%08x", u);
  return b;
}

std::string bits64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  char b[24];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(u));
  return b;
}

std::string expected_line(const Scalar& s) {
  return "scalar " + std::to_string(s.step) + " " + hex(s.tag) + " " + bits32(static_cast<float>(s.value)) + " " +
         bits64(s.wall_time);
}

class TensorBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trident_tb_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(Crc32c, KnownVectors) {
  // RFC 3720 appendix B.4 and the usual check value.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  // Incremental use continues the same CRC.
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), 0xE3069283u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST(Crc32c, FrameLayout) {
  const std::string f = tfrecord_frame("abc");
  ASSERT_EQ(f.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(std::string(f.data(), 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, f.data() + 8, 4);
  std::memcpy(&data_crc, f.data() + 15, 4);
  EXPECT_EQ(len_crc, masked_crc32c(f.data(), 8));
  EXPECT_EQ(f.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, masked_crc32c("abc", 3));
}

TEST_F(TensorBoardTest, ScalarsRoundTripThroughAnIndependentReader) {
  const std::vector<Scalar> in = {
      {"lm loss", 7.123456789, 1, 1700000000.25},
      {"learning-rate/lr", 6e-4, 1, 1700000000.5},
      {"lm loss", 6.5, 2, 1700000001.125},
      {"loss-scale", 4294967296.0, 0, 1700000002.0},
      {"grad-norm", -0.0, 3, 1.0},
      {"big step", 1e30, (int64_t{1} << 40) + 7, 1700000003.0625},
      {"negative step", -2.5, -5, 1700000004.0},
      {"tiny", 1.401298464324817e-45, 127, 1700000005.0},
      {"nan", std::numeric_limits<double>::quiet_NaN(), 128, 1700000006.0},
      {"inf", std::numeric_limits<double>::infinity(), 300, 1700000007.0},
      {"ünïcode/τ", 0.1, 16384, 1700000008.0},
  };
  std::string path;
  {
    TensorBoardWriter w(dir_.string());
    path = w.path();
    for (const Scalar& s : in) w.add_scalar(s.tag, s.value, s.step, s.wall_time);
  }  // the destructor flushes
  EXPECT_EQ(fs::path(path).parent_path(), dir_);
  const std::string name = fs::path(path).filename().string();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find(std::string(".") + host), std::string::npos) << name;
  const ReaderResult r = read_events(path);
  ASSERT_EQ(r.status, 0) << (r.lines.empty() ? "" : r.lines[0]);
  ASSERT_EQ(r.lines.size(), in.size() + 1);
  EXPECT_EQ(r.lines[0].rfind("version brain.Event:2 ", 0), 0u) << r.lines[0];
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(r.lines[i + 1], expected_line(in[i])) << in[i].tag;
}

TEST_F(TensorBoardTest, DefaultWallTimeIsNowAndFlushWritesEverything) {
  TensorBoardWriter w(dir_.string());
  const double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (int i = 0; i < 500; ++i) w.add_scalar("train/loss", 10.0 / (i + 1), i);
  w.flush();  // no destructor yet: the file must already be complete
  const double after = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const ReaderResult r = read_events(w.path());
  ASSERT_EQ(r.status, 0) << (r.lines.empty() ? "" : r.lines[0]);
  ASSERT_EQ(r.lines.size(), 501u);
  for (int i = 0; i < 500; ++i) {
    std::istringstream is(r.lines[i + 1]);
    std::string kind, tag, value, wall;
    int64_t step;
    is >> kind >> step >> tag >> value >> wall;
    EXPECT_EQ(step, i);
    EXPECT_EQ(tag, hex("train/loss"));
    EXPECT_EQ(value, bits32(static_cast<float>(10.0 / (i + 1))));
    uint64_t u = std::stoull(wall, nullptr, 16);
    double t;
    std::memcpy(&t, &u, 8);
    EXPECT_GE(t, std::floor(before));
    EXPECT_LE(t, after + 1);
  }
  // More scalars after a flush land in the same file.
  w.add_scalar("train/loss", 0.5, 500, 2.0);
  w.flush();
  const ReaderResult r2 = read_events(w.path());
  ASSERT_EQ(r2.status, 0);
  ASSERT_EQ(r2.lines.size(), 502u);
  EXPECT_EQ(r2.lines.back(), expected_line({"train/loss", 0.5, 500, 2.0}));
}

TEST_F(TensorBoardTest, ReaderRejectsCorruptedCrcs) {
  std::string path;
  {
    TensorBoardWriter w(dir_.string());
    path = w.path();
    w.add_scalar("a", 1.0, 1, 3.0);
  }
  ASSERT_EQ(read_events(path).status, 0);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto corrupt = [&](size_t at) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0x01);
    const std::string p = (dir_ / "corrupt.tfevents").string();
    std::ofstream(p, std::ios::binary) << b;
    return read_events(p);
  };
  uint64_t first_len;
  std::memcpy(&first_len, bytes.data(), 8);
  const size_t second = 8 + 4 + first_len + 4;
  ASSERT_GT(bytes.size(), second + 12);
  const ReaderResult data_bad = corrupt(second + 12 + 2);  // a byte of the second record's data
  EXPECT_NE(data_bad.status, 0);
  ASSERT_FALSE(data_bad.lines.empty());
  EXPECT_NE(data_bad.lines[0].find("data CRC"), std::string::npos) << data_bad.lines[0];
  const ReaderResult len_crc_bad = corrupt(second + 9);  // the second record's length CRC
  EXPECT_NE(len_crc_bad.status, 0);
  ASSERT_FALSE(len_crc_bad.lines.empty());
  EXPECT_NE(len_crc_bad.lines[0].find("length CRC"), std::string::npos) << len_crc_bad.lines[0];
  const ReaderResult tail_bad = corrupt(bytes.size() - 1);  // the last data CRC itself
  EXPECT_NE(tail_bad.status, 0);
}

TEST_F(TensorBoardTest, ReaderRejectsAWrongFieldNumber) {
  // A well-framed record whose Event uses field 9 for the summary (a common mistake)
  // must be refused: the reader knows TensorFlow's numbers, not ours.
  std::string ev;
  ev += '\x09';  // wall_time, fixed64
  ev.append(8, '\0');
  ev += static_cast<char>((9 << 3) | 2);  // field 9, length-delimited
  const std::string value = std::string("\x0a\x01x\x15", 4) + std::string("\0\0\x80\x3f", 4);  // tag "x", 1.0f
  const std::string summary = std::string("\x0a", 1) + static_cast<char>(value.size()) + value;
  ev += static_cast<char>(summary.size());
  ev += summary;
  std::string version = "\x1a\x0d" "brain.Event:2";
  fs::create_directories(dir_);
  const std::string p = (dir_ / "wrong.tfevents").string();
  std::ofstream(p, std::ios::binary) << tfrecord_frame(version) << tfrecord_frame(ev);
  const ReaderResult r = read_events(p);
  EXPECT_NE(r.status, 0);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_NE(r.lines[0].find("field 9"), std::string::npos) << r.lines[0];
  // The same bytes with field 5 are accepted and decoded.
  ev[9] = static_cast<char>((5 << 3) | 2);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << tfrecord_frame(version) << tfrecord_frame(ev);
  const ReaderResult ok = read_events(p);
  ASSERT_EQ(ok.status, 0) << (ok.lines.empty() ? "" : ok.lines[0]);
  ASSERT_EQ(ok.lines.size(), 2u);
  EXPECT_EQ(ok.lines[1], "scalar 0 78 3f800000 0000000000000000");
}

TEST_F(TensorBoardTest, TwoWritersInOneDirectoryGetTwoFiles) {
  TensorBoardWriter a(dir_.string()), b(dir_.string());
  EXPECT_NE(a.path(), b.path());
  a.add_scalar("x", 1, 1, 5.0);
  b.add_scalar("x", 2, 1, 5.0);
  a.flush();
  b.flush();
  EXPECT_EQ(read_events(a.path()).lines.back(), expected_line({"x", 1, 1, 5.0}));
  EXPECT_EQ(read_events(b.path()).lines.back(), expected_line({"x", 2, 1, 5.0}));
}

// A full queue makes add_scalar wait for room: every scalar arrives, in order (an
// 8-entry queue against 20000 scalars fills many times over).
TEST_F(TensorBoardTest, BoundedQueueWaitsForRoomAndLosesNothing) {
  std::string path;
  const int n = 20000;
  {
    TensorBoardWriter w(dir_.string(), 8);
    path = w.path();
    for (int i = 0; i < n; ++i) w.add_scalar("q", i, i, 1.0);
    w.flush();
  }
  const ReaderResult r = read_events(path);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(r.lines.size(), static_cast<size_t>(n) + 1);
  for (int i = 0; i < n; ++i) ASSERT_EQ(r.lines[i + 1], expected_line({"q", static_cast<double>(i), i, 1.0})) << i;
}

// A death test's child as on a full disk: no file may grow past 4 KiB (RLIMIT_FSIZE, with
// SIGXFSZ ignored, so that the write fails), and alarm() ends a hang.
void limit_files_to_4_kib() {
  alarm(60);
  std::signal(SIGXFSZ, SIG_IGN);
  const rlimit small{4096, 4096};
  setrlimit(RLIMIT_FSIZE, &small);
}

bool names_the_event_file(const IoError& e) {
  return std::string(e.what()).find("events.out.tfevents.") != std::string::npos;
}

// Writes scalars through a 2-entry queue into a file that cannot grow past 4 KiB and exits 0
// when add_scalar threw IoError naming the event file (the run stops at a scalar, not at the
// end).
[[noreturn]] void write_until_the_file_cannot_grow(const fs::path& dir) {
  limit_files_to_4_kib();
  int code = 1;
  try {
    TensorBoardWriter w(dir.string(), 2);
    for (int i = 0; i < 1000000; ++i) w.add_scalar("train/lm-loss-long-tag-name", i, i);
    code = 3;
    w.flush();
  } catch (const IoError& e) {
    if (code == 1) code = names_the_event_file(e) ? 0 : 2;
  }
  std::_Exit(code);
}

// A failed write stops add_scalar also while it waits for room in a full queue: it never
// hangs and never goes on silently.
TEST_F(TensorBoardTest, FailedWriteStopsAddScalarWhileTheQueueIsFull) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(write_until_the_file_cannot_grow(dir_), ::testing::ExitedWithCode(0), "");
}

// close() writes everything queued and closes the file; a second close() does nothing, and
// the writer refuses scalars after it.
TEST_F(TensorBoardTest, CloseWritesEverythingOnce) {
  TensorBoardWriter w(dir_.string());
  for (int i = 0; i < 100; ++i) w.add_scalar("x", i, i, 3.0);
  w.close();
  const ReaderResult r = read_events(w.path());
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(r.lines.size(), 101u);
  EXPECT_EQ(r.lines.back(), expected_line({"x", 99, 99, 3.0}));
  EXPECT_NO_THROW(w.close());
  EXPECT_THROW(w.add_scalar("x", 1, 100, 3.0), InternalError);
  EXPECT_THROW(w.flush(), InternalError);
}

// Queues scalars that cannot all fit in a file limited to 4 KiB while the writer's thread is
// held (the test hook), so that the write fails only after the last add_scalar: exits 0 when
// close() threw IoError naming the event file.
[[noreturn]] void close_after_a_failed_write(const fs::path& dir) {
  limit_files_to_4_kib();
  setenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S", "0.5", 1);
  int code = 1;
  try {
    TensorBoardWriter w(dir.string());
    for (int i = 0; i < 200; ++i) w.add_scalar("train/lm-loss-long-tag-name", i, i);
    code = 2;
    w.close();
    code = 3;
  } catch (const IoError& e) {
    if (code == 2) code = names_the_event_file(e) ? 0 : 4;
  }
  std::_Exit(code);
}

TEST_F(TensorBoardTest, CloseReportsAFailedWrite) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(close_after_a_failed_write(dir_), ::testing::ExitedWithCode(0), "");
}

// An error that unwinds past the writer while its thread is stuck on the disk (held 60 s
// here by the test hook) leaves after a few seconds: the thread finishes on its own.
TEST_F(TensorBoardTest, AnErrorDoesNotWaitForAStuckWriterThread) {
  ASSERT_EQ(setenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S", "60", 1), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        TensorBoardWriter w(dir_.string());
        unsetenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S");
        w.add_scalar("x", 1, 1);
        throw IoError("a failure while the thread writes");
      },
      IoError);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsetenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S");
  EXPECT_LT(s, 30.0);
}

// The same error with a disk that answers (the thread held 0.5 s) still writes every scalar
// queued before it: a run stopped by NaN losses keeps the scalars of its last iterations.
TEST_F(TensorBoardTest, AnErrorStillWritesTheQueuedScalars) {
  ASSERT_EQ(setenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S", "0.5", 1), 0);
  std::string path;
  EXPECT_THROW(
      {
        TensorBoardWriter w(dir_.string());
        unsetenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S");
        path = w.path();
        for (int i = 0; i < 50; ++i) w.add_scalar("lm loss", i, i, 4.0);
        throw ConfigError("the loss was NaN");
      },
      ConfigError);
  unsetenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S");
  const ReaderResult r = read_events(path);
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(r.lines.size(), 51u);
  EXPECT_EQ(r.lines.back(), expected_line({"lm loss", 49, 49, 4.0}));
}

TEST_F(TensorBoardTest, UncreatableDirectoryNamesTheFlag) {
  fs::create_directories(dir_);
  const std::string file = (dir_ / "plain_file").string();
  std::ofstream(file) << "x";
  try {
    TensorBoardWriter w(file + "/sub");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard-dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trident
