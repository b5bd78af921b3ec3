// trident-bench: a few training steps with every op timed, printing tokens/s, model
// TFLOP/s, MFU and the share of step time per op family (GEMM first), so later work can
// see where time goes. Takes trident-train's flags, plus:
//   --bench-warmup N     untimed steps first (1)
//   --bench-no-profile   no per-op timing: the profiler synchronises after every op, which
//                        hides a GPU's asynchrony; use this for tokens/s and MFU on a GPU
//   --kernels            instead of training: every Backend op of the CUDA backend on
//                        GPU-sized inputs against the measured copy and GEMM ceilings
//                        (tools/bench_kernels.h); prints "no GPU" and exits 0 without one
//   --kernels-quick      the same on small inputs (a smoke test)
//   --kernels-only S     only the kernel sections whose name contains S ("attention D128")
//   --kernels-once       each kernel op launched once, no warm-up: a run for
//                        a profiler (ncu), which replays each launch itself
//   --kernels-progress F while a row is measured, F holds its number and name, and is
//                        empty between rows (a run that dies leaves there the row it died in)
//   --kernels-resume N   rerun past row N, which the run before died in (the rows before it
//                        are neither run nor printed; tools/gpu-check.sh)
//   --kernels-results F  each finished row's outcome is appended to F; a rerun reads the
//                        rows before its own there (and still makes the table's choices)
//   --kernels-skip NAME  the row "SECTION: ROW" (as --kernels-progress names it) is not run (repeatable)
//   --generate           instead of training: generation with the KV-cache decoder on the
//                        model of the flags (random weights), --micro-batch-size sequences:
//                        prefill tokens/s and decoding tokens/s (tools/bench_generation.h)
//   --generate-prompt N  prompt tokens a sequence (half the sequence length)
//   --generate-tokens N  tokens drawn a sequence (128, or fewer to fit the positions)
//   --generate-ragged    also prompts of different lengths (sequence b's: prompt (b + 1) / B):
//                        each sequence at its own length vs every sequence a step from the
//                        shortest prompt's end (the "ragged:" line)
// MFU is Megatron's model FLOPs (model_flops_per_iteration) over step time and the
// device's dense peak for the run's dtype (--peak-tflops, else throughput.h's table).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backends.h"
#include "kernels/profiling_backend.h"
#include "tool_main.h"
#include "tools/bench_generation.h"
#include "tools/bench_kernels.h"
#include "tools/integer_flag.h"
#include "tools/tool_flags.h"
#include "train/throughput.h"
#include "train/train_data.h"
#include "train/trainer.h"

namespace {

const char* const kUsage =
    "Usage: trident-bench [--bench-warmup N] [--bench-no-profile] [trident-train flags]\n"
    "       trident-bench --kernels | --kernels-quick | --kernels-only S | --kernels-once\n"
    "                     [--kernels-progress F] [--kernels-resume N] [--kernels-results F]\n"
    "                     [--kernels-skip NAME ...]\n"
    "       trident-bench --generate [--generate-prompt N] [--generate-tokens N] [--generate-ragged]\n"
    "                     [trident-train flags]\n"
    "  --bench-warmup N     untimed steps first (1)\n"
    "  --bench-no-profile   no per-op timing (tokens/s and MFU as a GPU runs them)\n"
    "  --kernels            every CUDA op on GPU-sized inputs against the copy and GEMM ceilings\n"
    "  --kernels-quick      the same on small inputs\n"
    "  --kernels-only S     only the kernel sections whose name contains S (\"attention D128\")\n"
    "  --kernels-once       each kernel op launched once (for ncu)\n"
    "  --kernels-progress F while a row is measured, F holds its number and name (where a dead run died)\n"
    "  --kernels-resume N   rerun past row N, which the run before died in\n"
    "  --kernels-results F  each finished row appended to F; a rerun reads the rows before its own there\n"
    "  --kernels-skip NAME  do not run the row \"SECTION: ROW\", as --kernels-progress names it\n"
    "                     (\"attention D64: attn fwd, wgmma\"; repeatable)\n"
    "  --generate           generation instead of training: prefill and decoding tokens/s of\n"
    "                       --micro-batch-size sequences (random weights, one process)\n"
    "  --generate-prompt N  prompt tokens a sequence (half the sequence length)\n"
    "  --generate-tokens N  tokens drawn a sequence (128, or fewer to fit the positions)\n"
    "  --generate-ragged    also prompts of 1/B .. B/B of the prompt length: each sequence at its own\n"
    "                       length vs every sequence a step from the shortest prompt's end\n"
    "Model, batch and layout flags are trident-train's (trident-train --help); --train-iters is the\n"
    "number of timed steps.\n";

struct BenchFlags {
  int warmup = 1;
  bool profile = true, kernels = false, help = false, generate = false;
  trident::KernelBenchOptions kernel_options;
  trident::GenerationBenchOptions generation;
};

// Takes trident-bench's own flags out of argv; the rest is trident-train's.
std::vector<std::string> take_bench_flags(int argc, char** argv, BenchFlags& f) {
  return trident::take_tool_flags(argc, argv, "trident-bench", [&](const trident::ToolFlag& t) {
    if (t.name == "--help") {
      f.help = true;
    } else if (t.name == "--bench-warmup") {
      f.warmup = static_cast<int>(trident::parse_integer_flag("bench-warmup", t.value(), 0, 1 << 20));
    } else if (t.name == "--generate") {
      t.no_value();
      f.generate = true;
    } else if (t.name == "--generate-prompt") {
      f.generate = true;
      f.generation.prompt = trident::parse_integer_flag("generate-prompt", t.value(), 1, 1 << 20);
    } else if (t.name == "--generate-ragged") {
      t.no_value();
      f.generate = true;
      f.generation.ragged = true;
    } else if (t.name == "--generate-tokens") {
      f.generate = true;
      f.generation.new_tokens = trident::parse_integer_flag("generate-tokens", t.value(), 1, 1 << 20);
    } else if (t.name == "--bench-no-profile") {
      t.no_value();
      f.profile = false;
    } else if (t.name == "--kernels-only") {  // e.g. "attention D128"
      f.kernels = true;
      f.kernel_options.only = t.value();
    } else if (t.name == "--kernels-progress") {
      f.kernel_options.progress = t.value();
    } else if (t.name == "--kernels-resume") {
      f.kernel_options.resume = static_cast<int>(trident::parse_integer_flag("kernels-resume", t.value(), 1, 1 << 20));
    } else if (t.name == "--kernels-results") {
      f.kernel_options.results = t.value();
    } else if (t.name == "--kernels-skip") {
      f.kernel_options.skip.push_back(t.value());
    } else if (t.name == "--kernels-once") {
      t.no_value();
      f.kernels = true;
      f.kernel_options.once = true;
    } else if (t.name == "--kernels" || t.name == "--kernels-quick") {
      t.no_value();
      f.kernels = true;
      f.kernel_options.quick = f.kernel_options.quick || t.name == "--kernels-quick";
    } else {
      return false;
    }
    return true;
  });
}

}  // namespace

int main(int argc, char** argv) {
  return trident::run_tool("trident-bench", [&] {
    BenchFlags bf;
    const std::vector<std::string> args = take_bench_flags(argc, argv, bf);
    if (bf.help) {
      std::cout << kUsage;
      return 0;
    }
    const int warmup = bf.warmup;
    const bool profile = bf.profile;
    const trident::KernelBenchOptions& ko = bf.kernel_options;
    if (!bf.kernels && (!ko.progress.empty() || ko.resume > 0 || !ko.results.empty() || !ko.skip.empty()))
      throw trident::ConfigError(
          "--kernels-progress, --kernels-resume, --kernels-results and --kernels-skip go with --kernels (or "
          "--kernels-quick)");
    if (bf.kernels && bf.generate)
      throw trident::ConfigError("--kernels and --generate are two different benchmarks: give one");
    if (bf.kernels) {
      // The kernel benchmark sizes its own inputs: training flags would be ignored.
      if (args.size() > 1)
        throw trident::ConfigError("--kernels benchmarks the CUDA ops on their own sizes: it takes no "
                                   "trident-train flags (got " + args[1] + ")");
      return trident::run_kernel_bench(bf.kernel_options);
    }
    trident::TrainOptions opt;
    if (!trident::parse_train_options(args, opt)) return 0;
    // trident-bench runs training steps and nothing around them: what would read or write
    // files is refused rather than ignored.
    for (const auto& [flag, given] : {std::pair{"--save", !opt.save.empty()}, std::pair{"--load", !opt.load.empty()},
                                      std::pair{"--save-canonical", !opt.save_canonical.empty()},
                                      std::pair{"--tensorboard-dir", !opt.tensorboard_dir.empty()}})
      if (given)
        throw trident::ConfigError(std::string(flag) +
                                   ": trident-bench only times training steps (no checkpoints or TensorBoard): "
                                   "use trident-train");
    for (const auto& [flag, given] : {std::pair{"--rampup-batch-size", !opt.rampup_batch_size.empty()},
                                      std::pair{"--step-batch-size-schedule", !opt.step_batch_size_schedule.empty()}})
      if (given)
        throw trident::ConfigError(std::string(flag) + ": trident-bench times steps of one global batch "
                                   "(--global-batch-size)");
    if (bf.generate) return trident::run_generation_bench(opt, bf.generation);
    // Steps are counted in int, the warm-up added: 2^30 at most.
    if (opt.train_iters > (int64_t{1} << 30))
      throw trident::ConfigError("--train-iters (" + std::to_string(opt.train_iters) +
                                 "): trident-bench times at most 2^30 steps");
    auto data = std::move(trident::make_train_data(opt).train);
    opt.train_iters += warmup;
    auto inner = trident::make_backend(opt.device, trident::backend_options(opt));
    trident::ProfilingBackend* prof = nullptr;
    std::unique_ptr<trident::Backend> backend;
    if (profile) {
      auto p = std::make_unique<trident::ProfilingBackend>(std::move(inner));
      prof = p.get();
      backend = std::move(p);
    } else {
      backend = std::move(inner);
    }
    std::ostringstream quiet;
    trident::Trainer trainer(opt, *backend, std::move(data), quiet);
    for (int i = 0; i < warmup; ++i) trainer.train_iteration();
    backend->synchronize();
    if (prof) prof->reset_times();
    double ms = 0;
    const int steps = static_cast<int>(opt.train_iters - warmup);
    for (int i = 0; i < steps; ++i) ms += trainer.train_iteration().ms;
    const auto& m = opt.model;
    const double tokens = static_cast<double>(opt.global_batch_size) * m.seq_length * steps;
    const double flops_per_iter = trident::model_flops_per_iteration(m, opt.global_batch_size);
    const double flops = flops_per_iter * steps;
    const double peak = opt.peak_tflops > 0
                            ? opt.peak_tflops
                            : trident::peak_tflops_for_device(backend->device_name(), m.dtype, !opt.no_tf32);
    const double mfu = trident::model_flops_utilization(flops_per_iter, ms / steps / 1e3, 1, peak);
    std::printf("trident-bench: %s, %s, %d layers, hidden %d, heads %d, seq %d, micro batch %d, global batch %d, "
                "%d steps%s\n",
                backend->name().c_str(), trident::dtype_name(m.dtype), m.num_layers, m.hidden_size,
                m.num_attention_heads, m.seq_length, opt.micro_batch_size, opt.global_batch_size, steps,
                profile ? "" : ", no per-op profile");
    std::printf("step time: %.1f ms | tokens per second: %.1f | model TFLOP/s: %.4f", ms / steps,
                tokens / (ms / 1e3), flops / (ms / 1e3) / 1e12);
    if (peak > 0)
      std::printf(" | MFU: %.1f%% of %.1f TFLOP/s\n", 100.0 * mfu, peak);
    else
      std::printf(" | MFU: n/a (unknown device peak; give --peak-tflops)\n");
    if (!prof) return 0;
    std::vector<std::pair<std::string, trident::OpTime>> rows(prof->times().begin(), prof->times().end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    double total_ms = ms;
    std::printf("%-16s %10s %8s %8s\n", "op", "ms/step", "calls", "share");
    for (const auto& [name, t] : rows)
      std::printf("%-16s %10.2f %8lld %7.1f%%\n", name.c_str(), t.seconds * 1e3 / steps,
                  static_cast<long long>(t.calls / steps), 100.0 * t.seconds * 1e3 / total_ms);
    double gemm_s = 0;  // plain GEMMs and the GEMMs with a GELU epilogue
    for (const char* family : {"matmul", "matmul_gelu"})
      if (auto it = prof->times().find(family); it != prof->times().end()) gemm_s += it->second.seconds;
    std::printf("GEMM share of step time: %.1f%%\n", 100.0 * gemm_s * 1e3 / total_ms);
    return 0;
  });
}
