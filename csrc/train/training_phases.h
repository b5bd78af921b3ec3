// Megatron-core's multi-phase training (--phase-transition-iterations T1,T2,...): a run whose
// training data changes at given iterations (an annealing phase on another blend, say). At
// each transition the run saves and exits; the next launch, with the next phase's --data-path,
// resumes from that checkpoint. Each phase reads its data from its first sample: the phase's
// training dataset is built for the phase's samples alone, and read from its start whatever
// the run consumed before. The schedule (learning rate, weight decay) runs over the whole
// run, unaffected. As Megatron's get_train_valid_test_num_samples and its data loader's
// consumed_train_samples_in_current_phase:
//   boundaries  [0, T1 x G, T2 x G, ..., the run's samples]   (G: the global batch, constant)
//   a run at iteration i is in the phase [b_k, b_k+1) holding i x G; its dataset is built for
//   b_k+1 - b_k samples, and read from its sample (i - T_k) x G on (phase_data_start).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/saturating.h"
#include "data/gpt_dataset.h"

namespace trident {

struct TrainingPhase {
  int index = 0;  // 0-based
  int count = 1;  // the run's phases
  int64_t first_iteration = 0;  // the transition it starts at (0: the first phase)
  uint64_t first_sample = 0;    // the run's samples before it: first_iteration x G
  uint64_t samples = 0;         // what its training dataset is built for
  // The next transition, where the run saves and exits; -1 for the last phase.
  int64_t end_iteration = -1;
};

// The phase of a run at `iteration` (transitions sorted and distinct; the run's `run_samples`
// in all, at `global_batch` samples an iteration). A transition at or past the run's end ends
// no phase (Megatron's boundaries: the last at or before the position, the first after it). A
// run at its end (nothing left to train) takes Megatron's whole-run size.
TrainingPhase training_phase(const std::vector<int64_t>& transitions, int64_t iteration, uint64_t global_batch,
                             uint64_t run_samples);

// Where a run resumed at `iteration` with `consumed_samples` has its phase's data start, in its
// consumed samples: Megatron reads the phase from (iteration - its first iteration) x the
// global batch, whatever the run consumed before it (an earlier ramp-up, say). ConfigError when
// the run consumed less than that.
uint64_t phase_data_start(const TrainingPhase& p, int64_t iteration, uint64_t consumed_samples,
                          uint64_t global_batch);

// "phase 2 of 3 (iterations 101 to 200)" or "phase 3 of 3 (iterations from 201)": the
// iterations as the log numbers them.
std::string phase_text(const TrainingPhase& p);

// A phase's dataset seen at the run's sample indices: run sample i is `inner`'s i - first.
// Samples before the phase are not there (InternalError); size() counts them, so that the
// run's checks of how far its data reaches hold unchanged.
class PhaseWindow : public SampleSource {
 public:
  PhaseWindow(std::unique_ptr<SampleSource> inner, uint64_t first) : inner_(std::move(inner)), first_(first) {}
  uint64_t size() const override {  // saturating: synthetic tokens have no end (UINT64_MAX)
    return saturating_add(first_, inner_->size());
  }
  void get(uint64_t i, int32_t* tokens) const override;

 private:
  std::unique_ptr<SampleSource> inner_;
  uint64_t first_;
};

}  // namespace trident
