// Helpers shared by the checkpoint tests: a scratch directory and raw file edits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"

namespace trident::testing {

// A fresh directory under $TMPDIR (or /tmp), removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/trident-ckpt-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `fn`, expects an IoError whose message contains every one of `parts`.
template <typename Fn>
void expect_io_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message spans lines: " << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected IoError, got: " << e.what();
  }
}

}  // namespace trident::testing
