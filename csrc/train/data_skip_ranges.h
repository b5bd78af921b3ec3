// BigScience's --skip-train-iteration-range A-B ... (Megatron-DeepSpeed's way back from a loss
// spike: roll back to a checkpoint before it, then skip the data it came from). When the run
// is about to train iteration A, it reads past the global batches that iterations A to B
// would have trained on, and trains iteration A on the batch after them: the iteration count,
// the learning-rate schedule, the consumed samples and tokens (and so a batch ramp-up) do not
// advance, and the run still trains its --train-iters iterations, reading B - A + 1 more
// batches of data. Unlike BigScience's code, trident
//   - reads past whole global batches (BigScience's loop takes one micro-batch a skipped
//     iteration from each data-parallel rank, a global batch only without accumulation);
//   - keeps the samples read past in its checkpoints (`skipped_range_samples`: the training
//     data is read from consumed + that many), where BigScience's resume reads them again;
//   - keeps the ranges applied (`applied_skip_ranges`), so that a run relaunched with the same
//     flag from a checkpoint inside a range does not skip it twice.
// A range that a run resumes inside of (A <= iteration + 1 <= B) and that its checkpoint has
// not applied is applied at once for its remaining iterations, B - iteration batches (as
// BigScience's); a range that ended at or before the checkpoint's iteration is past. A range
// counts as applied when the checkpoint holds exactly it: relaunched inside an applied 3-5
// with 3-7 instead, the run reads 7 - iteration more batches past, as BigScience's would.
// The training data is built for the run's samples and those its ranges read past
// (make_train_data), so that the skips have data to read on, also from a weighted blend,
// which holds exactly the samples it is built for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/batch_schedule.h"

namespace trident {

struct IterationRange {
  int64_t first = 0, last = 0;  // 1-based, inclusive
  bool operator==(const IterationRange&) const = default;
};

// The words of --skip-train-iteration-range ("101-200" ...), sorted, overlapping ranges merged
// (as BigScience's parser: "1-5 3-8" is "1-8"; "1-5 6-8" stays two ranges, the second applied
// when the run reaches iteration 6, after the first's skip). ConfigError naming the flag and
// the word for anything but FIRST-LAST with 1 <= FIRST <= LAST <= kMaxSkipIteration.
inline constexpr int64_t kMaxSkipIteration = int64_t{1} << 40;
std::vector<IterationRange> parse_skip_ranges(const std::vector<std::string>& words);

// The range to apply before the run, at `iteration`, trains iteration + 1: the one holding
// iteration + 1 that `applied` does not hold. Batches to read past: range.last - iteration.
std::optional<IterationRange> due_skip_range(const std::vector<IterationRange>& ranges,
                                             const std::vector<IterationRange>& applied, int64_t iteration);

// The samples that the ranges not in `applied` read past from a run at `iteration`, having
// consumed `consumed` samples, to its iteration `end` (each range at the global batch of
// `batches` where the run reads it past; the consumed samples advance by the iterations trained
// in between). Saturates at UINT64_MAX, which no data holds.
uint64_t samples_read_past(const std::vector<IterationRange>& ranges, const std::vector<IterationRange>& applied,
                           const BatchSchedule& batches, int64_t iteration, uint64_t consumed, int64_t end);

// "101-200" for messages and --help.
std::string range_text(const IterationRange& r);

}  // namespace trident
