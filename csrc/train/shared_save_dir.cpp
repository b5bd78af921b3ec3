#include "train/shared_save_dir.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "ckpt/atomic_file.h"
#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "core/process_id.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"

namespace trident {
namespace fs = std::filesystem;

namespace {

// Removes the probe files that earlier runs left behind (killed between writing and removing
// theirs): rank 0 holds the directory's save lock, so no other run's check is under way.
void remove_old_probes(const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().rfind(kSharedDirProbePrefix, 0) == 0) fs::remove(it->path(), ec);
}

// "" when `path` holds `expected`, else what this rank saw.
std::string probe_seen(const fs::path& path, const std::string& expected, double wait_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  std::string seen;
  for (;;) {
    std::error_code ec;
    // Reading the directories asks the file system for them again (an NFS client revalidates a
    // directory it opens), which may end a cached "no such file" sooner.
    for (const fs::path& d : {path.parent_path().parent_path(), path.parent_path()})
      for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      }
    if (!fs::exists(path, ec)) {
      seen = "no such file";
    } else {
      try {
        if (read_file(path.string()) == expected) return "";
        seen = "another run's contents";
      } catch (const IoError& e) {
        seen = e.what();
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

void check_every_rank_sees_dir(const std::string& dir, const std::string& flag, ParallelContext& par,
                               double wait_seconds) {
  if (par.world_size() == 1) return;
  const CollectiveTimeoutSuspended io;  // a rank's wait for a slow file system has no time limit
  Comm& world = *par.world;
  const bool root = par.world_rank() == 0;
  std::string token;
  // Rank 0's probe failing (a full disk stays a StorageError on every rank) stops them all.
  run_sharing_first_failure(world, [&] {
    if (!root) return;
    token = make_save_token();
    try {
      remove_old_probes(dir);
      write_file_atomic((fs::path(dir) / (kSharedDirProbePrefix + token)).string(), token + "\n");
    } catch (const IoError& e) {
      throw_for_flag(flag + ": ", e);
    } catch (const Error& e) {
      throw ConfigError(flag + ": " + e.what());
    }
  });
  broadcast_string(world, token, 0);
  const fs::path probe = fs::path(dir) / (kSharedDirProbePrefix + token);
  std::string mine = probe_seen(probe, token + "\n", wait_seconds);
  if (!mine.empty()) {
    mine = "rank " + std::to_string(par.world_rank()) + " (host " + host_name() + ") does not see the file rank 0 wrote in " +
           "its " + flag + " " + dir + " (" + probe.filename().string() + ": " + mine + ")";
  }
  const std::string failure = first_failure(world, mine);  // every rank has looked
  if (root) {
    std::error_code ec;
    fs::remove(probe, ec);
  }
  if (!failure.empty())
    throw ConfigError(flag + ": " + failure + ": the checkpoint directory must be one that every rank shares (each "
                      "writes its part of a save there and rank 0 commits them), or no checkpoint of the run loads; "
                      "for node-local storage use --non-persistent-ckpt-type local");
}

}  // namespace trident
