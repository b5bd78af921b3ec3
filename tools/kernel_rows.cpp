#include "tools/kernel_rows.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "core/error.h"

namespace trident {
namespace {

// One results line: "<row>\t<ms>\t<error>", the error on one line without tabs.
std::optional<std::pair<int, RowOutcome>> parse_result(const std::string& line) {
  const size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
  if (b == std::string::npos) return std::nullopt;  // a line cut short by a killed run
  char* end = nullptr;
  const long row = std::strtol(line.c_str(), &end, 10);
  if (end != line.c_str() + a || row < 1) return std::nullopt;
  const std::string ms_text = line.substr(a + 1, b - a - 1);
  const double ms = std::strtod(ms_text.c_str(), &end);
  if (ms_text.empty() || end != ms_text.c_str() + ms_text.size()) return std::nullopt;
  return std::make_pair(static_cast<int>(row), RowOutcome{ms, line.substr(b + 1)});
}

}  // namespace

KernelRowBook::KernelRowBook(std::string progress, std::string results, int resume, std::vector<std::string> skip)
    : progress_(std::move(progress)), results_(std::move(results)), resume_(resume), skip_(std::move(skip)) {
  if (results_.empty()) return;
  if (resume_ == 0) {  // a first run starts the file
    std::ofstream start(results_, std::ios::trunc);
    if (!start) throw ConfigError("--kernels-results: cannot write " + results_);
    return;
  }
  std::ifstream in(results_);
  if (!in) throw ConfigError("--kernels-results: cannot read " + results_ + " (the run before writes it)");
  for (std::string line; std::getline(in, line);)
    if (auto r = parse_result(line)) earlier_[r->first] = std::move(r->second);  // the last word on a row wins
}

std::optional<RowOutcome> KernelRowBook::settled(int row, const std::string& name, bool ceiling) const {
  if (row == resume_) return RowOutcome{0, "skipped: the run before died in it (a rerun past it)"};
  if (std::find(skip_.begin(), skip_.end(), name) != skip_.end()) {
    skipped_.insert(name);
    return RowOutcome{0, "skipped: --kernels-skip"};
  }
  if (row > resume_) return std::nullopt;
  if (const auto it = earlier_.find(row); it != earlier_.end()) return it->second;
  if (ceiling) return std::nullopt;
  return RowOutcome{0, "not rerun"};
}

std::vector<std::string> KernelRowBook::unmatched_skips() const {
  std::vector<std::string> out;
  for (const std::string& s : skip_)
    if (!skipped_.count(s)) out.push_back(s);
  return out;
}

void KernelRowBook::note_progress(int row, const std::string& name) const {
  if (progress_.empty()) return;
  std::FILE* p = std::fopen(progress_.c_str(), "w");
  if (p == nullptr) throw ConfigError("--kernels-progress: cannot write " + progress_);
  if (!name.empty()) std::fprintf(p, "%d %s\n", row, name.c_str());
  std::fclose(p);
}

void KernelRowBook::record(int row, const RowOutcome& outcome) const {
  if (results_.empty() || row < resume_) return;  // the rows before the resumed one: the runs before's
  std::string error = outcome.error;
  std::replace_if(error.begin(), error.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  std::FILE* f = std::fopen(results_.c_str(), "a");
  if (f == nullptr) throw ConfigError("--kernels-results: cannot append to " + results_);
  std::fprintf(f, "%d\t%.17g\t%s\n", row, outcome.ms, error.c_str());
  std::fclose(f);  // each row on disk before the next runs: a later abort keeps it
}

}  // namespace trident
