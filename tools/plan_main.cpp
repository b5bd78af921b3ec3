// trident-plan: what a training run needs before it runs. It takes trident-train's flags
// (model, layout, precision, batch, recomputation, ZeRO, interleaving) plus the world size,
// and prints each pipeline stage's device memory, measured by building that stage's trainer
// on a backend that allocates nothing and running one iteration (train/memory_plan.h): the
// figures are trident-train's own "peak memory" line, for a 16B model on a laptop.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/decimal.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "parallel/pipeline_split.h"
#include "tool_main.h"
#include "tools/integer_flag.h"
#include "tools/tool_flags.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_space.h"
#include "train/memory_plan.h"
#include "train/options.h"
#include "train/train_data.h"

namespace trident {
namespace {

constexpr const char* kUsage =
    "trident-plan: the device memory of each pipeline stage of a training run, before it runs\n"
    "\n"
    "Usage: trident-plan [trident-train flags] [--world-size N] [--gpu-memory-gib G]\n"
    "\n"
    "  --world-size N      ranks (GPUs) of the run: tensor x pipeline x data parallel; default\n"
    "                      tensor x pipeline (one data-parallel rank)\n"
    "  --gpu-memory-gib G  say whether the heaviest stage fits in G GiB per GPU\n"
    "\n"
    "Every other flag is trident-train's (--config, --num-layers, --fp16/--bf16,\n"
    "--micro-batch-size, --global-batch-size, --tensor-model-parallel-size,\n"
    "--pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-stage, --zero-stage,\n"
    "--recompute-granularity ...). Each stage's trainer is built on a backend that allocates\n"
    "nothing and runs one iteration, so its figures are what trident-train reports after its\n"
    "first iteration (\"peak memory\"): every parameter, gradient, optimizer, activation and\n"
    "scratch tensor. Not included: the CUDA context, cuBLASLt's workspace, NCCL's buffers and\n"
    "what kernels borrow within an op.\n";

struct PlanFlags {
  bool help = false;
  int world = 0;  // 0: tp x pp
  double gpu_gib = 0;
};

std::vector<std::string> take_plan_flags(int argc, char** argv, PlanFlags& f) {
  return take_tool_flags(argc, argv, "trident-plan", [&](const ToolFlag& t) {
    if (t.name == "--help") {
      f.help = true;
    } else if (t.name == "--world-size") {
      f.world = static_cast<int>(parse_integer_flag("world-size", t.value(), 1, 1 << 20));
    } else if (t.name == "--gpu-memory-gib") {
      const std::string v = t.value();
      const std::optional<double> gib = parse_decimal(v);
      if (!gib || !(*gib > 0) || !std::isfinite(*gib))
        throw ConfigError("--gpu-memory-gib: expected a positive number, got \"" + v + "\"");
      f.gpu_gib = *gib;
    } else {
      return false;
    }
    return true;
  });
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string layer_list(const std::vector<LayerRange>& chunks) {
  std::string s;
  for (const LayerRange& r : chunks) {
    if (r.size() == 0) continue;  // a chunk the embedding or the loss takes alone
    if (!s.empty()) s += ",";
    s += r.size() == 1 ? std::to_string(r.begin) : std::to_string(r.begin) + "-" + std::to_string(r.end - 1);
  }
  return s.empty() ? "none" : s;
}

int run(int argc, char** argv) {
  PlanFlags pf;
  const std::vector<std::string> args = take_plan_flags(argc, argv, pf);
  if (pf.help) {
    std::cout << kUsage;
    return 0;
  }
  TrainOptions opt;
  if (!parse_train_options(args, opt)) return 0;
  // The model trident-train would build: --use-checkpoint-args takes the shape from
  // --load's checkpoint, the tokenizer gives the vocabulary.
  if (!opt.load.empty())
    if (const std::string taken = take_parallel_args(opt); !taken.empty())
      std::cout << "trident-plan: --use-mp-args-from-checkpoint-args: " << taken << std::endl;
  if (!opt.load.empty()) resolve_load(opt);
  if (opt.has_data()) make_run_tokenizer(opt);
  const int tp = opt.tensor_model_parallel_size, pp = opt.pipeline_model_parallel_size;
  const int world = pf.world > 0 ? pf.world : tp * pp;
  if (world % (tp * pp) != 0)
    throw ConfigError("--world-size (" + std::to_string(world) + ") must be a multiple of --tensor-model-parallel-size (" +
                      std::to_string(tp) + ") x --pipeline-model-parallel-size (" + std::to_string(pp) + ")");
  const int dp = world / (tp * pp);
  resolve_global_batch_size(opt, dp);
  const ModelConfig& m = opt.model;
  const int chunks = opt.virtual_pipeline_chunks();
  const int micro_batches = opt.global_batch_size / std::max(1, opt.micro_batch_size * dp);

  // Every stage is measured before anything is printed: an impossible layout is one error line.
  std::vector<StageMemory> stages;
  for (int s = 0; s < pp; ++s) stages.push_back(plan_stage_memory(opt, world, s));
  const double params = static_cast<double>(m.num_parameters(tp));
  std::printf("trident-plan: GPT-2 %d layers, hidden %d, heads %d, seq %d, vocab %lld (padded %lld), %.4g%s parameters, %s\n",
              m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, static_cast<long long>(m.vocab_size),
              static_cast<long long>(m.padded_vocab_size(tp)), params >= 1e9 ? params / 1e9 : params / 1e6,
              params >= 1e9 ? "B" : "M", dtype_name(m.dtype));
  std::printf("trident-plan: world %d = tp %d x pp %d x dp %d, zero stage %d, micro batch %d, global batch %d: "
              "%d micro-batches per iteration%s\n",
              world, tp, pp, dp, opt.zero_stage, opt.micro_batch_size, opt.global_batch_size, micro_batches,
              chunks > 1 ? (", interleaved schedule: " + std::to_string(chunks) + " model chunks per stage").c_str()
                         : "");
  if (!opt.recompute_granularity.empty())
    std::printf("trident-plan: recomputation %s%s\n", opt.recompute_granularity.c_str(),
                opt.recompute_method.empty() ? "" : (" " + opt.recompute_method + ", " +
                                                     std::to_string(opt.recompute_num_layers) + " layers").c_str());
  std::printf("%5s  %-14s %14s %12s %12s %12s %14s\n", "stage", "layers", "parameters", "weights MiB",
              "grads MiB", "optim MiB", "peak MiB");
  const StageMemory* heaviest = &stages.front();
  for (const StageMemory& st : stages) {
    // The peak as trident-train prints it (std::to_string of MiB), so the two compare as text.
    std::printf("%5d  %-14s %14lld %12.1f %12.1f %12.1f %14s\n", st.stage, layer_list(st.layers).c_str(),
                static_cast<long long>(st.parameters), mib(st.weights), mib(st.gradients), mib(st.optimizer),
                std::to_string(mib(st.peak)).c_str());
    if (st.peak > heaviest->peak) heaviest = &st;
  }
  if (pp > 1) {
    // Megatron's bubble: (P - 1) / (V M) of the ideal iteration time (Narayanan et al. 2021).
    const double bubble = static_cast<double>(pp - 1) / (static_cast<double>(chunks) * micro_batches);
    std::printf("trident-plan: pipeline bubble (P - 1) / (V x M) = %d / (%d x %d) = %.1f%% of the busy time\n", pp - 1,
                chunks, micro_batches, 100.0 * bubble);
  }
  std::printf("trident-plan: %.3e model FLOPs per iteration (Megatron's formula), %.3e per rank\n",
              model_flops_per_iteration(m, opt.global_batch_size, tp),
              model_flops_per_iteration(m, opt.global_batch_size, tp) / world);
  // The disk a save takes, and with --save the room there (trident-train warns at its start
  // when not even one fits).
  const int64_t ckpt_bytes = checkpoint_bytes(opt);
  const double ckpt = static_cast<double>(ckpt_bytes);
  std::printf("trident-plan: a checkpoint takes %.3g GB (%lld bytes of %s)", ckpt / 1e9,
              static_cast<long long>(ckpt_bytes),
              opt.no_save_optim ? "weights: --no-save-optim" : "weights, fp32 master weights and Adam's moments");
  if (const std::optional<uint64_t> free = opt.save.empty() ? std::nullopt : free_bytes(opt.save))
    std::printf("; --save %s has %.3g GB free, room for %.0f", opt.save.c_str(), static_cast<double>(*free) / 1e9,
                std::floor(static_cast<double>(*free) / ckpt));
  std::printf("\n");
  std::printf("trident-plan: heaviest stage %d: peak %.1f MiB (%.2f GiB)", heaviest->stage, mib(heaviest->peak),
              mib(heaviest->peak) / 1024.0);
  if (pf.gpu_gib > 0) {
    const double left = pf.gpu_gib - mib(heaviest->peak) / 1024.0;
    if (left >= 0)
      std::printf("; fits in %.3g GiB with %.2f GiB left for the CUDA context, cuBLASLt and NCCL\n", pf.gpu_gib, left);
    else
      std::printf("; does NOT fit in %.3g GiB (%.2f GiB over)\n", pf.gpu_gib, -left);
    std::fflush(stdout);
    return left >= 0 ? 0 : 1;
  }
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_tool("trident-plan", [&] { return trident::run(argc, argv); });
}
