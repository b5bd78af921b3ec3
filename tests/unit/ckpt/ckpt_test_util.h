// Helpers shared by the checkpoint tests: a scratch directory and raw file edits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "core/error.h"
#include "model/config.h"

namespace trident::testing {

// A GPT-2 small enough to check element by element: C = 16, 4 heads of 4, F = 64,
// vocabulary 300 padded to multiples of 8 x tp.
inline ModelConfig small_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.seq_length = 12;
  c.max_position_embeddings = 12;
  c.vocab_size = 300;
  c.make_vocab_size_divisible_by = 8;
  c.init_method_std = 0.02f;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

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
// The message of the IoError `fn` throws; "no error" when it throws none.
inline std::string io_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `fn`, expects an IoError (or the kind of IoError given, e.g. StorageError for a full
// disk) whose message contains every one of `parts`.
template <typename Expected = IoError, typename Fn>
void expect_io_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an IoError";
  } catch (const Expected& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message spans lines: " << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected another kind of error, got: " << e.what();
  }
}

}  // namespace trident::testing
