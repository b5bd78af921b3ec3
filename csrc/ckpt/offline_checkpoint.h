// Writing a trident checkpoint from one process, for any (tp, pp) layout, without a model or
// a process grid: the offline counterpart of Trainer::save_checkpoint (train/
// trainer_checkpoint.cpp), used by trident-convert to consolidate, reshard and import.
//
// The files follow the trainer's conventions exactly (sharded_checkpoint.h): in
// ROOT/iter_NNNNNNN/, one rank folder per (tp, pp) coordinate (rank_dir_name) holding
//   model.safetensors        that rank's TP slice of each parameter its stage holds (layers of
//                            its range; wte and wpe on the first stage, wte and ln_f on the
//                            last), under the canonical name, in the model's dtype;
//   optim_dp0000.safetensors (unless without optimizer state) master, exp_avg and exp_avg_sq
//                            of the same slices, fp32, one piece per tensor starting at local
//                            index 0 (dp 1, zero 0);
// each file's __metadata__ has tp, tp_rank, pp_rank and dp_rank; metadata.json lists every
// file with size and XXH3 checksum. Everything is written into ROOT/iter_NNNNNNN.tmp-<token>
// and committed (rename, then the latest pointer: checkpoint_dir.h); on any error the
// temporary directory is removed and ROOT is left as it was.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/metadata.h"

namespace trident {

// A full canonical fp32 tensor in the stored form (the word embedding without vocabulary
// padding: canonical_slices.h) of parameter `name`; `state` is nullptr for the parameter,
// else "master", "exp_avg" or "exp_avg_sq".
using CanonicalTensorSource = std::function<std::vector<float>(const std::string& name, const char* state)>;

struct OfflineLayout {
  int tp = 1, pp = 1;
  UnevenPipeline uneven;  // Megatron's uneven stages, if any (parallel/pipeline_split.h)
};

// Writes ROOT/iter_<meta.iteration> at `layout` (dp 1, zero 0) and makes it the latest.
// meta.model, iteration, consumed_samples and trainer_state are written as given; layout and
// files are filled in. Throws ConfigError for an impossible layout, IoError naming the file
// for I/O problems (and whatever `source` throws). Returns the committed directory.
std::filesystem::path write_offline_checkpoint(const std::filesystem::path& root, CheckpointMetadata meta,
                                               const OfflineLayout& layout, bool with_optimizer,
                                               const CanonicalTensorSource& source);

// The iteration folder a tool reads: `load` itself when it holds metadata.json (an
// iter_NNNNNNN folder given directly), else load/iter_<iteration>, or the one the latest
// pointer names when `iteration` is empty. Throws ConfigError naming --load or
// `iteration_flag` (the tool's flag that gave `iteration`) for a missing directory, IoError
// naming the pointer file when it is missing or garbled.
std::filesystem::path resolve_checkpoint_dir(const std::filesystem::path& load, std::optional<int64_t> iteration,
                                             const std::string& iteration_flag = "--iteration");

}  // namespace trident
