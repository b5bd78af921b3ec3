#include "train/training_phases.h"

#include "core/error.h"

namespace trident {

TrainingPhase training_phase(const std::vector<int64_t>& transitions, int64_t iteration, uint64_t global_batch,
                             uint64_t run_samples) {
  std::vector<uint64_t> bounds = {0};
  for (int64_t t : transitions) bounds.push_back(static_cast<uint64_t>(t) * global_batch);
  bounds.push_back(run_samples);
  const uint64_t at = static_cast<uint64_t>(iteration) * global_batch;
  TrainingPhase p;
  p.count = static_cast<int>(transitions.size()) + 1;
  p.samples = run_samples;
  // Megatron's search: the first [b_k, b_k+1) holding the position (a transition past the
  // run's end leaves the boundaries unsorted; its phase is then never entered).
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    if (bounds[k] <= at && at < bounds[k + 1]) {
      p.index = static_cast<int>(k);
      p.first_iteration = k == 0 ? 0 : transitions[k - 1];
      p.first_sample = bounds[k];
      p.samples = bounds[k + 1] - bounds[k];
      p.end_iteration = k < transitions.size() ? transitions[k] : -1;
      return p;
    }
  // Past the end: Megatron sizes the data for the whole run; no training sample is read.
  p.index = p.count - 1;
  p.first_iteration = transitions.empty() ? 0 : transitions.back();
  return p;
}

std::string phase_text(const TrainingPhase& p) {
  std::string s = "phase " + std::to_string(p.index + 1) + " of " + std::to_string(p.count) + " (iterations ";
  if (p.end_iteration >= 0)
    return s + std::to_string(p.first_iteration + 1) + " to " + std::to_string(p.end_iteration) + ")";
  return s + "from " + std::to_string(p.first_iteration + 1) + ")";
}

void PhaseWindow::get(uint64_t i, int32_t* tokens) const {
  if (i < first_)
    throw InternalError("training sample " + std::to_string(i) + " lies before this phase, whose data starts at run "
                        "sample " + std::to_string(first_));
  inner_->get(i - first_, tokens);
}

}  // namespace trident
