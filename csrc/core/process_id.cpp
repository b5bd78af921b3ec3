#include "core/process_id.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace trident {

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

std::string host_token() {
  const std::string host = host_name();
  std::string h;
  for (const char* c = host.c_str(); *c && h.size() < 32; ++c)
    if (std::isalnum(static_cast<unsigned char>(*c))) h += *c;
  return h.empty() ? std::string("host") : h;
}

bool process_is_gone(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // An exited process that its parent has not reaped yet (mpirun's ranks for a moment; in a
  // container whose first process reaps nothing, for good) still takes signals: it is gone
  // when /proc says it is a zombie (state Z, after the parenthesised command name) of one
  // thread. (A live process whose main thread has exited shows Z too, with its other threads.)
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream stat(proc + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z') return false;
  std::ifstream status(proc + "/status");
  for (std::string field; std::getline(status, field);)
    if (field.rfind("Threads:", 0) == 0) return std::stol(field.substr(8)) <= 1;
  return false;
}

std::string host_temp_tag() { return ".tmp." + host_token() + "."; }

namespace {

// The pid that is `s` (with `then_suffix`: that starts `s`, up to a '.' that something
// follows): decimal digits without a leading zero, 1 .. INT_MAX.
std::optional<pid_t> leading_pid(std::string_view s, bool then_suffix) {
  if (then_suffix) {
    const size_t dot = s.find('.');
    if (dot == std::string_view::npos || dot + 1 == s.size()) return std::nullopt;
    s = s.substr(0, dot);
  }
  if (s.empty() || s.size() > 10 || s[0] == '0') return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<pid_t>(v);
}

}  // namespace

std::vector<std::string> remove_dead_writers_files(const std::vector<std::filesystem::path>& files,
                                                   bool then_suffix) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  if (files.empty()) return removed;
  const fs::path dir = files.front().has_parent_path() ? files.front().parent_path() : fs::path(".");
  std::vector<std::string> heads;
  for (const fs::path& f : files) heads.push_back(f.filename().string() + host_temp_tag());
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const std::string& head : heads) {
      if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0) continue;
      const std::optional<pid_t> pid = leading_pid(std::string_view(name).substr(head.size()), then_suffix);
      if (!pid || *pid == ::getpid() || !process_is_gone(*pid)) continue;
      std::error_code type_ec;
      if (!fs::is_regular_file(it->symlink_status(type_ec))) continue;
      stale.push_back(files.front().parent_path() / name);  // just `name` when the files have no folder
    }
  }
  for (const fs::path& f : stale)
    if (::unlink(f.c_str()) == 0) removed.push_back(f.string());
  return removed;
}

}  // namespace trident
