// trident-bench: a few training steps with every op timed, printing tokens/s, model
// TFLOP/s and the share of step time per op family (GEMM first), so later work can see
// where time goes. Takes trident-train's flags, plus --bench-warmup (untimed steps).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <vector>

#include "kernels/backends.h"
#include "kernels/profiling_backend.h"
#include "tool_main.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  return trident::run_tool("trident-bench", [&] {
    int warmup = 1;
    std::vector<const char*> args;
    for (int i = 0; i < argc; ++i) {
      if (std::strcmp(argv[i], "--bench-warmup") == 0 && i + 1 < argc) {
        warmup = std::atoi(argv[++i]);
        continue;
      }
      args.push_back(argv[i]);
    }
    trident::TrainOptions opt;
    if (!trident::parse_train_options(static_cast<int>(args.size()), args.data(), opt)) return 0;
    auto data = std::move(trident::make_train_data(opt).train);
    opt.train_iters += warmup;
    auto backend = std::make_unique<trident::ProfilingBackend>(trident::make_backend(opt.device));
    std::ostringstream quiet;
    trident::Trainer trainer(opt, *backend, std::move(data), quiet);
    for (int i = 0; i < warmup; ++i) trainer.train_iteration();
    backend->reset_times();
    double ms = 0;
    const int steps = static_cast<int>(opt.train_iters) - warmup;
    for (int i = 0; i < steps; ++i) ms += trainer.train_iteration().ms;
    const auto& m = opt.model;
    const double tokens = static_cast<double>(opt.global_batch_size) * m.seq_length * steps;
    const double flops = trident::model_flops_per_iteration(m, opt.global_batch_size) * steps;
    std::printf("trident-bench: %s, %d layers, hidden %d, heads %d, seq %d, micro batch %d, global batch %d, %d steps\n",
                backend->name().c_str(), m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length,
                opt.micro_batch_size, opt.global_batch_size, steps);
    std::printf("step time: %.1f ms | tokens per second: %.1f | model TFLOP/s: %.4f\n", ms / steps,
                tokens / (ms / 1e3), flops / (ms / 1e3) / 1e12);
    std::vector<std::pair<std::string, trident::OpTime>> rows(backend->times().begin(), backend->times().end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    double total_ms = ms;
    std::printf("%-16s %10s %8s %8s\n", "op", "ms/step", "calls", "share");
    for (const auto& [name, t] : rows)
      std::printf("%-16s %10.2f %8lld %7.1f%%\n", name.c_str(), t.seconds * 1e3 / steps,
                  static_cast<long long>(t.calls / steps), 100.0 * t.seconds * 1e3 / total_ms);
    const auto gemm = backend->times().find("matmul");
    std::printf("GEMM share of step time: %.1f%%\n",
                gemm == backend->times().end() ? 0.0 : 100.0 * gemm->second.seconds * 1e3 / total_ms);
    return 0;
  });
}
