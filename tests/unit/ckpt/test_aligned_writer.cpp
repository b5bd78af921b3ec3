// AlignedWriter (the O_DIRECT streaming writer under checkpoint saves) and AtomicFileWriter
// in streaming mode: the file holds exactly the bytes given, for sizes around the 4096-byte
// block and the chunk size, with O_DIRECT and with buffered writes; the checksum is the
// one-shot XXH3 of the bytes; a file system that refuses O_DIRECT (here a device file), a
// direct write that cannot be completed (the padding of the last block does not fit under
// the file-size limit) and a full disk behave as documented.
#include "ckpt/aligned_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "ckpt/atomic_file.h"
#include "ckpt/checksum.h"
#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"

namespace trident {
namespace {

using testing::expect_io_error;
using testing::ScratchDir;
using testing::slurp;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = g();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

// Whether the file system under `dir` takes O_DIRECT (then the writer must use it).
bool supports_direct(const std::string& dir) {
  const std::string probe = dir + "/direct-probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

int create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  return fd;
}

// Writes `data` in uneven pieces (1 byte, then growing odd sizes) so that pieces straddle
// the block and chunk boundaries; returns whether every chunk went out with O_DIRECT.
bool write_file(const std::string& path, const std::string& data, AlignedWriterOptions opt, std::string* xxh3) {
  const int fd = create(path);
  bool direct = false;
  {
    AlignedWriter w(fd, path, opt);
    size_t at = 0, piece = 1;
    while (at < data.size()) {
      const size_t n = std::min(piece, data.size() - at);
      w.write(data.data() + at, n);
      at += n;
      piece = piece * 3 + 1;
    }
    EXPECT_EQ(w.size(), data.size());
    w.finish();
    *xxh3 = xxh3_hex(w.xxh3());
    direct = w.direct();
  }
  ::close(fd);
  return direct;
}

const size_t kSizes[] = {0, 1, 4095, 4096, 4097, 8191, 3 * 8192, 3 * 8192 + 5, (size_t{5} << 20) + 3};

TEST(AlignedWriter, ExactBytesWithDirectIo) {
  ScratchDir dir;
  const bool can_direct = supports_direct(dir.path());
  if (!can_direct) std::cout << "note: " << dir.path() << " refuses O_DIRECT: buffered fallback only\n";
  for (const size_t chunk : {size_t{8192}, size_t{16} << 20}) {  // many chunks; the default (one)
    for (const size_t n : kSizes) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", size " + std::to_string(n));
      const std::string data = random_bytes(n, static_cast<uint32_t>(n + chunk));
      const std::string path = dir / ("d" + std::to_string(chunk) + "-" + std::to_string(n));
      std::string h;
      const bool direct = write_file(path, data, {chunk, 2, true}, &h);
      EXPECT_EQ(direct, can_direct);
      EXPECT_EQ(std::filesystem::file_size(path), n);
      EXPECT_TRUE(slurp(path) == data) << "contents differ";
      EXPECT_EQ(h, checksum_bytes(data.data(), data.size()));
      EXPECT_EQ(h, checksum_file(path));
    }
  }
}

TEST(AlignedWriter, ExactBytesWithBufferedWrites) {
  ScratchDir dir;
  for (const int buffers : {2, 4}) {
    for (const size_t n : kSizes) {
      SCOPED_TRACE("buffers " + std::to_string(buffers) + ", size " + std::to_string(n));
      const std::string data = random_bytes(n, static_cast<uint32_t>(3 * n + 1));
      const std::string path = dir / ("b" + std::to_string(buffers) + "-" + std::to_string(n));
      std::string h;
      EXPECT_FALSE(write_file(path, data, {8192, buffers, false}, &h));
      EXPECT_TRUE(slurp(path) == data) << "contents differ";
      EXPECT_EQ(h, checksum_bytes(data.data(), data.size()));
    }
  }
}

TEST(AlignedWriter, WriteWithFillsConsecutivePieces) {
  ScratchDir dir;
  const std::string data = random_bytes(100'003, 5);
  const std::string path = dir / "fill";
  const int fd = create(path);
  {
    AlignedWriter w(fd, path, {8192, 2, true});
    w.write("head", 4);
    uint64_t expect_offset = 0;
    w.write_with(data.size(), [&](void* dst, uint64_t offset, size_t len) {
      EXPECT_EQ(offset, expect_offset);  // consecutive, from 0
      EXPECT_LE(len, size_t{8192});
      std::memcpy(dst, data.data() + offset, len);
      expect_offset += len;
    });
    EXPECT_EQ(expect_offset, data.size());
    w.finish();
    EXPECT_EQ(xxh3_hex(w.xxh3()), checksum_bytes(("head" + data).data(), data.size() + 4));
  }
  ::close(fd);
  EXPECT_TRUE(slurp(path) == "head" + data);
}

TEST(AlignedWriter, FallsBackWhereDirectIoIsRefused) {
  // A character device takes no O_DIRECT (fcntl says EINVAL): every write is buffered.
  const std::string data = random_bytes((size_t{3} << 20) + 17, 9);
  const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  AlignedWriter w(fd, "/dev/null", {1 << 20, 2, true});
  w.write(data.data(), data.size());
  w.finish();
  EXPECT_FALSE(w.direct());
  EXPECT_EQ(xxh3_hex(w.xxh3()), checksum_bytes(data.data(), data.size()));
  ::close(fd);
}

TEST(AlignedWriter, DiskFullIsANamedError) {
  const std::string data = random_bytes(50'000, 13);
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    AlignedWriter w(fd, "/dev/full", {8192, 2, true});
    expect_io_error<StorageError>(  // a full disk is the storage's failure (exit 3), not a bad path
        [&] {
          w.write(data.data(), data.size());  // the error may surface here or at finish()
          w.finish();
        },
        {"/dev/full", "write failed after 0 bytes", std::strerror(ENOSPC)});
  }
  ::close(fd);
}

TEST(AlignedWriter, AbandonedWriterStopsCleanly) {
  ScratchDir dir;
  const std::string data = random_bytes(1 << 20, 21);
  const std::string path = dir / "abandoned";
  const int fd = create(path);
  { AlignedWriter w(fd, path, {8192, 3, true}); w.write(data.data(), data.size()); }  // no finish()
  ::close(fd);
  EXPECT_LE(std::filesystem::file_size(path), data.size() + kDirectAlign);
}

// RLIMIT_FSIZE (with SIGXFSZ ignored) makes writes past the limit fail with EFBIG, like a
// disk that fills up at that size. Restored when the scope ends.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit l = old_;
    l.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &l) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
  bool ok_ = false;
};

TEST(AlignedWriter, LastBlockPaddingThatDoesNotFitFallsBackToBuffered) {
  // The file fits under the limit exactly, its zero padding to 4096 does not: the direct
  // write of the last block is cut short, the writer finishes it with buffered writes.
  ScratchDir dir;
  const std::string data = random_bytes(3 * 8192 + 1000, 17);
  const std::string path = dir / "tight";
  std::string h;
  {
    FileSizeLimit limit(data.size());
    ASSERT_TRUE(limit.ok());
    write_file(path, data, {8192, 2, true}, &h);
  }
  EXPECT_EQ(std::filesystem::file_size(path), data.size());
  EXPECT_TRUE(slurp(path) == data) << "contents differ";
  EXPECT_EQ(h, checksum_bytes(data.data(), data.size()));
}

TEST(AtomicFileWriterStreaming, FullDiskLeavesNothingAndNamesTheFile) {
  ScratchDir dir;
  const std::string path = dir / "big.safetensors";
  const std::string data = random_bytes(1 << 20, 23);
  const float x[1] = {1};
  write_safetensors(path, {{"x", StDType::F32, {1}, x}});  // an older file that must survive
  const std::string before = slurp(path);
  {
    FileSizeLimit limit(300'000);
    ASSERT_TRUE(limit.ok());
    expect_io_error<StorageError>(
        [&] {
          write_safetensors(path, {{"t", StDType::U8, {static_cast<int64_t>(data.size())}, data.data()}});
        },
        {path, "write failed after", std::strerror(EFBIG)});
  }
  EXPECT_EQ(slurp(path), before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
}

TEST(AtomicFileWriterStreaming, MatchesPlainWriter) {
  ScratchDir dir;
  const std::string data = random_bytes((size_t{2} << 20) + 99, 29);
  {
    AtomicFileWriter w(dir / "plain");
    w.write(data);
    w.commit();
  }
  AtomicFileWriter w(dir / "streamed", AlignedWriterOptions{65536, 2, true});
  w.write(data.data(), 10);
  w.write(data.data() + 10, data.size() - 10);
  w.commit();
  EXPECT_EQ(w.bytes_written(), data.size());
  EXPECT_EQ(w.xxh3(), checksum_bytes(data.data(), data.size()));
  EXPECT_TRUE(slurp(dir / "plain") == slurp(dir / "streamed"));
  EXPECT_EQ(w.wrote_direct(), supports_direct(dir.path()));
}

// What a path names decides how it is written: a link is replaced by the file (its target
// untouched), a FIFO is written in place (it stays a FIFO) and not even opened by a writer
// that writes nothing (a probe), the process's own standard output is written where it
// stands; a directory, or a FIFO for a streaming file, is an error naming the path; nothing
// else appears next to them.
TEST(AtomicFileWriter, ReplacesLinksAndWritesFifosAndStdoutInPlace) {
  ScratchDir dir;
  const std::string target = dir / "target.txt", link = dir / "link.txt";
  write_file_atomic(target, "old");
  std::filesystem::create_symlink("target.txt", link);
  write_file_atomic(link, "new");
  EXPECT_FALSE(std::filesystem::is_symlink(link));
  EXPECT_EQ(slurp(link), "new");
  EXPECT_EQ(slurp(target), "old");

  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  { AtomicFileWriter probe(fifo); }  // no reader: opening for writing would wait forever
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // so the writer's open does not wait
  ASSERT_GE(reader, 0);
  write_file_atomic(fifo, "through the pipe");
  char buf[64] = {};
  const ssize_t got = ::read(reader, buf, sizeof buf);
  ::close(reader);
  EXPECT_EQ(std::string(buf, got > 0 ? static_cast<size_t>(got) : 0), "through the pipe");
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  expect_io_error([&] { AtomicFileWriter w(fifo, AlignedWriterOptions{65536, 2, true}); },
                  {fifo + ": not a regular file"});
  const std::string sub = dir / "sub";
  std::filesystem::create_directory(sub);
  expect_io_error([&] { write_file_atomic(sub, "x"); }, {sub + ": is a directory"});
  // A path that cannot be written at all is the user's to fix (exit 2), not the storage's failure.
  try {
    write_file_atomic(target + "/below", "x");  // under a file: ENOTDIR
    ADD_FAILURE() << "wrote under a file";
  } catch (const StorageError& e) {
    ADD_FAILURE() << "a StorageError: " << e.what();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENOTDIR)), std::string::npos) << e.what();
  }

  // Standard output redirected to a log (>>): the log keeps its earlier lines.
  const std::string log = dir / "log.txt";
  const int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(file, 0);
  ASSERT_EQ(::write(file, "earlier\n", 8), 8);
  std::fflush(stdout);
  const int saved = ::dup(1);
  ASSERT_GE(::dup2(file, 1), 0);
  write_file_atomic("/proc/self/fd/1", "generated\n");
  ::dup2(saved, 1);
  ::close(saved);
  ::close(file);
  EXPECT_EQ(slurp(log), "earlier\ngenerated\n");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 5) << "target, link, fifo, sub and log only: no temporary left";
}

}  // namespace
}  // namespace trident
