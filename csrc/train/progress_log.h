// Megatron's --log-progress: SAVE/progress.txt, one line per event, appended by world rank 0:
//   "YYYY-MM-DD HH:MM:SS\tJob ID: <$SLURM_JOB_ID>\t# GPUs: <world size>\t<event>"
// with the events "Starting job" (each run's start) and, after each checkpoint save,
//   "Saved checkpoint\tIteration: N\tJob throughput: X TFLOP/s/GPU\tCumulative throughput: Y
//    TFLOP/s/GPU\tFloating-point operations: F\tTokens (in billions): T"
// ("Saving async checkpoint\t..." with --async-save, then "Saved async checkpoint\tIteration:
// N" at its commit). The job throughput counts the model FLOPs (Megatron's formula) since this
// run started, over its time since the process started; the cumulative one since the first
// "Starting job" of the runs of this world size in a row, over the time since then
// (Megatron's get_start_time_from_progress_log).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace trident {

// Appends `event` to DIR/progress.txt as a line of a job of `world` processes, stamped now
// (local time). Throws IoError naming the file when it cannot be written.
void append_progress(const std::filesystem::path& dir, int world, const std::string& event);

struct ProgressStart {
  std::chrono::system_clock::time_point time;  // of the earliest "Starting job" of this world size in a row
  // The FLOPs of the last save committed before it: a "Saved checkpoint", or a "Saving async
  // checkpoint" whose "Saved async checkpoint" followed.
  double flops = 0;
};
// Reads DIR/progress.txt as Megatron does; nullopt when it holds no "Starting job" of a job of
// `world` processes since the last line of another size. IoError naming the file and line for
// a line not of the format above.
std::optional<ProgressStart> progress_start(const std::filesystem::path& dir, int world);

// The "Saved checkpoint" event's text (prefix "Saving async checkpoint" when `async`).
std::string saved_checkpoint_event(bool async, int64_t iteration, double job_tflops, double cumulative_tflops,
                                   double flops, uint64_t tokens);

}  // namespace trident
