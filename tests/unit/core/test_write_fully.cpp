// write_fully against what the kernel does with a write it cannot take whole: a file that may
// not grow past 4 KiB (RLIMIT_FSIZE) takes part of an 8 KiB write, then refuses with EFBIG;
// a pipe with no reader refuses with EPIPE. Each case runs in a child process (the limit and
// the signal dispositions are the process's).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/write_fully.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

// Exits 0 when an 8 KiB write_fully into a file limited to 4 KiB wrote the first 4 KiB (the
// partial write, then the refusal) and returned EFBIG.
[[noreturn]] void write_past_the_file_limit(const std::string& path) {
  std::signal(SIGXFSZ, SIG_IGN);
  const rlimit small{4096, 4096};
  if (setrlimit(RLIMIT_FSIZE, &small) != 0) std::_Exit(10);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::_Exit(11);
  std::vector<char> bytes(8192, 'x');
  const int err = write_fully(fileno(f), bytes.data(), bytes.size());
  std::fclose(f);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  std::_Exit(err == EFBIG && !ec && size == 4096 ? 0 : 1);
}

TEST(WriteFully, APartialWriteThenTheErrorOfTheNext) {
  const std::string path = (fs::temp_directory_path() / ("trident_write_fully_" + std::to_string(getpid()))).string();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(write_past_the_file_limit(path), ::testing::ExitedWithCode(0), "");
  fs::remove(path);
}

[[noreturn]] void write_into_a_closed_pipe() {
  std::signal(SIGPIPE, SIG_IGN);
  int fds[2];
  if (pipe(fds) != 0) std::_Exit(10);
  close(fds[0]);
  const char byte = 'x';
  std::_Exit(write_fully(fds[1], &byte, 1) == EPIPE ? 0 : 1);
}

TEST(WriteFully, ErrnoOfAFailedWrite) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(write_into_a_closed_pipe(), ::testing::ExitedWithCode(0), "");
}

TEST(WriteFully, WholeBufferAndNothingToWrite) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text = "every byte";
  EXPECT_EQ(write_fully(fds[1], text.data(), text.size()), 0);
  EXPECT_EQ(write_fully(fds[1], nullptr, 0), 0);
  close(fds[1]);
  std::string got(64, '\0');
  const ssize_t n = read(fds[0], got.data(), got.size());
  close(fds[0]);
  ASSERT_EQ(n, static_cast<ssize_t>(text.size()));
  EXPECT_EQ(got.substr(0, static_cast<size_t>(n)), text);
}

}  // namespace
}  // namespace trident
