#include "train/training_phases.h"

#include "core/error.h"

namespace trident {

TrainingPhase training_phase(const std::vector<int64_t>& transitions, int64_t iteration, uint64_t global_batch,
                             uint64_t run_samples) {
  const uint64_t at = static_cast<uint64_t>(iteration) * global_batch;
  TrainingPhase p;
  p.count = static_cast<int>(transitions.size()) + 1;
  p.samples = run_samples;
  size_t k = 0;  // the transitions at or before the position
  while (k < transitions.size() && static_cast<uint64_t>(transitions[k]) * global_batch <= at) ++k;
  p.index = static_cast<int>(k);
  if (at >= run_samples) return p;  // the run's end: nothing to train; Megatron's whole-run size
  // Megatron's: the last boundary at or before the position and the first after it, among 0,
  // the transitions and the run's end (so a transition past the end ends no phase).
  p.first_iteration = k == 0 ? 0 : transitions[k - 1];
  p.first_sample = static_cast<uint64_t>(p.first_iteration) * global_batch;
  const bool ends_in_run = k < transitions.size() && static_cast<uint64_t>(transitions[k]) * global_batch < run_samples;
  p.end_iteration = ends_in_run ? transitions[k] : -1;
  p.samples = (ends_in_run ? static_cast<uint64_t>(transitions[k]) * global_batch : run_samples) - p.first_sample;
  return p;
}

std::string phase_text(const TrainingPhase& p) {
  std::string s = "phase " + std::to_string(p.index + 1) + " of " + std::to_string(p.count) + " (iterations ";
  if (p.end_iteration >= 0)
    return s + std::to_string(p.first_iteration + 1) + " to " + std::to_string(p.end_iteration) + ")";
  return s + "from " + std::to_string(p.first_iteration + 1) + ")";
}

uint64_t phase_data_start(const TrainingPhase& p, int64_t iteration, uint64_t consumed_samples,
                          uint64_t global_batch) {
  if (iteration < p.first_iteration)
    throw InternalError("iteration " + std::to_string(iteration) + " lies before " + phase_text(p));
  const uint64_t in_phase = static_cast<uint64_t>(iteration - p.first_iteration) * global_batch;
  if (consumed_samples < in_phase)
    throw ConfigError("--phase-transition-iterations: the checkpoint at iteration " + std::to_string(iteration) +
                      " consumed " + std::to_string(consumed_samples) + " samples, fewer than its " +
                      std::to_string(in_phase) + " in " + phase_text(p) + " at " + std::to_string(global_batch) +
                      " an iteration");
  return consumed_samples - in_phase;
}

void PhaseWindow::get(uint64_t i, int32_t* tokens) const {
  if (i < first_)
    throw InternalError("training sample " + std::to_string(i) + " lies before this phase, whose data starts at run "
                        "sample " + std::to_string(first_));
  inner_->get(i - first_, tokens);
}

}  // namespace trident
