// The bookkeeping of trident-bench --kernels' rows across the runs tools/gpu-check.sh makes of
// one table (no CUDA here, so that it is tested without a GPU).
//
// Rows are numbered from 1 in the order measured; the order is fixed, so a number names the
// same row in every run. A row's name is "<section>: <row>" (trident-bench's sections repeat
// rows' names: one section per head dim). While a row is measured the progress file holds
// "<number> <name>" (empty between rows): a run that dies, or that gpu-check kills because one
// row ran too long (a hung kernel), leaves there the row to blame. The rerun past that row
// (resume) does not run the rows before it; with a results file, to which every finished row
// is appended, it takes their outcomes from the runs before, so that the table's choices (the
// fastest tiles, the faster opt-ins) still compare every row. Rows that --kernels-skip names
// are not run (gpu-check skips the rows that died or hung when Nsight Compute replays a
// section).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace trident {

struct RowOutcome {
  double ms = 0;
  std::string error;  // not empty: the row failed or was not run
};

class KernelRowBook {
 public:
  // `progress`, `results`: file paths ("" for none); `resume`: the row the run before died in
  // (0: a first run); `skip`: row names not to run. Reads `results` on a rerun.
  KernelRowBook(std::string progress, std::string results, int resume, std::vector<std::string> skip);

  // Numbers the next row.
  int next_row() { return ++rows_; }
  // The row's outcome without running it: the row the rerun resumes past, a row --kernels-skip
  // names, or a row before the resumed one (its outcome in the results file; "not rerun"
  // without one, but a ceiling, which is measured again: the "of peak" column needs it).
  // None: measure it.
  std::optional<RowOutcome> settled(int row, const std::string& name, bool ceiling) const;
  // A rerun's rows before the resumed one were printed by the runs before.
  bool silent(int row) const { return row < resume_; }
  // The progress file: `name` while row `row` is measured, "" between rows.
  void note_progress(int row, const std::string& name) const;
  // Appends a finished row's final outcome (after any check of its result) to the results file;
  // a rerun's rows before the resumed one are there already.
  void record(int row, const RowOutcome& outcome) const;
  // Whether every row's outcome is known to this run: a first run, or a rerun with the earlier
  // runs' results (the choices across the table can then be made).
  bool complete() const { return resume_ == 0 || !results_.empty(); }
  // The names --kernels-skip gave that no row settled() was asked about had (a typo, or a
  // name without its section), in the order given.
  std::vector<std::string> unmatched_skips() const;

 private:
  std::string progress_, results_;
  int resume_ = 0, rows_ = 0;
  std::vector<std::string> skip_;
  mutable std::set<std::string> skipped_;  // the names of skip_ that matched a row
  std::map<int, RowOutcome> earlier_;  // the results file's rows
};

}  // namespace trident
