// Which checkpoint trident-train's --load names. Megatron-LM's rules, and trident-eval's for
// an iteration folder given directly:
//
//   --load DIR/iter_NNNNNNN        that checkpoint (a folder holding metadata.json);
//   --load DIR --ckpt-step N       DIR/iter_N whatever the pointer says, also without one
//                                  (Megatron: "checkpoint step to load model from");
//   --load DIR                     the iteration DIR/latest_checkpointed_iteration.txt names;
//   DIR missing, or holding no     no checkpoint: training starts from scratch (Megatron's
//   checkpoint at all              warning), or with --exit-on-missing-checkpoint an error;
//   DIR holding iter_* folders     an error: a run whose pointer is lost is not silently
//   but no pointer                 restarted from scratch, nor resumed from a guess;
//   --non-persistent-ckpt-type     (without --ckpt-step or an iteration folder) the latest
//     global                       non-persistent checkpoint (o.non_persistent_dir(load)) when
//                                  it is as new as DIR's or newer, as Megatron.
#pragma once

#include <filesystem>
#include <optional>

#include "train/options.h"

namespace trident {

// The iteration folder to load for o.load (non-empty), or nullopt for none (see above).
// Throws ConfigError naming --load, --ckpt-step or --exit-on-missing-checkpoint, IoError
// naming a garbled pointer file.
std::optional<std::filesystem::path> checkpoint_to_load(const TrainOptions& o);

}  // namespace trident
