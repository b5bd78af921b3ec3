// The learning-rate and weight-decay schedules in a checkpoint: Megatron's
// OptimizerParamScheduler state (trainer_state.opt_param_scheduler in metadata.json), written
// at a save and, at a load, checked against the command line's schedules field by field, as
// Megatron's load_state_dict does, and the schedule's position restored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>

#include <nlohmann/json.hpp>

#include "train/lr_schedule.h"
#include "train/options.h"
#include "train/weight_decay_schedule.h"

namespace trident {

// The schedules of Megatron's OptimizerParamScheduler: the learning rate's and the weight
// decay's.
struct ParamSchedules {
  LrSchedule lr;
  WeightDecaySchedule wd;
};

// The saved state of schedules `s` at position `p`.
nlohmann::json scheduler_state(const ParamSchedules& s, const LrPosition& p);

// The schedules to train with after loading a checkpoint whose scheduler state is `saved`
// (trainer_state.opt_param_scheduler; the caller skips this without optimizer state, as
// Megatron loads the scheduler only with the optimizer). Megatron's load_state_dict /
// _check_and_set, field by field: by default the command line's value must equal the
// checkpoint's (an error naming every field that differs, both values and the flags);
// --override-opt_param-scheduler keeps the command line's, and
// --use-checkpoint-opt_param-scheduler takes the checkpoint's. A field the checkpoint lacks
// (written before it was saved) keeps the command line's value.
ParamSchedules schedules_after_load(const ParamSchedules& cli, const nlohmann::json& trainer_state,
                                    const TrainOptions& o, const std::filesystem::path& dir, std::ostream& out);

// The LR schedule's position: the samples of the successful updates, the token count and
// the recorded warm-up end (lr_schedule.h), as Megatron's load_state_dict steps to it. A
// checkpoint written before the samples were saved has none: there the schedule ran on
// consumed samples (skipped iterations advanced it too), so continuing from them keeps that
// run's rate; one written before the tokens were saved takes the consumed tokens.
LrPosition saved_scheduler_position(const LrSchedule& schedule, const nlohmann::json& trainer_state,
                                    uint64_t consumed_samples, uint64_t consumed_tokens);

// A linear or cosine decay in tokens after a warm-up in samples starts from the token count
// where the warm-up ended: a checkpoint past its warm-up that did not record it (its run
// counted no tokens, and --override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler
// brings the decay in tokens) cannot say where the decay starts. ConfigError then.
void check_decay_start_known(const LrSchedule& schedule, const nlohmann::json& trainer_state,
                             const std::filesystem::path& dir);

}  // namespace trident
