// Helpers shared by the data pipeline tests: a scratch directory and a byte-level stub
// tokenizer (one id per byte), so the tests do not depend on the GPT-2 files.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace trident::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "trident-data-XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  std::set<std::string> files() const {  // names of the files inside
    std::set<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(path_)) out.insert(e.path().filename().string());
    return out;
  }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// id = byte value + base; eod = 256 + base. base 0 -> vocab 257 (uint16 output);
// base 70000 -> vocab 70257 (int32 output).
class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(int32_t base = 0) : base_(base) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(base_ + c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id - base_));
    return s;
  }
  int64_t vocab_size() const override { return base_ + 257; }
  int32_t eod() const override { return base_ + 256; }
  std::string name() const override { return "ByteTokenizer"; }

 private:
  int32_t base_;
};

}  // namespace trident::testing
