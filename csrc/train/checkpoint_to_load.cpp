#include "train/checkpoint_to_load.h"

#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "ckpt/offline_checkpoint.h"
#include "core/error.h"

namespace trident {
namespace fs = std::filesystem;

std::optional<fs::path> checkpoint_to_load(const TrainOptions& o) {
  const fs::path load = o.load;
  if (o.ckpt_step >= 0) return resolve_checkpoint_dir(load, o.ckpt_step, "--ckpt-step");
  std::error_code ec;
  const bool exists = fs::exists(fs::status(load, ec));
  if (exists && !fs::is_directory(load, ec)) throw ConfigError("--load: not a directory: " + load.string());
  if (exists && fs::exists(load / kMetadataFileName, ec)) return resolve_checkpoint_dir(load, std::nullopt);
  // Megatron's rule: the non-persistent checkpoint when it is as new as --load's or newer.
  const std::optional<int64_t> persistent = exists ? find_latest_iteration(load) : std::nullopt;
  const std::vector<int64_t> iterations = persistent ? std::vector<int64_t>{} : list_iterations(load);
  if (!iterations.empty())
    throw ConfigError("--load: " + load.string() + " holds " + iteration_dir_name(iterations.front()) +
                      (iterations.size() > 1 ? " .. " + iteration_dir_name(iterations.back()) : "") + " but no " +
                      kLatestFileName + ": give --ckpt-step N to load one of them");
  if (!o.non_persistent_ckpt_type.empty()) {
    const fs::path np = o.non_persistent_dir(o.load);
    if (const std::optional<int64_t> it = find_latest_iteration(np); it && (!persistent || *it >= *persistent))
      return resolve_checkpoint_dir(np, std::nullopt);
  }
  if (persistent) return resolve_checkpoint_dir(load, std::nullopt);
  if (o.exit_on_missing_checkpoint)
    throw ConfigError("--exit-on-missing-checkpoint: --load " + load.string() +
                      (exists ? " holds no checkpoint" : " does not exist"));
  return std::nullopt;
}

}  // namespace trident
