// Who wrote a temporary file: names of temporaries carry the writer's host and pid, so that a
// later run can tell an abandoned one (this host, a pid that no longer runs) from one that
// another process, here or on another host sharing the file system, is still writing.
#pragma once

#include <sys/types.h>

#include <string>

namespace trident {

// This host's name, its letters and digits only, at most 32 ("host" when none are left).
std::string host_token();

// Whether no process `pid` exists on this host (kill(pid, 0) fails with ESRCH). A pid that
// exists may be another process that reused it, so "not gone" proves nothing.
bool process_is_gone(pid_t pid);

}  // namespace trident
