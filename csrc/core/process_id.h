// Who wrote a temporary file: names of temporaries carry the writer's host and pid, so that a
// later run can tell an abandoned one (this host, a pid that no longer runs) from one that
// another process, here or on another host sharing the file system, is still writing.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace trident {

// This host's name as gethostname gives it ("localhost" when it gives none), for messages.
std::string host_name();

// This host's name, its letters and digits only, at most 32 ("host" when none are left).
std::string host_token();

// Whether no process `pid` runs on this host: none exists (kill(pid, 0) fails with ESRCH), or
// it has exited and waits to be reaped (a zombie). A pid that runs may be another process that
// reused it, so "not gone" proves nothing.
bool process_is_gone(pid_t pid);

// ".tmp.<host_token()>.": what a writer puts between a file's name and its pid to name a
// temporary `<file>.tmp.<host>.<pid>[.<anything>]`.
std::string host_temp_tag();

// Removes, for each name in `files` (paths in one directory), the temporaries
// `<name>.tmp.<this host>.<pid>` (with `then_suffix`: `<name>.tmp.<this host>.<pid>.<anything>`)
// whose process is gone (not this process, not a running one, not another host's: on a
// shared file system a run there may still write them; regular files only). Returns the
// paths removed.
std::vector<std::string> remove_dead_writers_files(const std::vector<std::filesystem::path>& files,
                                                   bool then_suffix = false);

}  // namespace trident
