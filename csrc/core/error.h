// Typed errors. Config and I/O problems throw one of these; each tool's main() catches
// them, prints `trident-<tool>: error: <message>` and exits 2 (see tool_main.h).
// CUDA/NCCL/MPI failures do not throw: they abort the job with the call, file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace trident {

// Base of every error a user can cause (bad flag, bad file, bad shape).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A bad command-line flag or config key; the message names the flag.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A missing, truncated or malformed file; the message names the file (and line).
class IoError : public Error {
 public:
  using Error::Error;
};

// An internal invariant was violated (a bug, not bad input).
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace trident

// Throws InternalError with file:line when `cond` is false.
#define TRIDENT_CHECK(cond, ...)                                                    \
  do {                                                                              \
    if (!(cond))                                                                    \
      throw ::trident::InternalError(::trident::detail::concat(                     \
          "check failed: " #cond " (", __FILE__, ":", __LINE__, ") ", ##__VA_ARGS__)); \
  } while (0)
