// trident-bench --kernels: each Backend op of the CUDA backend timed on GPU-sized inputs
// with CUDA events, against the ceilings measured in the same run (a device-to-device copy
// for bandwidth, a large bf16 cuBLASLt GEMM for FLOP/s). Prints "no GPU" and returns 0
// when no GPU is visible or the build has no CUDA backend.
#pragma once

#include <string>
#include <vector>

namespace trident {

struct KernelBenchOptions {
  bool quick = false;  // smaller inputs and fewer repetitions (a smoke test)
  bool once = false;   // each op run twice, untimed in effect: for a profiler (ncu) to catch
  std::string only;    // not empty: only the sections whose name contains it (no peaks)
  // Not empty: while a row is measured this file holds "<row number> <row name>", and it is
  // empty between rows, so that a run that dies (a CUDA error aborts the process) leaves
  // the row it died in, or nothing when it died outside every row.
  std::string progress;
  // > 0: a rerun past the row of that number, which an earlier run died in: the rows before
  // it are neither run nor printed (but the ceilings, which the "of peak" column needs), the
  // row itself is a FAILED row, and the table goes on from the next (tools/gpu-check.sh).
  int resume = 0;
  // Not empty: each finished row's outcome is appended to this file, which a rerun (resume)
  // reads for the rows before it, so that it still makes the table's choices (kernel_rows.h).
  std::string results;
  // Rows of these names are not run (a FAILED "skipped" row): gpu-check's Nsight Compute
  // replays of a section leave out the rows that died or hung in the table.
  std::vector<std::string> skip;
};

int run_kernel_bench(const KernelBenchOptions& opt);

}  // namespace trident
