// Megatron's progress.txt (--log-progress): the throughput event's text as Python's f-string
// formats it, and where the cumulative throughput counts from (Megatron's
// get_start_time_from_progress_log, transcribed as the log lines below expect it, async saves
// counted at their commit).
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "core/error.h"
#include "train/progress_log.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("trident_progress_" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() { fs::remove_all(path); }
};

// Local time 2026-12-06 10:00:SS, as the log stamps it.
std::chrono::system_clock::time_point at_second(int s) {
  std::tm t{};
  t.tm_year = 2026 - 1900, t.tm_mon = 11, t.tm_mday = 6, t.tm_hour = 10, t.tm_sec = s, t.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&t));
}

TEST(ProgressLog, SavedCheckpointEventAsMegatronFormatsIt) {
  // f"Iteration: {iteration}\tJob throughput: {x:.1f} ... {flops:.2e} ... {tokens / 10**9:.2f}"
  EXPECT_EQ(saved_checkpoint_event(false, 100, 123.46, 98.74, 1.2361e18, 1234567890123),
            "Saved checkpoint\tIteration: 100\tJob throughput: 123.5 TFLOP/s/GPU\tCumulative throughput: 98.7 "
            "TFLOP/s/GPU\tFloating-point operations: 1.24e+18\tTokens (in billions): 1234.57");
  EXPECT_EQ(saved_checkpoint_event(true, 7, 0, 0, 9.06e8, 1024),
            "Saving async checkpoint\tIteration: 7\tJob throughput: 0.0 TFLOP/s/GPU\tCumulative throughput: 0.0 "
            "TFLOP/s/GPU\tFloating-point operations: 9.06e+08\tTokens (in billions): 0.00");
}

TEST(ProgressLog, CumulativeThroughputStartsAtTheFirstStartOfThisWorldSizeInARow) {
  ScratchDir d;
  EXPECT_FALSE(progress_start(d.path, 4));  // no log yet
  const auto saved = [](double flops) {
    return "Saved checkpoint\tIteration: 1\tJob throughput: 1.0 TFLOP/s/GPU\tCumulative throughput: 1.0 "
           "TFLOP/s/GPU\tFloating-point operations: " + std::to_string(flops) + "\tTokens (in billions): 0.01";
  };
  {
    std::ofstream f(d.path / "progress.txt");
    f << "2026-12-06 10:00:00\tJob ID: 1\t# GPUs: 4\tStarting job\n"
      << "2026-12-06 10:00:01\tJob ID: 1\t# GPUs: 4\t" << saved(1e15) << "\n"
      << "2026-12-06 10:00:02\tJob ID: 2\t# GPUs: 8\tStarting job\n"  // another size: the search restarts
      << "2026-12-06 10:00:03\tJob ID: 2\t# GPUs: 8\t" << saved(2e15) << "\n"
      << "2026-12-06 10:00:04\tJob ID: 3\t# GPUs: 4\tStarting job\n"  // counts from here, at 2e15 FLOPs
      << "2026-12-06 10:00:05\tJob ID: 3\t# GPUs: 4\t" << saved(3e15) << "\n"
      << "2026-12-06 10:00:06\tJob ID: 4\t# GPUs: 4\tStarting job\n"  // a restart of the same size
      << "2026-12-06 10:00:07\tJob ID: 4\t# GPUs: 4\tSaved async checkpoint\tIteration: 2\n";
  }
  const std::optional<ProgressStart> start = progress_start(d.path, 4);
  ASSERT_TRUE(start);
  EXPECT_EQ(start->time, at_second(4));
  EXPECT_EQ(start->flops, 2e15);
  EXPECT_FALSE(progress_start(d.path, 8));  // the last lines are of 4 GPUs
  // An async save counts from its commit's line on; one whose commit never came does not.
  std::ofstream(d.path / "progress.txt", std::ios::app)
      << "2026-12-06 10:00:08\tJob ID: 5\t# GPUs: 2\tStarting job\n"
      << "2026-12-06 10:00:09\tJob ID: 5\t# GPUs: 2\t" << saved(5e15).replace(0, 16, "Saving async checkpoint") << "\n"
      << "2026-12-06 10:00:10\tJob ID: 5\t# GPUs: 2\tSaved async checkpoint\tIteration: 1\n"
      << "2026-12-06 10:00:11\tJob ID: 5\t# GPUs: 2\t" << saved(6e15).replace(0, 16, "Saving async checkpoint") << "\n"
      << "2026-12-06 10:00:12\tJob ID: 6\t# GPUs: 1\tStarting job\n";
  const std::optional<ProgressStart> after_async = progress_start(d.path, 1);
  ASSERT_TRUE(after_async);
  EXPECT_EQ(after_async->time, at_second(12));
  EXPECT_EQ(after_async->flops, 5e15);
  // A line of another format names the file and the line.
  append_progress(d.path, 4, "Starting job");
  std::ofstream(d.path / "progress.txt", std::ios::app) << "garbage\n";
  try {
    progress_start(d.path, 4);
    FAIL() << "a garbled line was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("progress.txt:15: not a progress line"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trident
