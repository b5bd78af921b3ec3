// Runs a function with some environment variables set, then puts each back as it was: the
// benches time the kernels' environment switches (TRIDENT_ATTN_*, TRIDENT_GEMM_AUTOTUNE, ...),
// which the CUDA backend reads on every call, in one process.
#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace trident {

// `env`: assignments "VAR=value ...".
inline void with_env(const std::string& env, const std::function<void()>& f) {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  std::istringstream words(env);
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    const char* old = std::getenv(name.c_str());
    saved.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name.c_str(), w.substr(eq + 1).c_str(), 1);
  }
  struct Restore {  // also when f throws
    std::vector<std::pair<std::string, std::optional<std::string>>>& saved;
    ~Restore() {
      for (const auto& [name, old] : saved) {
        if (old)
          ::setenv(name.c_str(), old->c_str(), 1);
        else
          ::unsetenv(name.c_str());
      }
    }
  } restore{saved};
  f();
}

}  // namespace trident
