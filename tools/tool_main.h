// Shared main() wrapper: every tool reports a user error (a bad flag or a bad file) as one
// line, `trident-<tool>: error: <what>`, and exits 2; a bug or a runtime failure (a full
// disk included: StorageError) exits 3.
// Under MPI, user errors are normally seen identically by every rank (the same flags, the
// same vocabulary file, rank 0's data error passed to all), so rank 0 alone prints (another
// rank only after a wait, for an error it saw alone); other failures are printed by the
// rank that hit them (prefixed with its rank). Either way the caller (run_mpi_tool) then
// aborts the job.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "core/error.h"

namespace trident {

// A user's error (a bad flag or a bad file), or a storage failure, which every rank that
// writes to that storage may see: rank 0 prints it at once; another rank only after a wait,
// which rank 0's abort normally cuts short when every rank saw the same error, so that a
// rank that saw it alone still gets to say what it was. Returns `status`.
inline int user_error(const char* tool, const std::exception& e, int rank, int status = 2) {
  if (rank == 0) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::fprintf(stderr, "%s: error on rank %d: %s\n", tool, rank, e.what());
  }
  return status;
}

// A tool that succeeded but whose output did not all reach standard output (a full disk
// under a redirection, a closed stream) fails with one line on stderr, exit 3: a runtime
// failure, as a failed write of any other file is. (The errno of a write that failed before
// the last flush is gone: then the line guesses.)
inline int check_stdout_written(const char* tool) {
  const int err = std::fflush(stdout) != 0 ? errno : 0;
  if (!std::ferror(stdout)) return 0;
  if (err != 0)
    std::fprintf(stderr, "%s: error: standard output: a write failed: %s\n", tool, std::strerror(err));
  else
    std::fprintf(stderr, "%s: error: standard output: a write failed (a full disk?)\n", tool);
  return 3;
}

inline int run_tool(const char* tool, const std::function<int()>& body, int rank = 0, int world = 1) {
  try {
    const int rc = body();
    return rc == 0 ? check_stdout_written(tool) : rc;
  } catch (const ConfigError& e) {
    return user_error(tool, e, rank);
  } catch (const StorageError& e) {  // a full disk: a runtime failure, not the user's input
    return user_error(tool, e, rank, 3);
  } catch (const IoError& e) {
    return user_error(tool, e, rank);
  } catch (const InternalError& e) {
    const std::string where = world > 1 ? " on rank " + std::to_string(rank) : "";
    std::fprintf(stderr, "%s: internal error%s: %s\n", tool, where.c_str(), e.what());
    return 3;
  } catch (const std::exception& e) {  // a runtime failure (out of memory, ...): 3 at any world size
    const std::string where = world > 1 ? " on rank " + std::to_string(rank) : "";
    std::fprintf(stderr, "%s: error%s: %s\n", tool, where.c_str(), e.what());
    return 3;
  }
}

}  // namespace trident
