// write(2) of a whole buffer: retried after a signal (EINTR) and after a partial write, as a
// pipe, a socket or a nearly full disk give them.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace trident {

// 0 when all `n` bytes of `data` went to `fd`, else the errno of the write that failed (EIO
// for a write that made no progress and gave no error).
inline int write_fully(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace trident
