// Typed errors. Config and I/O problems throw one of these; each tool's main() catches
// them, prints `trident-<tool>: error: <message>` and exits 2, or 3 for a StorageError
// (see tool_main.h).
// CUDA/NCCL/MPI failures do not throw: they abort the job with the call, file and line.
#pragma once

#include <cerrno>
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

// The storage failed a write that was valid: a full disk or quota, a file-size limit, an I/O
// error. Not the user's input: the tools exit 3 (a runtime failure, which a rerun with room
// gets past) where a path that cannot be written at all (no such folder, no permission) is an
// IoError, exit 2. Caught as an IoError everywhere else: its clean-up is the same.
class StorageError : public IoError {
 public:
  using IoError::IoError;
};

// Whether errno `err` of a failed write or sync says the storage ran out or failed.
inline bool storage_failed(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG || err == EIO; }

// Throws `message` (which names the file and says what failed) as a StorageError when errno
// `err` is the storage's failure, else as an IoError (or the `Otherwise` given: a ConfigError
// for a flag's file).
template <typename Otherwise = IoError>
[[noreturn]] void throw_write_failure(const std::string& message, int err) {
  if (storage_failed(err)) throw StorageError(message);
  throw Otherwise(message);
}

// Rethrows `e` with `prefix` (a flag's name) before its message: a StorageError stays one
// (exit 3), any other becomes a ConfigError (the flag's value to fix: exit 2).
[[noreturn]] inline void throw_for_flag(const std::string& prefix, const IoError& e) {
  if (dynamic_cast<const StorageError*>(&e) != nullptr) throw StorageError(prefix + e.what());
  throw ConfigError(prefix + e.what());
}

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
