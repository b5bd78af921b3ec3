#include "train/progress_log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFileName = "progress.txt";
constexpr const char* kTimeFormat = "%Y-%m-%d %H:%M:%S";  // Python's datetime.strftime's, local time

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) out.push_back(field);
  return out;
}

// The value after "Name: " of a field ("# GPUs: 8" -> "8").
std::string field_value(const std::string& field) {
  const size_t at = field.find(": ");
  return at == std::string::npos ? "" : field.substr(at + 2);
}

}  // namespace

void append_progress(const fs::path& dir, int world, const std::string& event) {
  const fs::path path = dir / kFileName;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, kTimeFormat, &local);
  const char* job = std::getenv("SLURM_JOB_ID");
  std::ofstream out(path, std::ios::app);
  out << stamp << "\tJob ID: " << (job ? job : "") << "\t# GPUs: " << world << '\t' << event << '\n';
  out.flush();
  if (!out) {
    const int err = errno;
    throw_write_failure(path.string() + ": cannot append to the progress log (--log-progress): " + std::strerror(err),
                        err);
  }
}

std::optional<ProgressStart> progress_start(const fs::path& dir, int world) {
  const fs::path path = dir / kFileName;
  std::ifstream in(path);
  std::optional<ProgressStart> start;
  double latest_flops = 0;
  std::optional<double> saving;  // an async save's FLOPs, counted once its commit is logged
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::vector<std::string> f = split_tabs(line);
    const auto bad = [&] { return IoError(path.string() + ":" + std::to_string(n) + ": not a progress line"); };
    if (f.size() < 4) throw bad();
    char* end = nullptr;
    const std::string gpus = field_value(f[2]);
    const long size = std::strtol(gpus.c_str(), &end, 10);
    if (gpus.empty() || *end != '\0') throw bad();
    if (f[3] == "Saved checkpoint" || f[3] == "Saving async checkpoint") {
      if (f.size() < 8) throw bad();
      const std::string flops = field_value(f[7]);
      const double value = std::strtod(flops.c_str(), &end);
      if (flops.empty() || *end != '\0') throw bad();
      if (f[3] == "Saved checkpoint") latest_flops = value;
      else saving = value;
    } else if (f[3] == "Saved async checkpoint" && saving) {
      latest_flops = *std::exchange(saving, std::nullopt);
    }
    if (size != world) {  // another world size: the search starts again
      start.reset();
      continue;
    }
    if (f[3] == "Starting job" && !start) {
      std::tm t{};
      std::istringstream stamp(f[0]);
      stamp >> std::get_time(&t, kTimeFormat);
      if (stamp.fail()) throw bad();
      t.tm_isdst = -1;
      start = ProgressStart{std::chrono::system_clock::from_time_t(std::mktime(&t)), latest_flops};
    }
  }
  return start;
}

std::string saved_checkpoint_event(bool async, int64_t iteration, double job_tflops, double cumulative_tflops,
                                   double flops, uint64_t tokens) {
  char text[256];
  std::snprintf(text, sizeof text,
                "%s\tIteration: %lld\tJob throughput: %.1f TFLOP/s/GPU\tCumulative throughput: %.1f TFLOP/s/GPU\t"
                "Floating-point operations: %.2e\tTokens (in billions): %.2f",
                async ? "Saving async checkpoint" : "Saved checkpoint", static_cast<long long>(iteration), job_tflops,
                cumulative_tflops, flops, static_cast<double>(tokens) / 1e9);
  return text;
}

}  // namespace trident
