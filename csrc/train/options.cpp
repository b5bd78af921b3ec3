#include "train/options.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cxxopts.hpp>
#include <deque>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "core/decimal.h"
#include "core/error.h"
#include "core/flag_value.h"
#include "core/stop_signals.h"
#include "parallel/pipeline_layout.h"
#include "train/data_args_file.h"
#include "train/tensorboard_tags.h"
#include "train/timers.h"

namespace trident {
namespace {

// Every flag is declared as a string; typed conversion below names the flag on error.
struct FlagDef {
  const char* name;
  const char* help;
  bool is_bool = false;
};

// Megatron's implementation switches, which its example scripts pass: trident has one way
// to do each (its own data-parallel reduction, backend, .bin/.idx reader, fused kernels) or
// always does it, so they are accepted and change nothing.
const std::vector<FlagDef>& flags_without_effect_defs() {
  static const std::vector<FlagDef> defs = {
      {"DDP-impl", "Megatron's data-parallel implementation (local or torch): no effect"},
      {"distributed-backend", "Megatron's torch.distributed backend (nccl or gloo): no effect (see --comm)"},
      {"data-impl", "Megatron's dataset implementation (mmap, ...): no effect (.bin/.idx are memory-mapped)"},
      {"num-workers", "Megatron's data-loader workers: no effect"},
      {"exit-signal-handler-for-dataloader", "Megatron's signal handler in data-loader workers: trident has none",
       true},
      {"exit-signal-handler-for-training", "Megatron's: trident always stops cleanly on SIGTERM and SIGINT", true},
      {"no-masked-softmax-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-bias-gelu-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-bias-dropout-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-gradient-accumulation-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-async-tensor-model-parallel-allreduce", "Megatron's communication overlap switch: no effect", true},
      {"use-flash-attn", "Megatron's flash attention switch: the fused attention always runs", true},
      {"attention-softmax-in-fp32", "the fused attention's softmax always runs in fp32", true},
      {"no-query-key-layer-scaling", "Megatron's fp16 softmax rescaling: the attention's softmax is fp32 anyway", true},
      {"apply-query-key-layer-scaling", "Megatron's fp16 softmax rescaling: the attention's softmax is fp32 anyway",
       true},
      {"openai-gelu", "OpenAI's tanh GELU: the GELU trident computes", true},
      {"fp16-lm-cross-entropy", "Megatron's 16-bit cross entropy: the fused one reads 16-bit logits, sums in fp32",
       true},
      {"use-cpu-initialization", "Megatron's layout-independent init: trident's init is the same under every layout",
       true},
      {"no-persist-layer-norm", "Megatron's LayerNorm kernel switch: no effect", true},
      {"no-bias-swiglu-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-rope-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-clone-scatter-output-in-embedding", "Megatron's embedding memory switch: no effect", true},
      {"use-flash-attn-v2", "Megatron-DeepSpeed's flash attention switch: the fused attention always runs", true},
      {"attention-backend", "Megatron-core's attention implementation: the fused attention always runs"},
      {"use-mcore-models", "Megatron's model implementation switch: no effect", true},
      {"use-legacy-models", "Megatron's model implementation switch: no effect", true},
      {"transformer-impl", "Megatron's transformer implementation (local, transformer_engine): no effect"},
      {"manual-gc", "Megatron's Python garbage-collection switch: no effect", true},
      {"manual-gc-interval", "Megatron's Python garbage-collection interval: no effect"},
      {"no-manual-gc-eval", "Megatron's Python garbage-collection switch: no effect", true},
      {"empty-unused-memory-level", "Megatron's torch cache release: no effect (trident's allocator keeps its blocks)"},
      {"tp-comm-overlap", "Megatron's Transformer Engine TP overlap: no effect", true},
      {"no-overlap-p2p-communication", "Megatron's pipeline transfer overlap switch: no effect", true},
      {"no-scatter-gather-tensors-in-pipeline", "Megatron's pipeline transfer layout switch: no effect", true},
      {"no-delay-grad-reduce", "Megatron's reduction scheduling switch: no effect", true},
      {"delay-param-gather", "Megatron's gather scheduling switch: no effect", true},
      {"ddp-bucket-size", "Megatron's gradient bucket size: no effect (trident reduces each layer's gradients)"},
      {"defer-embedding-wgrad-compute", "Megatron's embedding gradient scheduling switch: no effect", true},
      {"distribute-saved-activations", "Megatron's recomputation memory switch: no effect", true},
      {"no-barrier-with-level-1-timing", "Megatron's timer barrier switch: no effect", true},
      {"ckpt-fully-parallel-save", "Megatron's distributed-checkpoint switch: no effect", true},
      {"ckpt-fully-parallel-load", "Megatron's distributed-checkpoint switch: no effect", true},
      {"ckpt-assume-constant-structure", "Megatron's distributed-checkpoint switch: no effect", true},
      {"num-dataset-builder-threads", "Megatron's dataset-building threads: no effect"},
      {"no-mmap-bin-files", "Megatron's .bin reading switch: no effect (.bin/.idx are memory-mapped)", true},
      {"enable-one-logger", "NVIDIA's internal metrics logger: no effect", true},
      {"ckpt-format", "Megatron's checkpoint format (torch, torch_dist, ...): no effect (trident saves its own, "
                      "which loads at any layout; trident-convert --to megatron writes Megatron's torch and torch_dist "
                      "formats)"},
      {"dist-ckpt-strictness", "Megatron's distributed-checkpoint load strictness: no effect (trident checks every "
                               "tensor of a checkpoint it loads)"},
      {"cross-entropy-loss-fusion", "Megatron's cross-entropy fusion switch: the cross entropy is always fused", true},
      {"cross-entropy-fusion-impl", "Megatron's fused cross-entropy implementation: no effect"},
      {"overlap-p2p-communication", "Megatron's pipeline transfer overlap switch: no effect", true},
      {"deterministic-mode", "Megatron's deterministic switch: no effect (trident's kernels use no floating-point "
                             "atomics unless TRIDENT_ATTN_BWD_ATOMIC opts in; for NCCL reductions that repeat run to "
                             "run set NCCL_ALGO=Ring, as Megatron requires)", true},
      {"logging-level", "Megatron's Python logging level: no effect"},
      {"log-straggler", "Megatron's straggler detector: not run (--timing-log-level 1 prints each phase's min and "
                        "max time across ranks)", true},
      {"disable-straggler-on-startup", "Megatron's straggler detector switch: no effect (the detector is not run)",
       true},
      {"straggler-ctrlr-port", "Megatron's straggler detector's port: no effect (the detector is not run)"},
      {"straggler-minmax-count", "Megatron's straggler detector's report size: no effect (the detector is not run)"},
      {"enable-ft-package", "NVIDIA Resiliency Extension's fault tolerance: not run (a rank that stops answering "
                            "ends the job after --distributed-timeout-minutes)", true},
      {"calc-ft-timeouts", "NVIDIA Resiliency Extension's fault-tolerance timeouts: no effect (not run)", true},
      {"init-model-with-meta-device", "Megatron's meta-device initialisation: no effect", true},
      {"local_rank", "torch.distributed.launch's rank: no effect (MPI gives the rank)"},
      {"check-for-nan-in-loss-and-grad", "Megatron's NaN check: trident always skips a step whose loss or gradient "
                                         "norm is NaN and stops after --max-nan-iterations", true},
      {"no-check-for-nan-in-loss-and-grad", "Megatron's NaN check off: trident still skips a step whose loss or "
                                            "gradient norm is NaN (and stops after --max-nan-iterations)", true},
      // Megatron-DeepSpeed's and BigScience's DeepSpeed switches (the config is --deepspeed_config's).
      {"deepspeed-activation-checkpointing", "DeepSpeed's activation checkpointing: recomputation follows "
                                             "--recompute-granularity / --checkpoint-activations", true},
      {"partition-activations", "DeepSpeed's activation partitioning: no effect", true},
      {"contigious-checkpointing", "DeepSpeed's activation memory layout (sic): no effect", true},
      {"checkpoint-in-cpu", "DeepSpeed's activation offload: no effect", true},
      {"synchronize-each-layer", "DeepSpeed's per-layer synchronisation: no effect", true},
      {"profile-backward", "DeepSpeed's backward profiling: no effect", true},
      {"zero-reduce-scatter", "DeepSpeed's ZeRO reduction switch: no effect (the stage is --zero-stage's, or "
                              "the --deepspeed_config file's)", true},
      {"zero-contigious-gradients", "DeepSpeed's ZeRO gradient layout (sic): no effect", true},
      {"zero-reduce-bucket-size", "DeepSpeed's ZeRO bucket size: no effect"},
      {"zero-allgather-bucket-size", "DeepSpeed's ZeRO bucket size: no effect"},
      {"remote-device", "DeepSpeed's ZeRO offload device: no effect (the state stays on the device)"},
      {"use-pin-memory", "DeepSpeed's ZeRO offload switch: no effect", true},
      {"scattered-embeddings", "DeepSpeed's memory switch: no effect", true},
      {"split-transformers", "DeepSpeed's memory switch: no effect", true},
      {"memory-centric-tiled-linear", "DeepSpeed's tiled linear layers: no effect", true},
      {"tile-factor", "DeepSpeed's tiled linear layers: no effect"},
      {"no-pipeline-parallel", "Megatron-DeepSpeed without DeepSpeed's pipeline engine: trident's pipeline is its "
                               "own", true},
      {"deepspeed_mpi", "DeepSpeed's MPI discovery: no effect (MPI gives the ranks)", true},
      {"cpu-optimizer", "DeepSpeed's CPU Adam: no effect (the optimizer runs on the device)", true},
      {"cpu_torch_adam", "DeepSpeed's CPU Adam: no effect (the optimizer runs on the device)", true},
      {"use-flash-attn-triton", "Megatron-DeepSpeed's flash attention switch: the fused attention always runs", true},
      {"universal-checkpoint", "DeepSpeed's universal checkpoints: trident's checkpoints load at any layout", true},
      {"abort-on-unmet-fused-kernel-constraints", "BigScience's fused-kernel check: no effect", true},
      {"sync-tp-duplicated-parameters", "BigScience's tensor-parallel copies sync: trident's copies stay equal",
       true},
      {"codecarbon-dir", "BigScience's CodeCarbon emissions log: not written"},
      {"log-level", "BigScience's Python log level: no effect"},
      {"log-level-replica", "BigScience's Python log level: no effect"},
      // Megatron-LM 2025's switches for its own implementation (data loader, distributed
      // checkpoints, its DDP's buckets, NCCL and pipeline plumbing, CUDA graphs, CPU offload,
      // NVIDIA's job telemetry): trident has one way of each.
      {"no-create-attention-mask-in-dataloader", "Megatron's attention-mask tensor: no effect (the fused attention "
                                                 "is causal without one)", true},
      {"num-query-groups", "Megatron's grouped-query attention groups: no effect without --group-query-attention "
                           "(which is refused), as in Megatron"},
      {"legacy-tokenizer", "Megatron's tokenizer implementation switch: no effect", true},
      {"no-use-tokenizer-model-from-checkpoint-args", "Megatron's tokenizer-from-checkpoint switch: no effect", true},
      {"no-initialization", "Megatron's skip of the initialisation before a load: no effect", true},
      {"no-ckpt-fully-parallel-save", "Megatron's distributed-checkpoint switch: no effect", true},
      {"use-dist-ckpt", "Megatron's distributed-checkpoint switch: no effect (see --ckpt-format)", true},
      {"dist-ckpt-format", "Megatron's distributed-checkpoint backend: no effect (see --ckpt-format)"},
      {"auto-detect-ckpt-format", "Megatron's checkpoint format detection: no effect (trident reads its own)", true},
      {"use-persistent-ckpt-worker", "Megatron's async-save worker process: no effect (--async-save writes from a "
                                     "thread)", true},
      {"dist-ckpt-optim-fully-reshardable", "Megatron's distributed-optimizer checkpoint format: no effect "
                                            "(trident's optimizer state loads at any layout)", true},
      {"distrib-optim-fully-reshardable-mem-efficient", "Megatron's distributed-optimizer checkpoint switch: no "
                                                        "effect", true},
      {"dist-ckpt-save-pre-mcore-014", "Megatron's distributed-checkpoint compatibility switch: no effect", true},
      {"ddp-num-buckets", "Megatron's gradient bucket count: no effect (trident reduces each layer's gradients)"},
      {"ddp-pad-buckets-for-high-nccl-busbw", "Megatron's gradient bucket padding: no effect", true},
      {"ddp-average-in-collective", "Megatron's averaging inside the reduction: no effect (the average is the "
                                    "same)", true},
      {"ddp-reduce-scatter-with-fp32-accumulation", "Megatron's fp32 reduction of 16-bit gradients: trident reduces "
                                                    "fp32 gradients already (bf16; fp16 with "
                                                    "--accumulate-allreduce-grads-in-fp32)", true},
      {"overlap-param-gather-with-optimizer-step", "Megatron's gather scheduling switch: no effect (see "
                                                   "--overlap-param-gather)", true},
      {"no-align-grad-reduce", "Megatron's reduction scheduling switch: no effect", true},
      {"no-align-param-gather", "Megatron's gather scheduling switch: no effect", true},
      {"no-gradient-reduce-div-fusion", "Megatron's gradient scaling switch: no effect", true},
      {"wgrad-deferral-limit", "Megatron's weight-gradient deferral: no effect"},
      {"overlap-p2p-communication-warmup-flush", "Megatron's pipeline transfer overlap switch: no effect", true},
      {"use-ring-exchange-p2p", "Megatron's pipeline transfer implementation: no effect", true},
      {"nccl-communicator-config-path", "Megatron's per-communicator NCCL settings file: not read (NCCL's "
                                        "environment variables apply)"},
      {"use-sharp", "Megatron's NCCL SHARP switch: no effect (NCCL_COLLNET_ENABLE applies)", true},
      {"disable-gloo-process-groups", "Megatron's Gloo groups: trident makes none", true},
      {"tp-comm-overlap-cfg", "Megatron's Transformer Engine TP overlap settings: no effect"},
      {"tp-comm-bootstrap-backend", "Megatron's Transformer Engine TP overlap bootstrap: no effect"},
      {"tp-comm-overlap-rs-dgrad", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"disable-tp-comm-overlap-ag", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"disable-tp-comm-overlap-rs", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"disable-tp-comm-bulk-dgrad", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"disable-tp-comm-bulk-wgrad", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"disable-tp-comm-split-ag", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"disable-tp-comm-split-rs", "Megatron's Transformer Engine TP overlap switch: no effect", true},
      {"cuda-graph-impl", "Megatron's CUDA graph capture of the training step: no effect"},
      {"cuda-graph-warmup-steps", "Megatron's CUDA graph capture: no effect"},
      {"enable-cuda-graph", "Megatron's CUDA graph capture: no effect", true},
      {"external-cuda-graph", "Megatron's CUDA graph capture: no effect", true},
      {"result-rejected-tracker-filename", "Megatron's re-run state machine's log: no effect (--rerun-mode "
                                           "disabled)"},
      // Megatron 2025-26: implementation, offload, overlap and plumbing switches (the same math).
      {"disable-manual-gc-eval", "Megatron's Python garbage-collection switch: no effect", true},
      {"disable-align-grad-reduce", "Megatron's gradient-reduce alignment switch: no effect", true},
      {"disable-clone-scatter-output-in-embedding", "Megatron's embedding memory switch: no effect", true},
      {"disable-fp8-wgrad", "Megatron's FP8 switch: no effect (no FP8)", true},
      {"pipeline-model-parallel-comm-backend", "Megatron's pipeline transport (nccl, ucc): no effect (see --comm)"},
      {"sharp-enabled-group", "Megatron's IB SHARP group: no effect (NCCL_COLLNET_ENABLE applies)"},
      {"distributed-timeout-seconds-after-init", "Megatron's process-group timeout after start-up: no effect (see "
                                                 "--distributed-timeout-minutes)"},
      {"fused-residual-rmsnorm", "Transformer Engine's RMSNorm fusion: no effect (GPT-2's LayerNorm)", true},
      {"mlp-chunks-for-training", "Megatron's MLP split along the sequence (memory): no effect"},
      {"cpu-offloading-num-layers", "Megatron's CPU offload of layers (memory): no effect"},
      {"cpu-offloading-retain-pinned-cpu-buffers", "Megatron's CPU offload: no effect", true},
      {"fine-grained-activation-offloading", "Megatron's activation offload (memory): no effect", true},
      {"min-offloaded-tensor-size", "Megatron's activation offload: no effect"},
      {"delay-offload-until-cuda-graph", "Megatron's activation offload: no effect", true},
      {"delta-offload-bytes-across-pp-ranks", "Megatron's activation offload: no effect"},
      {"activation-offload-fraction", "Megatron's activation offload: no effect"},
      {"fine-grained-offloading-max-inflight-offloads", "Megatron's activation offload: no effect"},
      {"inference-cuda-graph-scope", "Megatron's inference CUDA graphs: no effect in training"},
      {"cuda-graph-dynamic-microbatches", "Megatron's CUDA graph capture: no effect", true},
      {"thd-max-packed-sequences", "Megatron's packed-sequence buffer for CUDA graphs: no effect (no packing)"},
      {"enable-zbh1-pipeline", "Megatron-DeepSpeed's zero-bubble schedule (the same gradients): no effect (1F1B)",
       true},
      {"enable-zbh1-exact-semantics", "Megatron-DeepSpeed's zero-bubble schedule: no effect", true},
      {"pp-delay", "Megatron-DeepSpeed's pipeline switch: no effect", true},
      {"pp-split-size", "Megatron-DeepSpeed's pipeline split size: no effect"},
      {"repeated-dataloader", "Megatron-DeepSpeed's data-loader reuse: no effect (the data is sized for the run)",
       true},
      {"per-dataset-sequences-path", "Megatron's precomputed sequence counts (start-up time): no effect"},
      {"ckpt-fully-parallel-load-exchange-algo", "Megatron's torch_dist load plumbing: no effect"},
      {"ckpt-fully-parallel-save-process-group", "Megatron's torch_dist save plumbing: no effect"},
      {"ckpt-fully-parallel-load-process-group", "Megatron's torch_dist load plumbing: no effect"},
      {"ckpt-fully-parallel-save-replicate-local", "Megatron's torch_dist save plumbing: no effect", true},
      {"ckpt-fully-parallel-load-replicate-local", "Megatron's torch_dist load plumbing: no effect", true},
      {"no-ckpt-load-validate-sharding-integrity", "Megatron's torch_dist load check: no effect", true},
      {"disable-ckpt-load-validate-sharding-integrity", "Megatron's torch_dist load check: no effect", true},
      {"async-ckpt-cpu-priority", "Megatron's async writer priority: no effect"},
      {"async-ckpt-io-priority", "Megatron's async writer I/O class: no effect"},
      {"async-ckpt-use-cpu-shm", "Megatron's async writer staging: no effect", true},
      {"no-weight-decay-cond-type", "Megatron's weight-decay rule for QK LayerNorms: no effect (GPT-2 has none)"},
      {"disable-mamba-mem-eff-path", "Megatron's Mamba kernel switch: no effect (no Mamba layers)", true},
      // Megatron 2025-26: monitoring, profiling and services trident does not run.
      {"gpu-sniff-test-interval", "Megatron's periodic GPU performance test: not run"},
      {"record-shapes", "Megatron's NVTX shapes: no effect", true},
      {"nvtx-ranges", "Megatron's NVTX ranges: no effect (--profile marks iterations)", true},
      {"run-workload-inspector-server", "Megatron's profiling server: not run", true},
      {"flight-recorder-dump-path", "PyTorch's NCCL flight recorder: not run"},
      {"flight-recorder-trace-buffer-size", "PyTorch's NCCL flight recorder: not run"},
      {"no-flight-recorder-dump-on-timeout", "PyTorch's NCCL flight recorder: not run", true},
      {"flight-recorder-include-stack-trace", "PyTorch's NCCL flight recorder: not run", true},
      {"no-flight-recorder-include-only-active", "PyTorch's NCCL flight recorder: not run", true},
      {"no-flight-recorder-extra-dump-on-exec", "PyTorch's NCCL flight recorder: not run", true},
      {"no-filter-warnings", "Megatron's Python warnings filter: no effect", true},
      {"disable-filter-warnings", "Megatron's Python warnings filter: no effect", true},
      {"one-logger-entity", "NVIDIA's internal metrics logger: not run"},
      {"set-level-for-all-loggers", "Megatron's Python logging switch: no effect", true},
      {"inprocess-max-iterations", "Megatron's in-process restart (not run: --inprocess-restart is refused)"},
      {"inprocess-monitor-thread-interval", "Megatron's in-process restart: not run"},
      {"inprocess-monitor-process-interval", "Megatron's in-process restart: not run"},
      {"inprocess-progress-watchdog-interval", "Megatron's in-process restart: not run"},
      {"inprocess-heartbeat-interval", "Megatron's in-process restart: not run"},
      {"inprocess-soft-timeout", "Megatron's in-process restart: not run"},
      {"inprocess-hard-timeout", "Megatron's in-process restart: not run"},
      {"inprocess-heartbeat-timeout", "Megatron's in-process restart: not run"},
      {"inprocess-barrier-timeout", "Megatron's in-process restart: not run"},
      {"inprocess-completion-timeout", "Megatron's in-process restart: not run"},
      {"inprocess-last-call-wait", "Megatron's in-process restart: not run"},
      {"inprocess-termination-grace-time", "Megatron's in-process restart: not run"},
      {"inprocess-granularity", "Megatron's in-process restart: not run"},
      {"inprocess-active-world-size", "Megatron's in-process restart's spare ranks: not run (every rank trains)"},
      {"inprocess-empty-cuda-cache", "Megatron's in-process restart: not run", true},
      {"ft-num-warmup-iters", "NVIDIA Resiliency Extension's fault tolerance: not run"},
      {"test-mode", "Megatron's internal test switch: no effect", true},
      {"enable-experimental", "Megatron's experimental code paths: no effect", true},
      {"no-save-tokenizer-assets", "Megatron's tokenizer files in checkpoints: trident writes none anyway", true},
      {"te-rng-tracker", "Transformer Engine's RNG tracker: no effect (dropout is keyed by the seed)", true},
      {"train-sync-interval", "Megatron's host-device synchronisation interval: no effect"},
      {"no-one-logger", "NVIDIA's internal metrics logger: not run", true},
      {"one-logger-project", "NVIDIA's internal metrics logger: not run"},
      {"one-logger-run-name", "NVIDIA's internal metrics logger: not run"},
      {"one-logger-async", "NVIDIA's internal metrics logger: not run", true},
      {"app-tag-run-name", "NVIDIA's internal metrics logger's tag: not run"},
      {"app-tag-run-version", "NVIDIA's internal metrics logger's tag: not run"},
      {"adlr-autoresume", "NVIDIA's cluster auto-resume: not run (--exit-duration-in-mins and SIGTERM save and stop)",
       true},
      {"adlr-autoresume-interval", "NVIDIA's cluster auto-resume: not run"},
      {"disable-msc", "Megatron's multi-storage client switch: no effect (paths are files)", true},
      // Megatron-LM's newest (its dataclass configs, 2026): switches of its implementation.
      {"delay-wgrad-compute", "Megatron's weight-gradient scheduling switch: no effect", true},
      {"use-transformer-engine-op-fuser", "Transformer Engine's op fuser: no effect", true},
      {"use-te-activation-func", "Transformer Engine's activation kernels: no effect", true},
      {"fallback-to-eager-attn", "Megatron's attention fallback: the fused attention always runs", true},
      {"disable-jit-fuser", "torch's JIT fuser: no effect", true},
      {"use-nccl-ub", "NCCL user buffers: no effect", true},
      {"disable-symmetric-registration", "NCCL symmetric memory registration: no effect", true},
      {"create-all-gather-group", "Megatron's separate all-gather group: no effect", true},
      {"async-strategy", "Megatron's asynchronous save implementation: no effect (--async-save writes with "
                         "trident's thread)"},
      {"memory-snapshot-path", "torch's allocator snapshot (with --record-memory-history): not written"},
      {"pytorch-profiler-collect-shapes", "torch's profiler (--use-pytorch-profiler): not run", true},
      {"pytorch-profiler-collect-callstack", "torch's profiler (--use-pytorch-profiler): not run", true},
      {"pytorch-profiler-collect-chakra", "torch's profiler (--use-pytorch-profiler): not run", true},
      {"config-logger-dir", "Megatron's dump of its configs: not written (trident-train's first lines and the "
                            "checkpoint's metadata.json hold the run's settings)"},
      {"allow-ambiguous-pad-tokens", "Megatron's pad-token check: trident's GPT datasets never pad", true},
      {"dataloader-fast-cache-load", "Megatron's dataset-cache loading switch: no effect (the caches are "
                                     "memory-mapped)", true},
      {"dataloader-defer-npy-index-mmap", "Megatron's dataset-cache loading switch: no effect", true},
      {"apply-wd-to-qk-layernorm", "GPT-2 has no query/key LayerNorm", true},
      // Read by Megatron only with a setting that trident refuses: without effect otherwise.
      {"rotary-base", "read only with rotary positions; GPT-2's are learned absolute embeddings"},
      {"rotary-percent", "read only with rotary positions; GPT-2's are learned absolute embeddings"},
      {"rotary-interleaved", "read only with rotary positions; GPT-2's are learned absolute embeddings", true},
      {"rotary-seq-len-interpolation-factor", "read only with rotary positions; GPT-2's are learned absolute "
                                              "embeddings"},
      {"use-rope-scaling", "read only with rotary positions; GPT-2's are learned absolute embeddings", true},
      {"rope-scaling-factor", "read only with rotary positions; GPT-2's are learned absolute embeddings"},
      {"fp8-margin", "read only with --fp8-format, which trident refuses"},
      {"fp8-interval", "read only with --fp8-format, which trident refuses"},
      {"fp8-amax-history-len", "read only with --fp8-format, which trident refuses"},
      {"fp8-amax-compute-algo", "read only with --fp8-format, which trident refuses"},
      {"fp8-recipe", "read only with --fp8-format, which trident refuses"},
      {"no-fp8-wgrad", "read only with --fp8-format, which trident refuses", true},
      {"first-last-layers-bf16", "read only with --fp8-format or --fp4-format, which trident refuses", true},
      {"sgd-momentum", "read only with --optimizer sgd, which trident refuses"},
      {"tiktoken-pattern", "read only with --tokenizer-type TikTokenizer, which trident refuses"},
      {"optimizer-cpu-offload", "Megatron's optimizer offload: no effect (the optimizer runs on the device)", true},
      {"optimizer-offload-fraction", "Megatron's optimizer offload: no effect (the optimizer runs on the device)"},
      {"use-torch-optimizer-for-cpu-offload", "Megatron's optimizer offload: no effect", true},
      {"overlap-cpu-optimizer-d2h-h2d", "Megatron's optimizer offload: no effect", true},
      {"no-pin-cpu-grads", "Megatron's optimizer offload: no effect", true},
      {"no-pin-cpu-params", "Megatron's optimizer offload: no effect", true},
      // Megatron-DeepSpeed's.
      {"mmap-warmup", "Megatron-DeepSpeed's .bin warm-up read: no effect", true},
      {"distribute-checkpointed-activations", "Megatron-DeepSpeed's recomputation memory switch: no effect", true},
      {"no-contiguous-buffers-in-local-ddp", "Megatron-DeepSpeed's gradient buffer switch: no effect", true},
      {"use-contiguous-buffers-in-ddp", "Megatron-DeepSpeed's gradient buffer switch: no effect", true},
      {"disable-mem-efficient-ln", "Megatron-DeepSpeed's LayerNorm kernel switch: no effect", true},
      {"use-flash-attn-v1", "Megatron-DeepSpeed's flash attention switch: the fused attention always runs", true},
      {"use-flash-attn-builder", "Megatron-DeepSpeed's flash attention switch: the fused attention always runs",
       true},
      {"ds_fused_adam", "DeepSpeed's fused Adam: trident's AdamW is fused", true},
      {"deepscale", "DeepSpeed's deprecated helper switch (no effect in DeepSpeed either; --deepspeed enables "
                    "it)", true},
      {"use-pytorch-profiler", "torch's profiler: not run (--profile starts the device profiler's capture, for "
                               "nsys)", true},
      {"record-memory-history", "torch's allocator history: not recorded (--log-memory-to-tensorboard logs "
                                "trident's allocator)", true},
  };
  return defs;
}

// Megatron's list-valued flags that change nothing here: their words are read (so that the flags
// after them parse; none is fine too) and the flag is noted.
const std::vector<FlagDef>& list_flags_without_effect_defs() {
  static const std::vector<FlagDef> defs = {
      {"cuda-graph-scope", "SCOPE ...: Megatron's CUDA graph capture: no effect"},
      {"cuda-graph-modules", "MODULE ...: Megatron's CUDA graph capture: no effect"},
      {"cp-comm-type", "TYPE ...: Megatron's context-parallel communication: no effect (no context parallelism)"},
      {"high-priority-stream-groups", "GROUP ...: Megatron's high-priority NCCL streams: no effect"},
      {"offload-modules", "MODULE ...: Megatron's activation offload: no effect"},
      {"modules-to-filter", "MODULE ...: Megatron's Python logger filter: no effect"},
      {"custom-recompute-layers-per-stage", "N ...: Megatron-DeepSpeed's recomputed layers per stage (memory): no "
                                            "effect"},
  };
  return defs;
}

bool is_list_flag_without_effect(const std::string& flag) {
  for (const FlagDef& d : list_flags_without_effect_defs())
    if (flag == d.name) return true;
  return false;
}

// Megatron's flags for what GPT-2 (or trident) does one way. A value flag that names that
// way is accepted (and listed with the flags without effect); another value, or any flag
// whose value is nullptr (a switch asking for something else), is refused with `why`. The
// --help text is derived from value and why.
struct FixedSetting {
  const char* name;
  bool is_bool;
  const char* value;  // the accepted value, or nullptr: refused whenever given
  const char* why;
  const char* also = nullptr;  // another spelling of the accepted value (Megatron-DeepSpeed's)
};

const std::vector<FixedSetting>& fixed_setting_defs() {
  static const char* const kPositions = "GPT-2's positions are learned absolute embeddings";
  static const char* const kGelu = "GPT-2's MLP is GELU";
  static const char* const kBiases = "GPT-2's linear layers all have biases";
  static const char* const kWandb = "Weights & Biases is not supported; --tensorboard-dir writes Megatron's scalars";
  static const std::vector<FixedSetting> defs = {
      {"position-embedding-type", false, "learned_absolute", kPositions},
      {"use-rotary-position-embeddings", true, nullptr, kPositions},
      {"no-position-embedding", true, nullptr, kPositions},
      {"normalization", false, "LayerNorm", "GPT-2 normalises with LayerNorm", "layernorm"},
      {"norm-epsilon", false, "1e-5", "GPT-2's LayerNorm epsilon is 1e-5"},
      {"layernorm-epsilon", false, "1e-5", "GPT-2's LayerNorm epsilon is 1e-5"},  // Megatron-DeepSpeed's name
      {"partition-method", false, "type:transformer", "the pipeline stages split the transformer layers "
                                                      "(uneven: --decoder-first-pipeline-num-layers and "
                                                      "--decoder-last-pipeline-num-layers)"},
      {"inprocess-restart", true, nullptr, "trident does not restart in place: a failing rank ends the job "
                                           "(--distributed-timeout-minutes), which resumes from its latest "
                                           "checkpoint"},
      {"apply-layernorm-1p", true, nullptr, "GPT-2's LayerNorm weights are stored as they are, not as an offset from 1"},
      {"swiglu", true, nullptr, kGelu},
      {"squared-relu", true, nullptr, kGelu},
      {"disable-bias-linear", true, nullptr, kBiases},
      {"add-qkv-bias", true, nullptr, kBiases},
      {"group-query-attention", true, nullptr, "GPT-2's attention has a key and a value head per query head"},
      {"qk-layernorm", true, nullptr, "GPT-2 normalises neither queries nor keys"},
      {"apply-residual-connection-post-layernorm", true, nullptr,
       "GPT-2 adds each layer's input, not its LayerNorm's output, to the residual"},
      {"fp32-residual-connection", true, nullptr, "the residual stream is kept in the run's dtype"},
      {"untie-embeddings-and-output-weights", true, nullptr, "GPT-2's LM head is its word embedding"},
      {"init-method-xavier-uniform", true, nullptr, "GPT-2's weights are drawn from N(0, --init-method-std)"},
      {"data-parallel-random-init", true, nullptr, "every data-parallel replica starts from the same weights"},
      {"optimizer", false, "adam", "trident trains with AdamW (Megatron's adam)"},
      {"dataloader-type", false, "single", "samples are read in Megatron's single order"},
      {"context-parallel-size", false, "1", "no context parallelism: a sequence stays on its tensor-parallel ranks"},
      {"standalone-embedding-stage", true, nullptr, "the embedding shares the first pipeline stage with its layers"},
      {"embed-layernorm", true, nullptr, "GPT-2 has no LayerNorm after its embeddings"},
      // Megatron's removed flags, refused as Megatron refuses them.
      {"batch-size", false, nullptr, "Megatron's old flag, no longer valid: use --micro-batch-size"},
      {"warmup", false, nullptr, "Megatron's old flag, no longer valid: use --lr-warmup-fraction (or --lr-warmup-iters, "
                                 "--lr-warmup-samples)"},
      {"model-parallel-size", false, nullptr, "Megatron's old flag, no longer valid: use --tensor-model-parallel-size"},
      {"decoupled-lr", false, nullptr, "the input and output layers train at --lr like the others"},
      {"decoupled-min-lr", false, nullptr, "the input and output layers train at --lr like the others"},
      {"ds-sequence-parallel-size", false, "1", "no DeepSpeed-Ulysses sequence parallelism (Megatron's "
                                                "--sequence-parallel is supported)"},
      {"grad-reduce-in-bf16", true, nullptr, "bf16 gradients are accumulated and reduced in fp32 (Megatron's "
                                             "default)"},
      {"use-torch-fsdp2", true, nullptr, "trident shards the optimizer state and the gradients over the data-parallel "
                                         "ranks (--use-distributed-optimizer, --zero-stage 1 or 2), not the parameters"},
      {"use-megatron-fsdp", true, nullptr, "trident shards the optimizer state and the gradients over the "
                                           "data-parallel ranks (--use-distributed-optimizer, --zero-stage 1 or 2), "
                                           "not the parameters"},
      {"wandb-project", false, nullptr, kWandb},
      {"wandb-exp-name", false, nullptr, kWandb},
      {"wandb-save-dir", false, nullptr, kWandb},
      {"wandb-entity", false, nullptr, kWandb},
      {"use-precision-aware-optimizer", true, nullptr, "the optimizer keeps fp32 master weights and Adam moments"},
      {"main-grads-dtype", false, "fp32", "gradients are accumulated in fp32 (bf16's; fp16's with "
                                          "--accumulate-allreduce-grads-in-fp32)"},
      {"main-params-dtype", false, "fp32", "the master weights are fp32"},
      {"exp-avg-dtype", false, "fp32", "Adam's moments are fp32"},
      {"exp-avg-sq-dtype", false, "fp32", "Adam's moments are fp32"},
      {"num-distributed-optimizer-instances", false, "1", "one distributed optimizer over all data-parallel ranks"},
      {"softmax-type", false, "vanilla", "GPT-2's attention softmax has no sink or offset"},
      {"window-size", false, nullptr, "GPT-2's attention is causal over the whole sequence (no sliding window)"},
      {"qk-l2-norm", true, nullptr, "GPT-2 normalises neither queries nor keys"},
      {"mtp-num-layers", false, "0", "GPT-2 predicts the next token only (no multi-token prediction layers)"},
      {"tokenizer-model", false, nullptr, "the tokenizers are GPT-2's BPE (--vocab-file, --merge-file), BERT's "
                                          "WordPiece (--vocab-file) and NullTokenizer (--vocab-size)"},
      // Megatron-LM's newest.
      {"num-experts", false, "1", "GPT-2 is dense (no mixture of experts; Megatron-DeepSpeed's 1 expert is dense)"},
      {"expert-model-parallel-size", false, "1", "GPT-2 is dense (no experts to split)"},
      {"expert-tensor-parallel-size", false, "1", "GPT-2 is dense (no experts to split)"},
      {"fp8-format", false, nullptr, "trident's GEMMs compute in bf16, fp16 or fp32 (no FP8)"},
      {"fp8-param-gather", true, nullptr, "trident's GEMMs compute in bf16, fp16 or fp32 (no FP8)"},
      {"fp4-format", false, nullptr, "trident's GEMMs compute in bf16, fp16 or fp32 (no FP4)"},
      {"fp4-param-gather", true, nullptr, "trident's GEMMs compute in bf16, fp16 or fp32 (no FP4)"},
      {"quick-geglu", true, nullptr, kGelu},
      {"attention-output-gate", true, nullptr, "GPT-2's attention has no output gate"},
      {"use-mup", true, nullptr, "GPT-2's weights are drawn from N(0, --init-method-std) (no muP scaling)"},
      {"batch-invariant-mode", true, nullptr, "trident's kernels are not made batch-invariant (a sample's result "
                                              "may change in its last bits with the batch it is in)"},
      {"padded-vocab-size", false, nullptr, "the padding comes from --make-vocab-size-divisible-by (x "
                                            "--tensor-model-parallel-size)"},
      {"decrease-batch-size-if-needed", true, nullptr, "the global batch must be a multiple of the micro batch x "
                                                       "the data-parallel size"},
      {"use-tp-pp-dp-mapping", true, nullptr, "trident orders the ranks tensor-, data-, then pipeline-parallel "
                                              "(Megatron's default order)"},
      {"rerun-mode", false, "disabled", "trident does not re-run an iteration to tell a transient fault from a "
                                        "real NaN or Inf: such a step is skipped (--max-nan-iterations)"},
      {"check-for-spiky-loss", true, nullptr, "trident checks the loss and gradients for NaN and Inf only"},
      {"check-for-large-grads", true, nullptr, "trident checks the loss and gradients for NaN and Inf only"},
  };
  return defs;
}

const std::vector<FlagDef>& flag_defs() {
  static const std::vector<FlagDef> defs = {
      {"config", "YAML file with flag values (one file; the command line wins)"},
      // Model.
      {"num-layers", "transformer layers"},
      {"hidden-size", "hidden size"},
      {"num-attention-heads", "attention heads"},
      {"seq-length", "sequence length"},
      {"max-position-embeddings", "learned positions"},
      {"vocab-size", "vocabulary size for synthetic data (default 50257); with NullTokenizer its ids (the model "
                     "then has one more, the end of document)"},
      {"make-vocab-size-divisible-by", "pad the vocabulary to a multiple of this x tp (128)"},
      {"init-method-std", "std of the normal init (0.02)"},
      {"embedding-init-method-std", "std of the word and position embeddings' normal init, which then take no "
                                    "weight decay (Megatron's; default: --init-method-std, with weight decay)"},
      {"ffn-hidden-size", "MLP width: GPT-2's 4 x --hidden-size (another value is refused)"},
      {"kv-channels", "attention head width: --hidden-size / --num-attention-heads (another value is refused)"},
      {"hidden-dropout", "dropout on hidden states (0.1, Megatron's default)"},
      {"attention-dropout", "dropout on attention probabilities (0.1, Megatron's default)"},
      // Batch, length of training, schedule.
      {"micro-batch-size", "samples per micro-batch"},
      {"global-batch-size", "samples per iteration (a multiple of the micro batch)"},
      {"train-iters", "iterations (iteration-based training; default 100)"},
      {"train-samples", "samples (sample-based training, instead of --train-iters)"},
      {"lr", "peak learning rate (1.5e-4 when not given; Megatron has no default)"},
      {"min-lr", "learning rate after decay"},
      {"lr-decay-style", "constant, linear, cosine, inverse-square-root or WSD (warmup-stable-decay)"},
      {"lr-warmup-iters", "warm-up iterations"},
      {"lr-decay-iters", "decay iterations (default: train-iters)"},
      {"lr-warmup-samples", "warm-up samples (sample-based)"},
      {"lr-decay-samples", "decay samples (sample-based; default: train-samples)"},
      {"lr-wsd-decay-iters", "WSD: iterations of the final anneal, which ends with the decay"},
      {"lr-wsd-decay-samples", "WSD: samples of the final anneal (sample-based)"},
      {"lr-wsd-decay-style", "WSD: the anneal's shape: exponential (default), linear, cosine or minus_sqrt"},
      {"lr-warmup-fraction", "warm-up as a fraction of the decay (instead of the warm-up count)"},
      {"lr-warmup-init", "the warm-up's first learning rate, rising linearly to --lr (0)"},
      {"lr-warmup-tokens", "warm-up tokens (Megatron-DeepSpeed's; instead of the warm-up in iterations or samples)"},
      {"lr-decay-tokens", "the decay's end in tokens (Megatron-DeepSpeed's; instead of the decay in iterations or "
                          "samples, which still bound the warm-up)"},
      {"train-tokens", "stop once the run has consumed this many tokens (Megatron-DeepSpeed's; --train-iters or "
                       "--train-samples still bound the run and size the data)"},
      {"rampup-batch-size", "START INCR SAMPLES: the global batch grows from START by INCR in equal steps over "
                            "the first SAMPLES samples up to --global-batch-size (with --train-samples)"},
      {"step-batch-size-schedule", "\"T0:B0 T1:B1 ...\": global batches of B_i samples from T_i tokens on (K, M, B, "
                                   "T: 10^3..10^12; T0 is 0; the last B is the global batch; with --train-samples, "
                                   "without --global-batch-size)"},
      {"iterations-to-skip", "N ...: Megatron's skipped iterations (1-based): their global batch is read past, "
                             "without a step, a log line, an evaluation or a save"},
      // Optimizer.
      {"weight-decay", "AdamW decoupled weight decay (0.01)"},
      {"start-weight-decay", "weight decay at the start of the run (default --weight-decay)"},
      {"end-weight-decay", "weight decay at the end of the run (default --weight-decay)"},
      {"weight-decay-incr-style", "constant, linear or cosine rise from --start- to --end-weight-decay (constant)"},
      {"use-distributed-optimizer", "Megatron's distributed optimizer: --zero-stage 1 unless a stage is given", true},
      {"overlap-grad-reduce", "each layer's data-parallel gradient reduction runs while backward goes on (NCCL; "
                              "the default)", true},
      {"no-overlap-grad-reduce", "wait for each gradient reduction as soon as it is queued (to compare, or to "
                                 "rule the overlap out)", true},
      {"overlap-param-gather", "with ZeRO: each layer's updated parameters are gathered while the next forward "
                               "runs the layers before it (NCCL; not with --no-overlap-grad-reduce)", true},
      {"clip-grad", "clip gradients to this global norm (1.0; 0 off)"},
      {"adam-beta1", "0.9"},
      {"adam-beta2", "0.999"},
      {"adam-eps", "1e-8"},
      // Mixed precision.
      {"fp16", "train in fp16 with loss scaling", true},
      {"bf16", "train in bf16", true},
      {"accumulate-allreduce-grads-in-fp32", "accumulate and all-reduce gradients in fp32", true},
      {"loss-scale", "static loss scale (default: dynamic for fp16)"},
      {"initial-loss-scale", "initial dynamic loss scale (2^32)"},
      {"min-loss-scale", "minimum dynamic loss scale (1)"},
      {"loss-scale-window", "clean iterations before the dynamic scale doubles (1000)"},
      {"hysteresis", "overflows before the dynamic scale halves (2)"},
      // Run.
      {"seed", "random seed (1234)"},
      {"log-interval", "iterations between log lines"},
      {"log-memory-interval", "every N iterations (a multiple of --log-interval) each rank of data-parallel rank 0 "
                              "reports its allocator's memory, as Megatron's \"[Rank r] (after N iterations) memory "
                              "(MB)\" lines"},
      {"log-device-memory-used", "with --log-memory-interval: each line also gives the memory the whole device "
                                 "has in use (every process's; CUDA)", true},
      {"device", "auto, cpu or cuda"},
      {"tensor-model-parallel-size", "tensor-parallel ranks (1)"},
      {"pipeline-model-parallel-size", "pipeline stages (1)"},
      {"num-layers-per-virtual-pipeline-stage", "interleaved pipeline schedule: layers per model chunk, each stage "
                                                "running --num-layers / (stages x this) chunks"},
      {"num-virtual-stages-per-pipeline-rank", "interleaved pipeline schedule: model chunks per stage"},
      {"recompute-modules", "Megatron's modules of selective recomputation: core_attn, which the fused attention "
                            "recomputes always (other modules are refused)"},
      {"microbatch-group-size-per-virtual-pipeline-stage", "interleaved pipeline schedule: micro-batches a chunk "
                                                           "runs in a row; --pipeline-model-parallel-size, "
                                                           "Megatron's default (another value is refused)"},
      {"decoder-first-pipeline-num-layers", "transformer layers of the first pipeline stage (the other stages "
                                            "share the rest equally)"},
      {"decoder-last-pipeline-num-layers", "transformer layers of the last pipeline stage (the other stages "
                                           "share the rest equally)"},
      {"account-for-embedding-in-pipeline-split", "count the embedding as a layer of the first stage, which "
                                                  "holds one transformer layer fewer", true},
      {"account-for-loss-in-pipeline-split", "count the LM head and loss as a layer of the last stage, which "
                                             "holds one transformer layer fewer", true},
      {"pipeline-model-parallel-layout", "every stage's layers, Megatron-core's string: stages (and, beyond "
                                         "--pipeline-model-parallel-size of them, model chunks) between '|', E the "
                                         "embedding, t a transformer layer, L the loss, X*n and (...)*n repeat; "
                                         "e.g. \"Ett|(ttt|)*2,ttL\""},
      {"sequence-parallel", "with tensor parallelism: LayerNorms, dropouts and the residual stream on 1/tp of the "
                            "micro-batch's tokens each (all-gather and reduce-scatter instead of all-reduce)", true},
      {"zero-stage", "0: all-reduce gradients; 1: shard optimizer state over data parallel; 2: also shard gradients"},
      {"comm", "nccl or mpi (default: nccl with the CUDA backend when built with NCCL, else mpi)"},
      {"no-tf32", "fp32 GEMMs in plain fp32 instead of on TF32 tensor cores (CUDA)", true},
      {"disable-bf16-reduced-precision-matmul", "with --bf16: GEMMs that split K sum the parts in fp32, never in "
                                                "bf16 (CUDA; Megatron's)", true},
      {"recompute-granularity", "full: keep only each recomputed layer group's input and redo its forward in "
                                "backward; selective: what the fused attention already does"},
      {"recompute-method", "uniform: every layer, in groups of --recompute-num-layers; block: the first "
                           "--recompute-num-layers layers of each pipeline stage"},
      {"recompute-num-layers", "layers per group (uniform) or recomputed layers per stage (block); 1"},
      {"recompute-activations", "same as --recompute-granularity selective", true},
      {"checkpoint-activations", "Megatron-DeepSpeed's name for --recompute-granularity full --recompute-method "
                                 "uniform", true},
      {"checkpoint-num-layers", "Megatron-DeepSpeed's name for --recompute-num-layers"},
      // Evaluation, logging, health.
      {"eval-interval", "iterations between validation runs (1000)"},
      {"eval-iters", "validation iterations per run (100; 0: none)"},
      {"start-eval-at-iter", "validate every --eval-interval iterations only from this iteration on (the final "
                             "validation always; Megatron's)"},
      {"eval-micro-batch-size", "Megatron's micro batch of the evaluations: only --micro-batch-size's (trident "
                                "evaluates with the training's batches)"},
      {"eval-global-batch-size", "Megatron's global batch of the evaluations: only --global-batch-size's (trident "
                                 "evaluates with the training's batches)"},
      {"full-validation", "every validation reads the whole validation split once, in whole global batches "
                          "(Megatron's; --eval-iters then sizes the test only)", true},
      {"multiple-validation-sets", "each prefix of --valid-data-path (no weights) is a validation set of its own, "
                                   "evaluated and logged alone as validation-0, validation-1, ... (Megatron's; needs "
                                   "--full-validation or --skip-train)", true},
      {"tensorboard-dir", "write TensorBoard event files here"},
      {"tensorboard-log-interval", "iterations between TensorBoard scalars (1)"},
      {"tensorboard-queue-size", "TensorBoard scalars queued for the writer thread before adding one waits (1000)"},
      {"tensorboard-tags", "the scalars' names: megatron (Megatron-LM's: 'lm loss', 'lm loss vs samples') or "
                           "megatron-deepspeed (Megatron-DeepSpeed's: 'lm-loss-training/lm loss', ... ' vs tokens'); "
                           "megatron-deepspeed with --deepspeed, megatron otherwise"},
      {"peak-tflops", "device peak TFLOP/s for MFU (0: built-in table)"},
      {"max-nan-iterations", "stop after more than this many iterations in a row with a NaN/inf loss, or without "
                             "dynamic loss scaling a NaN/inf gradient norm (10)"},
      {"exit-interval", "stop (after saving with --save) when the iteration is a multiple of this"},
      {"log-progress", "append each run's start and each checkpoint's throughput and FLOPs to --save's "
                       "progress.txt (Megatron's)", true},
      {"check-weight-hash-across-dp-replicas-interval", "every this many iterations, stop the run unless every "
                                                        "data-parallel replica holds the same parameters, bit for bit "
                                                        "(Megatron's)"},
      {"skip-train", "no training: evaluate the loaded (or initial) model on the validation and test sets "
                     "(Megatron's)", true},
      {"kill-switch-path", "stop when this file exists: at the start without training, after an iteration saving "
                           "first with --save (BigScience's)"},
      {"deepspeed", "Megatron-DeepSpeed's switch: the --deepspeed_config file sets the precision, fp16 loss "
                    "scaling, gradient clipping and ZeRO stage, as DeepSpeed's engine does (its batch keys are "
                    "checked; the batch stays the flags')", true},
      {"deepspeed_config", "DeepSpeed's JSON config (read with --deepspeed)"},
      {"exit-duration-in-mins", "stop (after saving with --save) once the run has lasted this many minutes"},
      {"distributed-timeout-minutes", "end the job when a rank has waited this long in one collective or transfer "
                                      "(a peer stuck or gone; 10, Megatron's default; 0: never; not applied to "
                                      "dataset building and checkpoint I/O)"},
      {"exit-signal-handler", "accepted for Megatron's scripts: trident always finishes the iteration, saves (with "
                              "--save) and exits 0 on SIGTERM or SIGINT", true},
      {"exit-signal", "one more signal that stops the run as SIGTERM does: SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGXCPU, "
                      "SIGPWR (Megatron's flag; its handler then takes that signal instead of SIGTERM and only with "
                      "--exit-signal-handler, while trident's SIGTERM and SIGINT always stop the run)"},
      {"save-canonical", "at the end, write the parameters as canonical fp32 tensors to this safetensors file"},
      // Checkpoints.
      {"save", "directory to save checkpoints in"},
      {"load", "directory to load a checkpoint from (missing or empty: start from scratch)"},
      {"save-interval", "iterations between checkpoints (0: only at the end)"},
      {"keep-last", "checkpoints kept under --save (0: all)"},
      {"save-retain-interval", "Megatron's retention: after each save the previous checkpoint is deleted unless its "
                               "iteration is a multiple of this (a multiple of --save-interval)"},
      {"non-persistent-save-interval", "iterations between non-persistent checkpoints (Megatron's; with "
                                       "--non-persistent-ckpt-type): each replaces the previous one"},
      {"non-persistent-ckpt-type", "global: non-persistent checkpoints in one folder that every node shares; local: "
                                   "each rank's part in --non-persistent-local-ckpt-dir on its node; "
                                   "--load resumes from the newer of its last one and --load's"},
      {"non-persistent-global-ckpt-dir", "folder of the global non-persistent checkpoints (default: <--save or "
                                         "--load>/non_persistent)"},
      {"non-persistent-local-ckpt-dir", "folder on each node (e.g. its NVMe) of the local non-persistent "
                                        "checkpoints: each rank's in <it>/<world rank>"},
      {"non-persistent-local-ckpt-algo", "fully_parallel (default): the state the data-parallel ranks share is "
                                         "split among their local checkpoints and broadcast on load; atomic: each "
                                         "rank's holds all it needs"},
      {"replication", "keep each rank's local checkpoint on the other ranks of its clique too, for a rank whose "
                      "folder is lost (its node replaced) to get it back on resume", true},
      {"replication-jump", "with --replication: cliques of ranks this far apart (the ranks of a node)"},
      {"replication-factor", "with --replication: ranks a clique holds, each keeping every one's checkpoint (2)"},
      {"async-save", "write checkpoints in the background: training waits only for a copy of the state in host "
                     "memory (as large as the rank's checkpoint files), the checkpoint is committed at the first "
                     "iteration after every rank has written, and the run's end waits for it", true},
      {"no-load-optim", "do not load the optimizer state nor the learning-rate schedule (it restarts at step 0, "
                         "warm-up included; the iteration and consumed samples still load)", true},
      {"no-load-rng", "do not load the RNG state", true},
      {"load-main-params-from-ckpt", "with --no-load-optim: the fp32 master weights from the checkpoint's weights "
                                     "(Megatron's; trident's always are)", true},
      {"override-opt_param-scheduler", "on --load, train with the command line's learning-rate schedule (--lr, "
                                        "--min-lr, warm-up, decay, --lr-decay-style) where it differs from the "
                                        "checkpoint's (by default a difference is an error)", true},
      {"use-checkpoint-opt_param-scheduler", "on --load, train with the checkpoint's learning-rate schedule where "
                                              "it differs from the command line's", true},
      {"override-lr-scheduler", "Megatron-DeepSpeed's name for --override-opt_param-scheduler", true},
      {"use-checkpoint-lr-scheduler", "Megatron-DeepSpeed's name for --use-checkpoint-opt_param-scheduler", true},
      {"finetune", "load weights only and start at iteration 0", true},
      {"no-load-lr-state", "load the optimizer state but start the learning-rate and weight-decay schedule at "
                           "step 0 (Megatron-DeepSpeed's)", true},
      {"pretrained-checkpoint", "a checkpoint to fine-tune from (as with --finetune) while --load holds none "
                                "(Megatron's)"},
      {"no-save-optim", "save checkpoints without the optimizer state, learning-rate schedule and loss scale "
                        "(loading them needs --no-load-optim or --finetune)", true},
      {"no-save-rng", "save checkpoints without the RNG state (loading them needs --no-load-rng or --finetune)", true},
      {"ckpt-step", "load iteration N of --load instead of the one its latest_checkpointed_iteration.txt names"},
      {"exit-on-missing-checkpoint", "stop with an error when --load holds no checkpoint (default: train from "
                                     "scratch)", true},
      {"use-checkpoint-args", "take the model-shape flags not given (layers, hidden size, heads, sequence length, "
                              "positions, vocabulary size and padding) and the dropout from the --load checkpoint",
       true},
      {"use-mp-args-from-checkpoint-args", "with --use-checkpoint-args, also take the checkpoint's tensor and "
                                           "pipeline-parallel sizes and model chunks per stage, given or not "
                                           "(Megatron's)", true},
      // Data.
      {"data-path", "dataset prefix, weights and prefixes (0.3 A 0.7 B), or prefixes mixed by size (A B); "
                    "cut into train/valid/test by --split"},
      {"train-data-path", "training data read whole, in --data-path's forms (instead of --data-path and --split)"},
      {"valid-data-path", "validation data read whole, in --data-path's forms"},
      {"test-data-path", "test data read whole, in --data-path's forms"},
      {"vocab-file", "the tokenizer's vocabulary (gpt2-vocab.json, or a WordPiece vocab.txt; needed with data)"},
      {"merge-file", "GPT2BPETokenizer's merges (gpt2-merges.txt; needed with its data)"},
      {"tokenizer-type", "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, or NullTokenizer (data of "
                         "token ids: --vocab-size V ids, V the end of document)"},
      {"split", "train, valid, test weights (969, 30, 1)"},
      {"mid-level-dataset-surplus", "a weighted blend asks each dataset for ceil(ceil(n w) (1 + this)) samples "
                                    "(Megatron-core's; without it ceil(n w 1.005), Megatron's before it)"},
      {"data-args-path", "a file of --data-path's words (instead of --data-path: a blend too long for a command "
                         "line)"},
      {"per-split-data-args-path", "a JSON file {\"train\": ..., \"valid\": ..., \"test\": ...}, each "
                                   "--train-data-path's words as a string or a list (instead of the per-split paths)"},
      {"data-cache-path", "where dataset index maps are cached (default: beside the data)"},
      {"mock-data", "train on synthetic tokens (also the default without --data-path, with a note)", true},
      {"eod-mask-loss", "no loss on the token after each end-of-document token (<|endoftext|>); each "
                        "micro-batch's loss is the mean over the tokens it keeps, as Megatron's", true},
      {"reset-position-ids", "position ids restart at 0 after each end-of-document token (<|endoftext|>), "
                             "as Megatron's: every document of a sample is embedded from its own first position", true},
      {"reset-attention-mask", "tokens attend only to the tokens of their own document (the documents of a sample "
                               "end after each <|endoftext|>), as Megatron's", true},
      {"calculate-per-token-loss", "each global batch's loss is the mean over all the tokens it keeps "
                                   "(Megatron-core's), not the mean of its micro-batches' means: documents weigh "
                                   "by their tokens whatever micro-batch they fall in (with --eod-mask-loss)", true},
      {"log-batch-size-to-tensorboard", "also write the global batch size (batch-size scalars)", true},
      {"log-world-size-to-tensorboard", "also write the number of ranks (world-size scalars)", true},
      {"no-log-learnig-rate-to-tensorboard", "write no learning-rate scalars (Megatron's spelling)", true},
      {"no-log-loss-scale-to-tensorboard", "write no loss-scale scalars", true},
      {"log-memory-to-tensorboard", "also write rank 0's device memory: mem-reserved-bytes, mem-allocated-bytes, "
                                    "mem-max-allocated-bytes, mem-allocated-count", true},
      {"log-optimizer-states-to-tensorboard", "also write Megatron-DeepSpeed's statistics of the Adam moments and "
                                              "the fp32 weights over the whole model: optimizer/variance_l2, "
                                              "momentum_abs_max, weight_l1, ... (12 scalars, each also vs tokens)",
       true},
      {"log-params-norm", "the parameters' L2 norm in the log line and TensorBoard (params norm)", true},
      {"log-throughput", "also Megatron's throughput per GPU (TFLOP/s/GPU) field, after the iteration time, counted "
                         "by its current formula (the causal attention at half; trident's TFLOP/s per rank and MFU "
                         "count it whole), and with --log-timers-to-tensorboard its throughput scalar", true},
      {"log-energy", "the GPUs' energy (NVML's counter) in the log line, energy per GPU (J/iter/GPU) and power per "
                     "GPU (W/GPU), as iter-energy/gpu and power/gpu scalars, and the training's total at its end "
                     "(Megatron's; evaluations and saves not counted; a device without a counter: a note)", true},
      {"log-num-zeros-in-grad", "the gradient elements equal to zero in the log line and TensorBoard (num zeros)",
       true},
      {"timing-log-level", "Megatron's timers after each log line: 0 none, 1 forward-backward and optimizer, 2 also "
                           "compute, data and pipeline transfers (0)"},
      {"timing-log-option", "the timers over the ranks: minmax, max or all (minmax)"},
      {"log-timers-to-tensorboard", "write the timers (maximum over the ranks) as <name>-time scalars, and the "
                                    "iteration time", true},
      {"log-validation-ppl-to-tensorboard", "also write the validation perplexity (lm loss validation ppl)", true},
      {"profile", "start the device profiler's capture (CUDA: cudaProfilerStart, for nsys profile "
                  "--capture-range=cudaProfilerApi) after --profile-step-start iterations and stop it after "
                  "--profile-step-end, with NVTX ranges for the iterations and the timers' phases", true},
      {"profile-step-start", "--profile: iterations completed before the capture starts (10)"},
      {"profile-step-end", "--profile: iterations completed when it stops (12)"},
      {"profile-ranks", "--profile: the global ranks that capture (0)"},
      {"help", "print this help", true},
  };
  static const std::vector<FlagDef> all = [] {
    std::vector<FlagDef> v = defs;
    for (const FlagDef& d : flags_without_effect_defs()) v.push_back(d);
    for (const FlagDef& d : list_flags_without_effect_defs()) v.push_back(d);
    static std::deque<std::string> fixed_help;  // stable addresses for the FlagDefs' help
    for (const FixedSetting& s : fixed_setting_defs()) {
      fixed_help.push_back(s.value != nullptr ? std::string(s.value) + (s.also ? std::string(" or ") + s.also : "") +
                                                    " only: " + s.why
                                              : std::string("refused: ") + s.why);
      v.push_back({s.name, fixed_help.back().c_str(), s.is_bool});
    }
    return v;
  }();
  return all;
}

// Some flags are spelled with underscores (Megatron-LM's --override-opt_param-scheduler and
// --use-checkpoint-opt_param-scheduler, DeepSpeed's --deepspeed_config, torch's --local_rank);
// Megatron's newer releases also take them in dashes, and a YAML key's underscores become
// dashes. Every spelling maps to the one the flag list holds.
std::string megatron_spelling(const std::string& name) {
  const auto dashed = [](std::string s) {
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
  };
  // Megatron's and DeepSpeed's second names of a flag.
  static const std::map<std::string, std::string> kOtherNames = {
      {"persistent-save-interval", "save-interval"},  // Megatron-LM: one argument, two names
      {"encoder-num-layers", "num-layers"},           // validate_args copies one into the other
      {"encoder-seq-length", "seq-length"},
      {"kill-switch-file", "kill-switch-path"},       // Megatron-DeepSpeed's later name
      {"deepscale-config", "deepspeed_config"},       // DeepSpeed's own parser's
      // Megatron-LM's newest gives a switch that defaults to true a --disable- name too.
      {"disable-log-loss-scale-to-tensorboard", "no-log-loss-scale-to-tensorboard"},
      {"no-tp-comm-overlap-ag", "disable-tp-comm-overlap-ag"},
      {"no-tp-comm-overlap-rs", "disable-tp-comm-overlap-rs"},
      {"no-tp-comm-bulk-dgrad", "disable-tp-comm-bulk-dgrad"},
      {"no-tp-comm-bulk-wgrad", "disable-tp-comm-bulk-wgrad"},
      {"no-tp-comm-split-ag", "disable-tp-comm-split-ag"},
      {"no-tp-comm-split-rs", "disable-tp-comm-split-rs"},
  };
  if (const auto it = kOtherNames.find(dashed(name)); it != kOtherNames.end()) return it->second;
  const std::string wanted = dashed(name);
  for (const FlagDef& d : flag_defs())
    if (dashed(d.name) == wanted) return d.name;
  return name;
}

const FlagDef* find_flag(const std::string& name) {
  for (const FlagDef& d : flag_defs())
    if (name == d.name) return &d;
  return nullptr;
}

// Flags that choose one thing in different ways (Megatron's mutually exclusive pairs, and
// the recomputation aliases). When the command line gives any flag of a group, the config
// file's values for every flag of that group are dropped: the command line wins over the
// file as a whole choice, instead of the two mixing into a contradiction. Contradictions
// within one source are still errors (read_schedule_flags and friends).
const std::vector<std::vector<std::string>>& alternative_groups() {
  static const std::vector<std::vector<std::string>> groups = {
      {"train-iters", "train-samples"},
      {"lr-warmup-iters", "lr-warmup-samples", "lr-warmup-fraction", "lr-warmup-tokens"},
      {"lr-decay-iters", "lr-decay-samples"},
      {"lr-wsd-decay-iters", "lr-wsd-decay-samples"},
      {"fp16", "bf16"},
      {"zero-stage", "use-distributed-optimizer"},
      {"overlap-grad-reduce", "no-overlap-grad-reduce"},
      {"recompute-granularity", "recompute-activations", "checkpoint-activations"},
      {"recompute-num-layers", "checkpoint-num-layers"},
      {"override-opt_param-scheduler", "override-lr-scheduler", "use-checkpoint-opt_param-scheduler",
       "use-checkpoint-lr-scheduler"},
      // --data-path against each per-split path (the per-split paths go together).
      {"data-path", "train-data-path"},
      {"data-path", "valid-data-path"},
      {"data-path", "test-data-path"},
      // The files of words against the words they stand for.
      {"data-args-path", "data-path"},
      {"data-args-path", "train-data-path"},
      {"data-args-path", "valid-data-path"},
      {"data-args-path", "test-data-path"},
      {"per-split-data-args-path", "data-path"},
      {"per-split-data-args-path", "train-data-path"},
      {"per-split-data-args-path", "valid-data-path"},
      {"per-split-data-args-path", "test-data-path"},
      {"data-args-path", "per-split-data-args-path"},
      // --mock-data against each real source.
      {"mock-data", "data-args-path"},
      {"mock-data", "per-split-data-args-path"},
      {"mock-data", "data-path"},
      {"mock-data", "train-data-path"},
      {"mock-data", "valid-data-path"},
      {"mock-data", "test-data-path"},
  };
  return groups;
}

// Whether the command line's flags override the config file's value of `flag`: the same
// flag, or another flag of one of its alternative groups.
bool overridden_by_command_line(const std::string& flag, const std::set<std::string>& cli_flags) {
  if (cli_flags.count(flag)) return true;
  for (const std::vector<std::string>& group : alternative_groups()) {
    if (std::find(group.begin(), group.end(), flag) == group.end()) continue;
    for (const std::string& other : group)
      if (cli_flags.count(other)) return true;
  }
  return false;
}

std::string yaml_scalar_to_string(const YAML::Node& n) { return n.as<std::string>(); }

// The flags that take a list of words (Megatron's nargs='*'): on the command line every word
// up to the next flag, in the config file a list, a plain string of words split at
// whitespace (data-path: 0.3 A 0.7 B, as the shell splits a launcher's $DATA_PATH), or a
// quoted string, one word.
std::vector<std::string>* word_list(TrainOptions& o, const std::string& flag) {
  if (flag == "data-path") return &o.data_path;
  if (flag == "train-data-path") return &o.train_data_path;
  if (flag == "valid-data-path") return &o.valid_data_path;
  if (flag == "test-data-path") return &o.test_data_path;
  if (flag == "rampup-batch-size") return &o.rampup_batch_size;
  if (flag == "step-batch-size-schedule") return &o.step_batch_size_schedule;
  if (flag == "iterations-to-skip") return &o.iterations_to_skip_words;
  if (flag == "profile-ranks") return &o.profile_ranks;
  if (flag == "recompute-modules") return &o.recompute_modules;
  if (is_list_flag_without_effect(flag)) return &o.words_without_effect[flag];
  return nullptr;
}

bool is_word_list(const std::string& flag) {
  TrainOptions probe;
  return word_list(probe, flag) != nullptr;
}

// One key of the --config file.
struct ConfigValue {
  std::string flag;                // the key with '_' written as '-'
  std::vector<std::string> args;   // "--flag=value", "--flag" for true, nothing for false
  std::vector<std::string> words;  // the words of a word-list flag (is_word_list)
  std::string where;               // "file:line"
};

ConfigValue yaml_value(const std::string& flag, const FlagDef& def, const YAML::Node& value, const std::string& where) {
  ConfigValue v{flag, {}, {}, where};
  // A list or mapping where one value belongs (split: [98, 2]) is one line naming the key.
  auto scalar = [&](const YAML::Node& n) {
    if (!n.IsScalar())
      throw ConfigError("--config: " + where + ": key '" + flag + "' expects a single value" +
                        (is_word_list(flag) ? " or a list of words" : "") + ", not a " +
                        (n.IsSequence() ? "list" : n.IsMap() ? "mapping" : "null value"));
    return yaml_scalar_to_string(n);
  };
  if (is_list_flag_without_effect(flag) && value.IsNull()) {
    // no words: the flag is noted all the same
  } else if (is_word_list(flag)) {
    if (value.IsSequence()) {
      for (const auto& item : value) v.words.push_back(scalar(item));
    } else if (value.Tag() == "!") {  // quoted: one word, spaces and all (a path with a space)
      v.words.push_back(scalar(value));
    } else {
      std::istringstream words(scalar(value));
      for (std::string w; words >> w;) v.words.push_back(w);
    }
    // As on the command line, where the flag without words is an error ("" or [] would
    // otherwise leave the run on synthetic tokens).
    if (v.words.empty() && !is_list_flag_without_effect(flag))
      throw ConfigError("--config: " + where + ": key '" + flag + "' has no words");
  } else if (def.is_bool) {
    bool on = false;
    try {
      on = value.as<bool>();
    } catch (const YAML::Exception&) {
      throw ConfigError("--config: " + where + ": key '" + flag + "' expects true or false");
    }
    if (on) v.args.push_back("--" + flag);
  } else {
    v.args.push_back("--" + flag + "=" + scalar(value));
  }
  return v;
}

// The keys of the YAML file in file order. A key given twice (also as num_layers and
// num-layers) is an error naming both lines, rather than a silent last-one-wins.
std::vector<ConfigValue> read_config_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw ConfigError("--config: file not found: " + path);
  if (std::filesystem::is_directory(path)) throw ConfigError("--config: " + path + " is a directory");
  YAML::Node root;
  try {
    // All of the file's documents: a second one ("---") would otherwise be ignored silently.
    const std::vector<YAML::Node> documents = YAML::LoadAllFromFile(path);
    if (documents.size() > 1)
      throw ConfigError("--config: " + path + ":" + std::to_string(documents[1].Mark().line + 1) +
                        ": a second YAML document; put every key in one mapping");
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::Exception& e) {
    throw ConfigError("--config: " + path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) throw ConfigError("--config: " + path + ": expected a mapping of flag: value");
  std::vector<ConfigValue> values;
  std::map<std::string, int> first_line;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      throw ConfigError("--config: " + path + ":" + std::to_string(kv.first.Mark().line + 1) +
                        ": a key must be a flag's name");
    std::string key = kv.first.as<std::string>();
    for (char& c : key)
      if (c == '_') c = '-';
    key = megatron_spelling(key);
    const int line = kv.first.Mark().line + 1;
    const std::string where = path + ":" + std::to_string(line);
    const FlagDef* def = find_flag(key);
    if (!def || key == "config" || key == "help")
      throw ConfigError("--config: " + where + ": unknown key '" + key + "'");
    if (const auto [it, fresh] = first_line.emplace(key, line); !fresh)
      throw ConfigError("--config: " + where + ": duplicate key '" + key + "' (first set at line " +
                        std::to_string(it->second) + ")");
    values.push_back(yaml_value(key, *def, kv.second, where));
  }
  return values;
}

// Python's int() and float(), which Megatron's argparse uses, take underscores between
// digits (--train-samples 300_000_000 in the BigScience scripts); anything else stays.
std::string without_digit_underscores(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool between_digits = text[i] == '_' && i > 0 && i + 1 < text.size() &&
                                std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!between_digits) out += text[i];
  }
  return out;
}

template <typename T>
T convert(const std::string& flag, const std::string& raw) {
  const std::string text = without_digit_underscores(strip_surrounding_space(raw));
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, int>) v = std::stoi(text, &used);
    else if constexpr (std::is_same_v<T, int64_t>) v = std::stoll(text, &used);
    else if constexpr (std::is_same_v<T, uint64_t>) {
      if (text.find('-') != std::string::npos) throw std::invalid_argument("negative");
      v = std::stoull(text, &used);
    } else {  // Python's float(): decimal only (core/decimal.h)
      const std::optional<double> d = parse_decimal(text);
      if (!d) throw std::invalid_argument("not a decimal number");
      v = static_cast<T>(*d);
      used = text.size();
    }
    if (used != text.size()) throw std::invalid_argument("trailing characters");
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(v)) throw std::invalid_argument("not finite");
    return v;
  } catch (const std::out_of_range&) {  // an integer that parses, past the type's range
    throw ConfigError("--" + flag + ": '" + raw + "' is out of range (" + std::to_string(std::numeric_limits<T>::min()) +
                      " to " + std::to_string(std::numeric_limits<T>::max()) + ")");
  } catch (const std::exception&) {
    if constexpr (std::is_same_v<T, uint64_t>)
      throw ConfigError("--" + flag + ": cannot parse '" + raw + "' as a non-negative integer");
    throw ConfigError("--" + flag + ": cannot parse '" + raw + "' as a number");
  }
}

// The arguments cxxopts parses (the config file's first, so that the command line wins)
// and where the config file set the values that were kept.
struct GatheredArgs {
  std::vector<std::string> args;
  std::map<std::string, std::string> from_config;  // flag -> "file:line"
};

// The flag names a command line gives ("--lr=1" and "--lr 1" both give "lr").
std::set<std::string> flag_names(const std::vector<std::string>& args) {
  std::set<std::string> names;
  for (const std::string& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    names.insert(a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2));
  }
  return names;
}

// Megatron and DeepSpeed refuse a flag given under both of its names (validate_args: "cannot
// have both num-layers and encoder-num-layers specified"), except --save-interval's argparse
// alias --persistent-save-interval, where the last one wins as in argparse.
void check_one_name(std::map<std::string, std::string>& typed_names, const std::string& typed,
                    const std::string& flag) {
  if (flag == "save-interval") return;
  const auto dashed = [](std::string n) {
    std::replace(n.begin(), n.end(), '_', '-');
    return n;
  };
  const auto [it, fresh] = typed_names.emplace(flag, typed);  // the first name as typed
  if (!fresh && dashed(it->second) != dashed(typed))
    throw ConfigError("--" + it->second + " and --" + typed + " are one setting under two names: give one");
}

// Records --config's file: one file, so a second --config is an error naming both files
// rather than a silent last-one-wins (a file's own keys and the command line already layer).
void take_config_path(std::optional<std::string>& config_path, const std::string& path) {
  if (config_path)
    throw ConfigError("--config given twice (" + *config_path + " and " + path + "): give one file");
  config_path = path;
}

// The command line with the word lists (--data-path ...) and --config's file pulled out; the
// config file's values are dropped where the command line overrides them
// (overridden_by_command_line).
GatheredArgs gather_args(int argc, const char* const* argv, TrainOptions& o) {
  std::map<std::string, std::string> typed_names;  // a flag -> the name it was typed under
  std::vector<std::string> rest;
  std::map<std::string, std::vector<std::string>> cli_words;  // word-list flag -> its words
  std::optional<std::string> config_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {  // a value
      rest.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string typed = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string name = megatron_spelling(typed);
    check_one_name(typed_names, typed, name);
    const std::optional<std::string> value =
        eq == std::string::npos ? std::nullopt : std::optional<std::string>(a.substr(eq + 1));
    if (is_word_list(name)) {
      if (cli_words.count(name)) throw ConfigError("--" + name + " given twice: give its words once");
      std::vector<std::string>& words = cli_words[name];
      if (value) words.push_back(*value);
      else
        while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) words.push_back(argv[++i]);
      if (words.empty() && !is_list_flag_without_effect(name))
        throw ConfigError("--" + name + (name == "profile-ranks"       ? ": expected one or more global ranks"
                                         : name == "rampup-batch-size" ? ": expected START INCR SAMPLES"
                                         : name == "step-batch-size-schedule" ? ": expected THRESHOLD:BATCH ..."
                                         : name == "iterations-to-skip" ? ": expected one or more iterations"
                                         : name == "recompute-modules" ? ": expected one or more modules (core_attn)"
                                                                       : ": expected a prefix"));
    } else if (name == "config") {
      if (!value) check_separate_value("--config", i + 1 < argc ? argv[i + 1] : nullptr);
      take_config_path(config_path, value ? *value : argv[++i]);
    } else {  // Megatron-LM's other spellings of a flag become the flag list's
      rest.push_back("--" + name + (value ? "=" + *value : ""));
    }
  }
  std::set<std::string> cli_flags = flag_names(rest);
  for (const auto& [flag, words] : cli_words) cli_flags.insert(flag);
  GatheredArgs g;
  g.args = {"trident-train"};
  if (config_path) {
    for (ConfigValue& v : read_config_file(*config_path)) {
      if (overridden_by_command_line(v.flag, cli_flags)) continue;
      g.args.insert(g.args.end(), v.args.begin(), v.args.end());
      if (auto* words = word_list(o, v.flag)) *words = std::move(v.words);
      g.from_config[v.flag] = v.where;
    }
  }
  for (auto& [flag, words] : cli_words) *word_list(o, flag) = std::move(words);
  g.args.insert(g.args.end(), rest.begin(), rest.end());
  return g;
}

// An error message with the config file's line of each flag it names whose value came
// from the file: "--lr: cannot parse '1e-3x' as a number (from gpt2.yaml:10)", and for a
// flag other than the message's first, "(--micro-batch-size from gpt2.yaml:8)".
std::string with_config_origins(const std::string& msg, const std::map<std::string, std::string>& from_config) {
  std::vector<std::string> named;
  for (size_t at = msg.find("--"); at != std::string::npos; at = msg.find("--", at + 2)) {
    size_t end = at + 2;
    while (end < msg.size() && (std::islower(static_cast<unsigned char>(msg[end])) ||
                                std::isdigit(static_cast<unsigned char>(msg[end])) || msg[end] == '-' ||
                                msg[end] == '_'))
      ++end;
    const std::string flag = msg.substr(at + 2, end - at - 2);
    if (find_flag(flag) && std::find(named.begin(), named.end(), flag) == named.end()) named.push_back(flag);
  }
  std::string origins;
  for (const std::string& flag : named) {
    const auto it = from_config.find(flag);
    if (it == from_config.end()) continue;
    origins += origins.empty() ? "" : ", ";
    origins += (flag == named.front() ? "from " : "--" + flag + " from ") + it->second;
  }
  return origins.empty() ? msg : msg + " (" + origins + ")";
}

// Typed access to the parsed flags; every conversion error names the flag.
class Flags {
 public:
  explicit Flags(cxxopts::ParseResult r) : r_(std::move(r)) {}
  bool has(const char* f) const { return r_.count(f) > 0; }
  std::string str(const char* f) const { return r_[f].as<std::string>(); }
  template <typename T>
  void get(const char* f, T& dst) const {
    if (!has(f)) return;
    if constexpr (std::is_same_v<T, std::string>) dst = str(f);
    else if constexpr (std::is_same_v<T, bool>) dst = true;
    else dst = convert<T>(f, str(f));
  }

 private:
  cxxopts::ParseResult r_;
};

constexpr float kMegatronDefaultDropout = 0.1f;

void read_model_flags(const Flags& f, ModelConfig& m) {
  f.get("num-layers", m.num_layers);
  f.get("hidden-size", m.hidden_size);
  f.get("num-attention-heads", m.num_attention_heads);
  f.get("seq-length", m.seq_length);
  m.max_position_embeddings = m.seq_length;
  f.get("max-position-embeddings", m.max_position_embeddings);
  f.get("vocab-size", m.vocab_size);
  f.get("make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  f.get("init-method-std", m.init_method_std);
  if (f.has("embedding-init-method-std")) {
    f.get("embedding-init-method-std", m.embedding_init_method_std);
    if (!(m.embedding_init_method_std > 0)) throw ConfigError("--embedding-init-method-std: expected a positive std");
  }
  // Megatron-LM's (and GPT-2's) dropout unless the flags say otherwise: a Megatron script
  // that passes neither trains with 0.1, and so does trident.
  m.hidden_dropout = m.attention_dropout = kMegatronDefaultDropout;
  f.get("hidden-dropout", m.hidden_dropout);
  f.get("attention-dropout", m.attention_dropout);
}

// Megatron-DeepSpeed's token counts. `sample_warmup`: the warm-up flag in iterations or
// samples given non-zero (nullptr: none).
void read_token_flags(const Flags& f, TrainOptions& o, const char* sample_warmup) {
  const auto read = [&](const char* flag, std::optional<uint64_t>& dst) {
    if (!f.has(flag)) return;
    uint64_t v = 0;
    f.get(flag, v);
    dst = v;
  };
  read("lr-warmup-tokens", o.lr_warmup_tokens);
  read("lr-decay-tokens", o.lr_decay_tokens);
  read("train-tokens", o.train_tokens);
  if (o.lr_decay_tokens == 0u) throw ConfigError("--lr-decay-tokens must be positive");
  if (o.train_tokens == 0u) throw ConfigError("--train-tokens must be positive");
  for (const char* flag : {"lr-warmup-tokens", "lr-decay-tokens"})
    if (f.has(flag) && o.lr_decay_style == "WSD")
      throw ConfigError(std::string("--") + flag +
                        ": --lr-decay-style WSD counts in iterations or samples (Megatron-DeepSpeed's token "
                        "counts go with constant, linear, cosine and inverse-square-root)");
  if (o.lr_warmup_tokens) {
    if (sample_warmup) throw ConfigError(std::string("--lr-warmup-tokens and --") + sample_warmup + " are mutually exclusive");
    if (f.has("lr-warmup-fraction")) throw ConfigError("--lr-warmup-tokens and --lr-warmup-fraction are mutually exclusive");
    if (o.lr_decay_tokens && o.lr_decay_style != "constant" && *o.lr_warmup_tokens >= *o.lr_decay_tokens)
      throw ConfigError("--lr-decay-tokens (" + std::to_string(*o.lr_decay_tokens) + ") must exceed --lr-warmup-tokens (" +
                        std::to_string(*o.lr_warmup_tokens) + ")");
  }
  // As Megatron-DeepSpeed, --train-tokens is a second bound: the run's length in iterations or
  // samples (which also sizes the data) is still needed.
  if (o.train_tokens && !f.has("train-iters") && !f.has("train-samples"))
    throw ConfigError("--train-tokens needs --train-iters or --train-samples (the run ends at whichever comes first)");
}

// Megatron's rule: iteration-based and sample-based flags never mix.
void read_schedule_flags(const Flags& f, TrainOptions& o) {
  f.get("micro-batch-size", o.micro_batch_size);
  f.get("global-batch-size", o.global_batch_size);
  f.get("train-iters", o.train_iters);
  o.train_iters_is_default = !f.has("train-iters");
  f.get("lr", o.lr);
  f.get("min-lr", o.min_lr);
  f.get("lr-decay-style", o.lr_decay_style);
  f.get("lr-warmup-iters", o.lr_warmup_iters);
  f.get("lr-decay-iters", o.lr_decay_iters);
  f.get("lr-wsd-decay-style", o.lr_wsd_decay_style);
  f.get("lr-wsd-decay-iters", o.lr_wsd_decay_iters);
  // As in Megatron, WSD's flags with another style do nothing: said in the note of such flags.
  if (o.lr_decay_style != "WSD")
    for (const char* flag : {"lr-wsd-decay-iters", "lr-wsd-decay-samples", "lr-wsd-decay-style"})
      if (f.has(flag)) o.flags_without_effect.push_back(std::string("--") + flag + " (without --lr-decay-style WSD)");
  f.get("lr-warmup-fraction", o.lr_warmup_fraction);
  if (f.has("lr-warmup-fraction") && !(o.lr_warmup_fraction >= 0 && o.lr_warmup_fraction <= 1))
    throw ConfigError("--lr-warmup-fraction must be in [0, 1]");
  // Megatron asserts the other form's warm-up == 0: an explicit 0 is no conflict.
  const auto given_nonzero = [&](const char* flag) {
    double v = 0;
    f.get(flag, v);
    return f.has(flag) && v != 0;
  };
  if (f.has("train-samples")) {
    if (f.has("train-iters")) throw ConfigError("--train-samples and --train-iters are mutually exclusive");
    if (given_nonzero("lr-warmup-iters"))
      throw ConfigError("--lr-warmup-iters is iteration-based; with --train-samples use --lr-warmup-samples");
    if (f.has("lr-decay-iters"))
      throw ConfigError("--lr-decay-iters is iteration-based; with --train-samples use --lr-decay-samples");
    if (f.has("lr-wsd-decay-iters"))
      throw ConfigError("--lr-wsd-decay-iters is iteration-based; with --train-samples use --lr-wsd-decay-samples");
    o.sample_based = true;
    f.get("train-samples", o.train_samples);
    f.get("lr-warmup-samples", o.lr_warmup_samples);
    f.get("lr-decay-samples", o.lr_decay_samples);
    f.get("lr-wsd-decay-samples", o.lr_wsd_decay_samples);
  } else {
    const char* sample_based = given_nonzero("lr-warmup-samples") ? "lr-warmup-samples"
                               : f.has("lr-decay-samples")         ? "lr-decay-samples"
                               : f.has("lr-wsd-decay-samples")     ? "lr-wsd-decay-samples"
                                                                   : nullptr;
    if (sample_based)
      throw ConfigError(std::string("--") + sample_based + " needs sample-based training (--train-samples)");
  }
  const char* warmup = given_nonzero("lr-warmup-iters")     ? "lr-warmup-iters"
                       : given_nonzero("lr-warmup-samples") ? "lr-warmup-samples"
                                                            : nullptr;
  if (f.has("lr-warmup-fraction") && warmup)
    throw ConfigError(std::string("--lr-warmup-fraction and --") + warmup + " are mutually exclusive");
  read_token_flags(f, o, warmup);
}

void read_optimizer_flags(const Flags& f, TrainOptions& o) {
  f.get("weight-decay", o.weight_decay);
  f.get("start-weight-decay", o.start_weight_decay);
  f.get("end-weight-decay", o.end_weight_decay);
  f.get("weight-decay-incr-style", o.weight_decay_incr_style);
  for (const auto& [flag, value] : {std::pair{"start-weight-decay", o.start_weight_decay},
                                    std::pair{"end-weight-decay", o.end_weight_decay}})
    if (f.has(flag) && value < 0) throw ConfigError(std::string("--") + flag + " must not be negative");
  f.get("lr-warmup-init", o.lr_warmup_init);
  f.get("clip-grad", o.clip_grad);
  f.get("adam-beta1", o.adam_beta1);
  f.get("adam-beta2", o.adam_beta2);
  f.get("adam-eps", o.adam_eps);
}

void read_precision_flags(const Flags& f, TrainOptions& o) {
  if (f.has("fp16") && f.has("bf16")) throw ConfigError("--fp16 and --bf16 are mutually exclusive");
  o.model.dtype = f.has("fp16") ? DType::F16 : f.has("bf16") ? DType::BF16 : DType::F32;
  f.get("accumulate-allreduce-grads-in-fp32", o.accumulate_allreduce_grads_in_fp32);
  // Megatron-LM's validate_args: bf16 accumulates and all-reduces the gradients in fp32, flag
  // or not (bf16 keeps 8 mantissa bits: summed over micro-batches and ranks in bf16, the small
  // contributions would be lost).
  if (o.model.dtype == DType::BF16) o.accumulate_allreduce_grads_in_fp32 = true;
  f.get("loss-scale", o.loss_scale);
  f.get("initial-loss-scale", o.initial_loss_scale);
  f.get("min-loss-scale", o.min_loss_scale);
  f.get("loss-scale-window", o.loss_scale_window);
  f.get("hysteresis", o.hysteresis);
  if (f.has("loss-scale") && o.model.dtype == DType::F32 && !f.has("deepspeed"))  // there: the file's precision
    throw ConfigError("--loss-scale needs --fp16 or --bf16");
}

// --data-args-path and --per-split-data-args-path (Megatron-core's): their words become
// --data-path's, or the per-split paths', and errors name the file.
void read_data_args_files(const Flags& f, TrainOptions& o) {
  if (f.has("data-args-path")) {
    if (!o.data_path.empty() || !o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty())
      throw ConfigError("--data-args-path stands for --data-path's words: give one of them (and not the per-split "
                        "paths with it)");
    const std::string path = f.str("data-args-path");
    o.data_path = read_data_args_file(path);
    o.data_path_flag = "--data-args-path " + path;
  }
  if (f.has("per-split-data-args-path")) {
    if (f.has("data-args-path") || !o.data_path.empty() || !o.train_data_path.empty() || !o.valid_data_path.empty() ||
        !o.test_data_path.empty())
      throw ConfigError("--per-split-data-args-path stands for --train-data-path, --valid-data-path and "
                        "--test-data-path: give it alone");
    const std::string path = f.str("per-split-data-args-path");
    const auto words = read_per_split_data_args_file(path);
    if (words[0].empty() && words[1].empty() && words[2].empty())  // (not synthetic tokens: data was asked for)
      throw ConfigError("--per-split-data-args-path " + path + ": no dataset in \"train\", \"valid\" or \"test\"");
    std::vector<std::string>* splits[3] = {&o.train_data_path, &o.valid_data_path, &o.test_data_path};
    const char* names[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; ++s) {
      *splits[s] = words[s];
      o.split_data_path_flags[s] = "--per-split-data-args-path " + path + " (" + names[s] + ")";
    }
  }
}

// Megatron-DeepSpeed's --deepspeed --deepspeed_config FILE: DeepSpeed's engine takes the
// precision, the fp16 loss scaler, the clipping and the ZeRO stage from the file, over
// Megatron's flags for them. Here a flag that is given must agree with the file (one line
// naming both otherwise); the file fills the rest. The batch stays Megatron's
// (resolve_global_batch_size runs DeepSpeed's check of the file's batch keys). Call after the
// batch and precision flags are read, before read_run_flags.
void apply_deepspeed_config(const Flags& f, TrainOptions& o) {
  if (!f.has("deepspeed")) {
    // Megatron-DeepSpeed reads the file only with --deepspeed.
    if (f.has("deepspeed_config")) o.flags_without_effect.push_back("--deepspeed_config (without --deepspeed)");
    return;
  }
  if (!f.has("deepspeed_config")) throw ConfigError("--deepspeed needs --deepspeed_config FILE (DeepSpeed's JSON config)");
  o.deepspeed_config = f.str("deepspeed_config");
  const DeepSpeedConfig c = read_deepspeed_config(o.deepspeed_config);
  const std::string file = "--deepspeed_config " + o.deepspeed_config;
  // A flag given with another value than the file's key.
  const auto agree = [&](const char* flag, const std::string& key, auto given, auto in_file) {
    if (f.has(flag) && given != in_file)
      throw ConfigError("--" + std::string(flag) + " " + detail::concat(given) + " differs from " + file + "'s \"" +
                        key + "\": " + detail::concat(in_file));
  };
  o.deepspeed_batch = c.batch;
  if (c.batch.train_micro_batch_size_per_gpu && !f.has("micro-batch-size"))
    o.micro_batch_size = static_cast<int>(*c.batch.train_micro_batch_size_per_gpu);
  // The engine casts the model to its precision: a precision flag must name the same one.
  const DType dtype = c.fp16 ? DType::F16 : c.bf16 ? DType::BF16 : DType::F32;
  for (const auto& [flag, flag_dtype] : {std::pair{"fp16", DType::F16}, std::pair{"bf16", DType::BF16}})
    if (f.has(flag) && dtype != flag_dtype)
      throw ConfigError("--" + std::string(flag) + " needs " + file + "'s \"" + flag + "\": {\"enabled\": true}" +
                        (dtype == DType::F32 ? "" : std::string(" (it enables ") + (c.fp16 ? "fp16" : "bf16") + ")"));
  if (f.has("loss-scale") && dtype != DType::F16)
    throw ConfigError("--loss-scale needs " + file + "'s \"fp16\": {\"enabled\": true} (DeepSpeed scales only fp16 "
                      "losses)");
  o.model.dtype = dtype;
  if (dtype == DType::BF16) o.accumulate_allreduce_grads_in_fp32 = true;  // as read_precision_flags
  const int64_t stage = c.zero_stage.value_or(0);  // DeepSpeed's, whatever --zero-stage says
  if (dtype == DType::F16) {
    agree("loss-scale", "fp16.loss_scale", o.loss_scale, c.loss_scale);
    o.loss_scale = c.loss_scale;
    if (c.loss_scale == 0) {  // dynamic: at stages 1 and 2 DeepSpeed's scaler follows Megatron's rules
      const double initial = std::ldexp(1.0, static_cast<int>(c.initial_scale_power));
      agree("initial-loss-scale", "fp16.initial_scale_power", o.initial_loss_scale, initial);
      agree("loss-scale-window", "fp16.loss_scale_window", o.loss_scale_window, c.loss_scale_window);
      agree("min-loss-scale", "fp16.min_loss_scale", o.min_loss_scale, c.min_loss_scale);
      o.initial_loss_scale = initial;
      o.loss_scale_window = c.loss_scale_window;
      o.min_loss_scale = c.min_loss_scale;
      // At stage 0 the engine's FP16_Optimizer scales by its own rules, with no hysteresis.
      o.deepspeed_fp16_optimizer = stage == 0;
      if (stage == 0 && f.has("hysteresis"))
        o.flags_without_effect.push_back("--hysteresis (DeepSpeed's FP16_Optimizer, at ZeRO stage 0, has none)");
      if (stage != 0) {
        agree("hysteresis", "fp16.hysteresis", o.hysteresis, c.hysteresis);
        o.hysteresis = c.hysteresis;
      }
    }
  }
  // DeepSpeed clips by the file's value, 0 (none) when it has none, whatever --clip-grad says.
  const float clip = static_cast<float>(c.gradient_clipping.value_or(0.0));  // compared as trident keeps it
  if (c.gradient_clipping)
    agree("clip-grad", "gradient_clipping", o.clip_grad, clip);
  else if (f.has("clip-grad"))
    o.flags_without_effect.push_back("--clip-grad (" + file + " has no \"gradient_clipping\": DeepSpeed's default 0, "
                                     "no clipping)");
  o.clip_grad = clip;
  if (f.has("use-distributed-optimizer"))
    throw ConfigError("--use-distributed-optimizer is Megatron's optimizer sharding; with --deepspeed, " + file +
                      "'s \"zero_optimization\" shards");
  int given_stage = o.zero_stage;  // read_run_flags reads it next
  f.get("zero-stage", given_stage);
  if (c.zero_stage)
    agree("zero-stage", "zero_optimization.stage", int64_t{given_stage}, stage);
  else if (f.has("zero-stage") && given_stage != 0)  // Megatron-DeepSpeed only records the flag
    o.flags_without_effect.push_back("--zero-stage (" + file + " has no \"zero_optimization\": DeepSpeed's stage 0)");
  o.zero_stage = static_cast<int>(stage);
  if (!c.without_effect.empty()) {
    std::string keys;
    for (const std::string& k : c.without_effect) keys += (keys.empty() ? "" : ", ") + k;
    o.flags_without_effect.push_back(file + "'s " + keys);
  }
}

void read_run_flags(const Flags& f, TrainOptions& o) {
  f.get("seed", o.seed);
  f.get("log-interval", o.log_interval);
  f.get("log-memory-interval", o.log_memory_interval);
  f.get("log-device-memory-used", o.log_device_memory_used);
  f.get("device", o.device);
  f.get("tensor-model-parallel-size", o.tensor_model_parallel_size);
  f.get("pipeline-model-parallel-size", o.pipeline_model_parallel_size);
  f.get("num-layers-per-virtual-pipeline-stage", o.num_layers_per_virtual_pipeline_stage);
  f.get("num-virtual-stages-per-pipeline-rank", o.num_virtual_stages_per_pipeline_rank);
  f.get("microbatch-group-size-per-virtual-pipeline-stage", o.microbatch_group_size);
  if (f.has("microbatch-group-size-per-virtual-pipeline-stage")) {
    if (o.microbatch_group_size < 1)
      throw ConfigError("--microbatch-group-size-per-virtual-pipeline-stage must be positive");
    o.flags_without_effect.push_back("--microbatch-group-size-per-virtual-pipeline-stage");  // refused unless pp's
  }
  for (const auto& [flag, count] : {std::pair{"decoder-first-pipeline-num-layers", &o.uneven_pipeline.first_stage_layers},
                                    std::pair{"decoder-last-pipeline-num-layers", &o.uneven_pipeline.last_stage_layers}}) {
    f.get(flag, *count);
    if (f.has(flag) && *count < 1) throw ConfigError(std::string("--") + flag + " must be positive");
  }
  f.get("account-for-embedding-in-pipeline-split", o.uneven_pipeline.embedding_as_layer);
  f.get("account-for-loss-in-pipeline-split", o.uneven_pipeline.loss_as_layer);
  f.get("pipeline-model-parallel-layout", o.uneven_pipeline.layout);
  if (f.has("pipeline-model-parallel-layout") && o.uneven_pipeline.layout.empty())
    throw ConfigError("--pipeline-model-parallel-layout is empty");
  f.get("sequence-parallel", o.sequence_parallel);
  if (o.deepspeed_config.empty()) f.get("zero-stage", o.zero_stage);  // else the --deepspeed_config file's
  // Megatron's distributed optimizer shards the optimizer state and the fp32 master weights
  // over data parallel and reduce-scatters the gradients: ZeRO stage 1.
  if (f.has("use-distributed-optimizer")) {
    if (!f.has("zero-stage")) o.zero_stage = 1;
    else if (o.zero_stage == 0)
      throw ConfigError("--use-distributed-optimizer shards the optimizer state: --zero-stage 0 contradicts it");
  }
  if (f.has("overlap-grad-reduce") && f.has("no-overlap-grad-reduce"))
    throw ConfigError("--overlap-grad-reduce and --no-overlap-grad-reduce contradict each other");
  if (f.has("no-overlap-grad-reduce")) o.overlap_grad_reduce = false;
  f.get("overlap-param-gather", o.overlap_param_gather);
  if (o.overlap_param_gather && o.zero_stage == 0)
    throw ConfigError("--overlap-param-gather overlaps the gather of the parameters that ZeRO updates in shards: it "
                      "needs " + std::string(o.deepspeed_config.empty()
                                                 ? "--use-distributed-optimizer or --zero-stage 1|2"
                                                 : "the --deepspeed_config file's \"zero_optimization\" stage 1 or 2"));
  // As Megatron: a step whose gathers overlap the next forward but whose reductions are
  // waited for one by one is not a combination anyone measures; it is refused.
  if (o.overlap_param_gather && !o.overlap_grad_reduce)
    throw ConfigError("--overlap-param-gather needs the gradient reductions overlapped too: drop "
                      "--no-overlap-grad-reduce");
  f.get("comm", o.comm);
  f.get("no-tf32", o.no_tf32);
  f.get("disable-bf16-reduced-precision-matmul", o.disable_bf16_reduced_precision_matmul);
  f.get("recompute-granularity", o.recompute_granularity);
  f.get("recompute-method", o.recompute_method);
  f.get("recompute-num-layers", o.recompute_num_layers);
  bool checkpoint_activations = false;
  f.get("checkpoint-activations", checkpoint_activations);
  if (checkpoint_activations) {
    if (!o.recompute_granularity.empty() && o.recompute_granularity != "full")
      throw ConfigError("--checkpoint-activations means --recompute-granularity full, not '" +
                        o.recompute_granularity + "'");
    o.recompute_granularity = "full";
    if (o.recompute_method.empty()) o.recompute_method = "uniform";
  }
  if (f.has("checkpoint-num-layers")) {
    f.get("checkpoint-num-layers", o.recompute_num_layers);
    if (o.recompute_num_layers <= 0) throw ConfigError("--checkpoint-num-layers must be positive");
  }
  bool selective = false;
  f.get("recompute-activations", selective);
  if (selective) {
    if (!o.recompute_granularity.empty() && o.recompute_granularity != "selective")
      throw ConfigError("--recompute-activations means --recompute-granularity selective, not '" +
                        o.recompute_granularity + "'");
    o.recompute_granularity = "selective";
  }
  f.get("eval-interval", o.eval_interval);
  f.get("eval-iters", o.eval_iters);
  for (const auto& [flag, field] : {std::pair{"eval-micro-batch-size", &o.eval_micro_batch_size},
                                    std::pair{"eval-global-batch-size", &o.eval_global_batch_size}})
    if (f.has(flag)) {
      int64_t v = 0;
      f.get(flag, v);
      *field = v;
    }
  if (f.has("start-eval-at-iter")) {
    int64_t start = 0;
    f.get("start-eval-at-iter", start);
    if (start < 0) throw ConfigError("--start-eval-at-iter must not be negative");
    o.start_eval_at_iter = start;
  }
  f.get("tensorboard-dir", o.tensorboard_dir);
  f.get("tensorboard-log-interval", o.tensorboard_log_interval);
  f.get("tensorboard-queue-size", o.tensorboard_queue_size);
  // Megatron-DeepSpeed's scripts pass --deepspeed: their dashboards read its tags.
  if (f.has("deepspeed")) o.tensorboard_tags = "megatron-deepspeed";
  f.get("tensorboard-tags", o.tensorboard_tags);
  parse_tensorboard_tags(o.tensorboard_tags, "--tensorboard-tags");
  f.get("log-batch-size-to-tensorboard", o.log_batch_size_to_tensorboard);
  f.get("log-world-size-to-tensorboard", o.log_world_size_to_tensorboard);
  o.log_learning_rate_to_tensorboard = !f.has("no-log-learnig-rate-to-tensorboard");
  o.log_loss_scale_to_tensorboard = !f.has("no-log-loss-scale-to-tensorboard");
  f.get("log-memory-to-tensorboard", o.log_memory_to_tensorboard);
  f.get("log-optimizer-states-to-tensorboard", o.log_optimizer_states_to_tensorboard);
  f.get("log-energy", o.log_energy);
  f.get("log-throughput", o.log_throughput);
  f.get("log-params-norm", o.log_params_norm);
  f.get("log-num-zeros-in-grad", o.log_num_zeros_in_grad);
  f.get("timing-log-level", o.timing_log_level);
  f.get("timing-log-option", o.timing_log_option);
  f.get("log-timers-to-tensorboard", o.log_timers_to_tensorboard);
  f.get("log-validation-ppl-to-tensorboard", o.log_validation_ppl_to_tensorboard);
  f.get("profile", o.profile);
  f.get("profile-step-start", o.profile_step_start);
  f.get("profile-step-end", o.profile_step_end);
  for (const FlagDef& d : flags_without_effect_defs())
    if (f.has(d.name)) o.flags_without_effect.push_back(std::string("--") + d.name);
  // (word lists, which the command-line parser does not see)
  for (const auto& [flag, words] : o.words_without_effect) o.flags_without_effect.push_back("--" + flag);
  f.get("peak-tflops", o.peak_tflops);
  f.get("max-nan-iterations", o.max_nan_iterations);
  if (f.has("ckpt-format")) {  // noted (flags_without_effect_defs), but one of Megatron's
    std::string format;
    f.get("ckpt-format", format);
    if (format != "torch" && format != "torch_dist" && format != "zarr" && format != "torch_dcp" &&
        format != "fsdp_dtensor")
      throw ConfigError("--ckpt-format " + format + ": not one of Megatron's formats (torch, torch_dist, zarr, "
                        "torch_dcp, fsdp_dtensor)");
  }
  f.get("check-weight-hash-across-dp-replicas-interval", o.check_weight_hash_interval);
  if (f.has("check-weight-hash-across-dp-replicas-interval") && o.check_weight_hash_interval < 1)
    throw ConfigError("--check-weight-hash-across-dp-replicas-interval must be positive");
  f.get("exit-interval", o.exit_interval);
  o.skip_train = f.has("skip-train");
  o.log_progress = f.has("log-progress");
  f.get("kill-switch-path", o.kill_switch_path);
  if (f.has("exit-signal")) {
    std::string name;
    f.get("exit-signal", name);
    o.exit_signal = catchable_signal_named(name);
    if (o.exit_signal == 0)
      throw ConfigError("--exit-signal " + name + ": expected one of " + catchable_signal_names());
  }
  f.get("exit-duration-in-mins", o.exit_duration_in_mins);
  f.get("distributed-timeout-minutes", o.distributed_timeout_minutes);
  f.get("save-canonical", o.save_canonical);
  f.get("save", o.save);
  f.get("load", o.load);
  f.get("save-interval", o.save_interval);
  f.get("keep-last", o.keep_last);
  f.get("save-retain-interval", o.save_retain_interval);
  f.get("non-persistent-save-interval", o.non_persistent_save_interval);
  f.get("non-persistent-ckpt-type", o.non_persistent_ckpt_type);
  f.get("non-persistent-global-ckpt-dir", o.non_persistent_global_ckpt_dir);
  f.get("non-persistent-local-ckpt-dir", o.non_persistent_local_ckpt_dir);
  f.get("non-persistent-local-ckpt-algo", o.non_persistent_local_ckpt_algo);
  o.replication = f.has("replication");
  f.get("replication-jump", o.replication_jump);
  f.get("replication-factor", o.replication_factor);
  f.get("no-load-optim", o.no_load_optim);
  f.get("no-load-rng", o.no_load_rng);
  f.get("finetune", o.finetune);
  f.get("no-load-lr-state", o.no_load_lr_state);
  f.get("full-validation", o.full_validation);
  f.get("multiple-validation-sets", o.multiple_validation_sets);
  f.get("pretrained-checkpoint", o.pretrained_checkpoint);
  if (f.has("pretrained-checkpoint") && o.pretrained_checkpoint.empty())
    throw ConfigError("--pretrained-checkpoint: expected a directory");
  f.get("no-save-optim", o.no_save_optim);
  f.get("no-save-rng", o.no_save_rng);
  f.get("ckpt-step", o.ckpt_step);
  if (f.has("ckpt-step") && o.ckpt_step < 0) throw ConfigError("--ckpt-step must not be negative");
  f.get("exit-on-missing-checkpoint", o.exit_on_missing_checkpoint);
  f.get("use-checkpoint-args", o.use_checkpoint_args);
  f.get("use-mp-args-from-checkpoint-args", o.use_mp_args_from_checkpoint_args);
  if (o.use_mp_args_from_checkpoint_args && !o.use_checkpoint_args)  // Megatron reads it only there
    o.flags_without_effect.push_back("--use-mp-args-from-checkpoint-args (without --use-checkpoint-args)");
  // Megatron's masters after --no-load-optim come from the live model unless this flag asks for
  // the checkpoint's weights; trident's come from the weights just loaded, which are those.
  if (f.has("load-main-params-from-ckpt")) {
    if (!o.no_load_optim)  // Megatron's assertion
      throw ConfigError("--load-main-params-from-ckpt must be used with --no-load-optim");
    o.flags_without_effect.push_back("--load-main-params-from-ckpt");
  }
  for (const char* name : {"ckpt-step", "exit-on-missing-checkpoint", "use-checkpoint-args"})
    if (f.has(name) && o.load.empty()) throw ConfigError(std::string("--") + name + " needs --load");
  // Megatron's rule for a loaded checkpoint's scheduler: the two choices exclude each other
  // (OptimizerParamScheduler asserts "both override and use-checkpoint are set"), with or
  // without --load.
  for (const char* name : {"override-opt_param-scheduler", "override-lr-scheduler"})
    if (f.has(name)) o.override_opt_param_scheduler = true;
  for (const char* name : {"use-checkpoint-opt_param-scheduler", "use-checkpoint-lr-scheduler"})
    if (f.has(name)) o.use_checkpoint_opt_param_scheduler = true;
  if (o.override_opt_param_scheduler && o.use_checkpoint_opt_param_scheduler)
    throw ConfigError(std::string("--") +
                      (f.has("override-opt_param-scheduler") ? "override-opt_param-scheduler" : "override-lr-scheduler") +
                      " and --" +
                      (f.has("use-checkpoint-opt_param-scheduler") ? "use-checkpoint-opt_param-scheduler"
                                                                   : "use-checkpoint-lr-scheduler") +
                      " are mutually exclusive");
  f.get("vocab-file", o.vocab_file);
  f.get("merge-file", o.merge_file);
  f.get("tokenizer-type", o.tokenizer_type);
  if (o.tokenizer_type == "NullTokenizer" && f.has("vocab-size")) {
    // Megatron builds the tokenizer with or without data: its vocabulary, V + 1, is the model's
    // on synthetic tokens too (make_run_tokenizer sets the same with data).
    o.null_tokenizer_vocab_size = o.model.vocab_size;
    o.model.vocab_size = o.null_tokenizer_vocab_size + 1;
    o.eod_token = static_cast<int32_t>(o.null_tokenizer_vocab_size);
  }
  f.get("split", o.split);
  if (f.has("mid-level-dataset-surplus")) {
    double surplus = 0;
    f.get("mid-level-dataset-surplus", surplus);
    o.mid_level_dataset_surplus = surplus;
  }
  f.get("data-cache-path", o.data_cache_path);
  f.get("mock-data", o.mock_data);
  f.get("eod-mask-loss", o.eod_mask_loss);
  f.get("reset-position-ids", o.reset_position_ids);
  f.get("reset-attention-mask", o.reset_attention_mask);
  f.get("calculate-per-token-loss", o.calculate_per_token_loss);
  read_data_args_files(f, o);
  f.get("async-save", o.async_save);
  if (f.has("save") && o.save.empty()) throw ConfigError("--save: expected a directory");
  if (f.has("load") && o.load.empty()) throw ConfigError("--load: expected a directory");
  if (f.has("tensorboard-dir") && o.tensorboard_dir.empty()) throw ConfigError("--tensorboard-dir: expected a directory");
}

void check_positive(int64_t v, const char* flag) {
  if (v <= 0) throw ConfigError(std::string("--") + flag + " must be positive");
}
void check_non_negative(double v, const char* flag) {
  if (v < 0) throw ConfigError(std::string("--") + flag + " must not be negative");
}

// A word-list flag's words as one text, a space apart.
std::string join_words(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

// --recompute-modules' words (Megatron's list, core_attn by default): core_attn is what the
// fused attention recomputes always, so a list of it alone changes nothing; any other module
// (mlp, layernorm, ...) is refused.
void read_recompute_modules(TrainOptions& o) {
  if (o.recompute_modules.empty()) return;
  const bool other = std::any_of(o.recompute_modules.begin(), o.recompute_modules.end(),
                                 [](const std::string& w) { return w != "core_attn"; });
  if (other)
    throw ConfigError("--recompute-modules " + join_words(o.recompute_modules) + ": not supported: trident recomputes the attention's core "
                      "(the fused attention) always, and whole layers with --recompute-granularity full "
                      "(--recompute-modules core_attn)");
  o.flags_without_effect.push_back("--recompute-modules");
}

// --rampup-batch-size's words, checked as Megatron's RampupBatchsizeNumMicroBatches checks
// them (every batch of the ramp a multiple of the micro batch; the Trainer checks the
// data-parallel size too).
void read_batch_rampup(TrainOptions& o) {
  const std::vector<std::string>& w = o.rampup_batch_size;
  if (w.empty()) return;
  if (w.size() != 3)
    throw ConfigError("--rampup-batch-size: expected START INCR SAMPLES, got " + std::to_string(w.size()) + " words");
  if (!o.sample_based)
    throw ConfigError("--rampup-batch-size needs sample-based training (--train-samples), as Megatron's");
  o.rampup_start = convert<int64_t>("rampup-batch-size", w[0]);
  o.rampup_increment = convert<int64_t>("rampup-batch-size", w[1]);
  o.rampup_samples = convert<uint64_t>("rampup-batch-size", w[2]);
  const int64_t start = o.rampup_start, incr = o.rampup_increment, g = o.global_batch_size;
  if (start <= 0 || incr <= 0) throw ConfigError("--rampup-batch-size: START and INCR must be positive");
  if (o.rampup_samples == 0) throw ConfigError("--rampup-batch-size: SAMPLES must be positive");
  if (start >= g)
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(start) + ") must be below --global-batch-size (" +
                      std::to_string(g) + (o.global_batch_size_is_default ? ", not given)" : ")"));
  if ((g - start) % incr != 0)
    throw ConfigError("--rampup-batch-size: --global-batch-size (" + std::to_string(g) + ") - START (" +
                      std::to_string(start) + ") must be a multiple of INCR (" + std::to_string(incr) + ")");
  if (start % o.micro_batch_size != 0 || incr % o.micro_batch_size != 0)
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(start) + ") and INCR (" + std::to_string(incr) +
                      ") must be multiples of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
}

// --step-batch-size-schedule's words, checked as Megatron checks them: its last batch is the
// global batch, so --global-batch-size is not given too.
void read_step_batch_schedule(TrainOptions& o) {
  const std::vector<std::string>& w = o.step_batch_size_schedule;
  if (w.empty()) return;
  if (!o.rampup_batch_size.empty())
    throw ConfigError("--step-batch-size-schedule and --rampup-batch-size: give one of them");
  if (o.given_flags.count("global-batch-size"))
    throw ConfigError("--step-batch-size-schedule and --global-batch-size: give one of them (the schedule's last batch "
                      "is the global batch)");
  if (!o.sample_based)
    throw ConfigError("--step-batch-size-schedule needs sample-based training (--train-samples), as Megatron's");
  o.batch_steps = parse_step_batch_schedule(join_words(w), o.model.seq_length);  // again in resolve_schedule
  o.global_batch_size = static_cast<int>(o.batch_steps.back().batch);
  o.global_batch_size_is_default = false;
}

void validate_batch_and_schedule(TrainOptions& o) {
  check_positive(o.micro_batch_size, "micro-batch-size");
  read_step_batch_schedule(o);
  // Not given: the micro batch x the data-parallel size (Megatron's); a given 0 is an error.
  if (o.global_batch_size == 0 && !o.given_flags.count("global-batch-size")) {  // until resolve_global_batch_size
    o.global_batch_size = o.micro_batch_size;
    o.global_batch_size_is_default = true;
  }
  check_positive(o.global_batch_size, "global-batch-size");
  if (o.global_batch_size % o.micro_batch_size != 0)
    throw ConfigError(global_batch_flag(o) + " (" + std::to_string(o.global_batch_size) +
                      ") must be a multiple of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
  if (!(std::isfinite(o.lr) && o.lr >= 0))
    throw ConfigError("--lr must be a finite number >= 0, got " + detail::concat(o.lr));
  if (!(o.min_lr >= 0 && o.min_lr <= o.lr)) throw ConfigError("--min-lr must be in [0, --lr]");
  parse_lr_decay_style(o.lr_decay_style);  // throws naming --lr-decay-style
  parse_wsd_decay_style(o.lr_wsd_decay_style);
  read_batch_rampup(o);
  for (const std::string& w : o.iterations_to_skip_words) {
    const int64_t it = convert<int64_t>("iterations-to-skip", w);
    if (it < 1) throw ConfigError("--iterations-to-skip: " + w + " is not an iteration (they count from 1)");
    o.iterations_to_skip.insert(it);
  }
  read_recompute_modules(o);
  if (!(o.lr_warmup_init >= 0 && o.lr_warmup_init <= o.lr))
    throw ConfigError("--lr-warmup-init must be in [0, --lr], got " + detail::concat(o.lr_warmup_init));
  resolve_schedule(o);
}

// Megatron's rules for the weight-decay schedule (validate_args, OptimizerParamScheduler):
// it only rises, and the constant style has one value.
void validate_weight_decay(const TrainOptions& o) {
  check_non_negative(o.weight_decay, "weight-decay");
  const WeightDecaySchedule wd = make_weight_decay_schedule(o);  // throws naming --weight-decay-incr-style
  if (wd.end_wd < wd.start_wd)
    throw ConfigError("--end-weight-decay (" + detail::concat(wd.end_wd) + ") must not be below " +
                      "--start-weight-decay (" + detail::concat(wd.start_wd) +
                      "): Megatron's schedule only increases the weight decay");
  if (wd.style == WdIncrStyle::Constant && wd.start_wd != wd.end_wd)
    throw ConfigError("--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay (" +
                      detail::concat(wd.start_wd) + " and " + detail::concat(wd.end_wd) +
                      "); give --weight-decay-incr-style linear or cosine to change it over the run");
}

// torch.optim.AdamW's checks (Megatron hands these flags to it): betas in [0, 1), eps >= 0.
// Outside them the moments do not decay, or grow, or the update flips its sign: NaN
// parameters after one step, reported later as NaN losses.
void validate_adam(const TrainOptions& o) {
  for (const auto& [flag, beta] : {std::pair{"adam-beta1", o.adam_beta1}, std::pair{"adam-beta2", o.adam_beta2}})
    if (!(beta >= 0 && beta < 1))
      throw ConfigError(std::string("--") + flag + " must be in [0, 1), got " + detail::concat(beta));
  if (!(o.adam_eps >= 0 && std::isfinite(o.adam_eps)))
    throw ConfigError("--adam-eps must be a finite number >= 0, got " + detail::concat(o.adam_eps));
}

void validate_precision(const TrainOptions& o) {
  check_non_negative(o.loss_scale, "loss-scale");
  if (!(o.initial_loss_scale > 0)) throw ConfigError("--initial-loss-scale must be positive");
  if (!(o.min_loss_scale > 0)) throw ConfigError("--min-loss-scale must be positive");
  if (o.min_loss_scale > o.initial_loss_scale)
    throw ConfigError("--min-loss-scale must not exceed --initial-loss-scale");
  check_positive(o.loss_scale_window, "loss-scale-window");
  check_positive(o.hysteresis, "hysteresis");
}

// Megatron's rules: a method only with full granularity, and full needs a method.
void validate_recompute(const TrainOptions& o) {
  const std::string& g = o.recompute_granularity;
  if (!g.empty() && g != "full" && g != "selective")
    throw ConfigError("--recompute-granularity: unknown value '" + g + "' (expected full or selective)");
  if (!o.recompute_method.empty() && o.recompute_method != "uniform" && o.recompute_method != "block")
    throw ConfigError("--recompute-method: unknown value '" + o.recompute_method + "' (expected uniform or block)");
  if (g == "full" && o.recompute_method.empty())
    throw ConfigError("--recompute-granularity full needs --recompute-method uniform or block");
  if (g != "full" && !o.recompute_method.empty())
    throw ConfigError("--recompute-method needs --recompute-granularity full");
  check_positive(o.recompute_num_layers, "recompute-num-layers");
}

// --profile's window and ranks (whether the ranks exist is known once the job runs).
void validate_profile(TrainOptions& o) {
  const bool given = !o.profile_ranks.empty() || o.given_flags.count("profile-step-start") ||
                     o.given_flags.count("profile-step-end");
  if (!o.profile) {
    if (given) throw ConfigError("--profile-step-start, --profile-step-end and --profile-ranks need --profile");
    return;
  }
  check_non_negative(static_cast<double>(o.profile_step_start), "profile-step-start");
  if (o.profile_step_end <= o.profile_step_start)
    throw ConfigError("--profile-step-end (" + std::to_string(o.profile_step_end) +
                      ") must exceed --profile-step-start (" + std::to_string(o.profile_step_start) + ")");
  o.profile_rank_ids.clear();
  for (const std::string& w : o.profile_ranks) {
    const int64_t r = convert<int64_t>("profile-ranks", w);
    if (r < 0) throw ConfigError("--profile-ranks: rank " + w + " must not be negative");
    if (r > std::numeric_limits<int>::max()) throw ConfigError("--profile-ranks: rank " + w + " is too large");
    o.profile_rank_ids.insert(static_cast<int>(r));
  }
  if (o.profile_rank_ids.empty()) o.profile_rank_ids.insert(0);
}

// Megatron's non-persistent checkpoint flags.
void validate_non_persistent(TrainOptions& o) {
  const std::string& type = o.non_persistent_ckpt_type;
  if (type == "in_memory")  // Megatron-LM lists it, then refuses it too
    throw ConfigError("--non-persistent-ckpt-type in_memory: not supported (nor by Megatron-LM); local keeps them "
                      "on each node's storage");
  if (!type.empty() && type != "global" && type != "local")
    throw ConfigError("--non-persistent-ckpt-type " + type + ": expected global or local");
  if (type == "local" && o.non_persistent_local_ckpt_dir.empty())
    throw ConfigError("--non-persistent-ckpt-type local needs --non-persistent-local-ckpt-dir");
  if (!o.non_persistent_local_ckpt_dir.empty() && type.empty())
    throw ConfigError("--non-persistent-local-ckpt-dir needs --non-persistent-ckpt-type local");
  if (o.non_persistent_local_ckpt_algo != "fully_parallel" && o.non_persistent_local_ckpt_algo != "atomic")
    throw ConfigError("--non-persistent-local-ckpt-algo " + o.non_persistent_local_ckpt_algo +
                      ": expected fully_parallel or atomic");
  check_non_negative(static_cast<double>(o.non_persistent_save_interval), "non-persistent-save-interval");
  if (o.non_persistent_save_interval > 0 && type.empty())
    throw ConfigError("--non-persistent-save-interval needs --non-persistent-ckpt-type global or local (without "
                      "it --load would not look for them)");
  if (o.non_persistent_save_interval > 0 && o.save.empty())
    throw ConfigError("--non-persistent-save-interval needs --save");
  if (!o.non_persistent_global_ckpt_dir.empty() && type.empty())
    throw ConfigError("--non-persistent-global-ckpt-dir needs --non-persistent-ckpt-type global");
  // Megatron writes progress.txt into --save; without it there is none.
  if (o.log_progress && o.save.empty()) o.flags_without_effect.push_back("--log-progress (without --save)");
  // The other type's folder: no effect (Megatron reads the flag of the type given only).
  if (!o.non_persistent_global_ckpt_dir.empty() && type == "local")
    o.flags_without_effect.push_back("--non-persistent-global-ckpt-dir");
  if (!o.non_persistent_local_ckpt_dir.empty() && type == "global")
    o.flags_without_effect.push_back("--non-persistent-local-ckpt-dir");
  if (o.replication && type != "local")
    throw ConfigError("--replication needs --non-persistent-ckpt-type local (it copies the local checkpoints)");
  if (o.replication && !o.given_flags.count("replication-jump"))
    throw ConfigError("--replication needs --replication-jump (the ranks of a node, so that copies lie on others)");
  check_positive(o.replication_jump, "replication-jump");
  check_positive(o.replication_factor, "replication-factor");
  if (!o.replication)  // Megatron warns and goes on
    for (const char* f : {"replication-jump", "replication-factor"})
      if (o.given_flags.count(f)) o.flags_without_effect.push_back(std::string("--") + f);
}

void validate_run(TrainOptions& o) {
  check_positive(o.log_interval, "log-interval");
  if (o.given_flags.count("log-memory-interval")) {
    check_positive(o.log_memory_interval, "log-memory-interval");
    if (o.log_memory_interval % o.log_interval != 0)  // Megatron's assertion
      throw ConfigError("--log-memory-interval (" + std::to_string(o.log_memory_interval) +
                        ") must be a multiple of --log-interval (" + std::to_string(o.log_interval) + ")");
  }
  if (o.clip_grad < 0) throw ConfigError("--clip-grad must not be negative");
  if (o.has_data() && o.mock_data)
    throw ConfigError("--mock-data and --data-path/--train-data-path/--valid-data-path/--test-data-path are "
                      "alternatives: give one");
  for (const auto& [flag, given] : {std::pair{"eod-mask-loss", o.eod_mask_loss},
                                    {"reset-position-ids", o.reset_position_ids},
                                    {"reset-attention-mask", o.reset_attention_mask}})
    if (given && !o.has_data())
      throw ConfigError(std::string("--") + flag + " works on the documents of --data-path (ended by its "
                        "tokenizer's <|endoftext|>); synthetic data has no documents");
  if (o.tokenizer_type == "NullTokenizer" && o.null_tokenizer_vocab_size == 0 && o.has_data())
    throw ConfigError("--vocab-size is required for NullTokenizer (its ids are 0 to V - 1, V the end of document)");
  if (o.has_data() && o.vocab_file.empty() && o.tokenizer_type != "NullTokenizer")
    throw ConfigError(std::string("--vocab-file is required with --") +
                      (o.data_path.empty() ? "train-data-path/--valid-data-path/--test-data-path" : "data-path"));
  if (!o.data_path.empty() && (!o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty()))
    throw ConfigError("--data-path and --train-data-path/--valid-data-path/--test-data-path are alternatives: give one");
  check_positive(o.tensor_model_parallel_size, "tensor-model-parallel-size");
  check_positive(o.pipeline_model_parallel_size, "pipeline-model-parallel-size");
  if (o.zero_stage < 0 || o.zero_stage > 2) throw ConfigError("--zero-stage must be 0, 1 or 2");
  if (!o.comm.empty() && o.comm != "nccl" && o.comm != "mpi")
    throw ConfigError("--comm: unknown communicator '" + o.comm + "' (expected nccl or mpi)");
  validate_recompute(o);
  check_positive(o.eval_interval, "eval-interval");
  check_non_negative(static_cast<double>(o.eval_iters), "eval-iters");
  check_positive(o.tensorboard_log_interval, "tensorboard-log-interval");
  check_positive(o.tensorboard_queue_size, "tensorboard-queue-size");
  if (o.timing_log_level < 0 || o.timing_log_level > 2)
    throw ConfigError("--timing-log-level must be 0, 1 or 2, got " + std::to_string(o.timing_log_level));
  parse_timing_log_option(o.timing_log_option);  // throws naming --timing-log-option
  validate_profile(o);
  check_non_negative(o.peak_tflops, "peak-tflops");
  check_non_negative(static_cast<double>(o.max_nan_iterations), "max-nan-iterations");
  check_non_negative(static_cast<double>(o.exit_interval), "exit-interval");
  check_non_negative(o.exit_duration_in_mins, "exit-duration-in-mins");
  check_non_negative(o.distributed_timeout_minutes, "distributed-timeout-minutes");
  check_non_negative(static_cast<double>(o.save_interval), "save-interval");
  check_non_negative(static_cast<double>(o.keep_last), "keep-last");
  if (o.mid_level_dataset_surplus) check_non_negative(*o.mid_level_dataset_surplus, "mid-level-dataset-surplus");
  if (o.full_validation && !o.has_data())
    throw ConfigError("--full-validation reads the validation data to its end: give --data-path or --valid-data-path "
                      "(synthetic tokens have no end)");
  if (o.multiple_validation_sets && !o.full_validation && !o.skip_train)  // Megatron's NotImplementedError
    throw ConfigError("--multiple-validation-sets needs --full-validation (or --skip-train), as Megatron's");
  if (o.multiple_validation_sets && !o.has_data())
    throw ConfigError("--multiple-validation-sets: the validation sets are the prefixes of --valid-data-path: give it");
  // Megatron's asserts with --save: positive, a multiple of --save-interval. --keep-last (not
  // Megatron's) prunes by the chain of previous checkpoints that these deletions cut.
  if (o.save_retain_interval != 0 && o.keep_last > 0)
    throw ConfigError("--save-retain-interval and --keep-last choose the checkpoints kept in two ways: give one");
  if (o.save_retain_interval < 0 ||
      (o.save_retain_interval != 0 && !o.save.empty() &&
       (o.save_interval <= 0 || o.save_retain_interval % o.save_interval != 0)))
    throw ConfigError("--save-retain-interval " + std::to_string(o.save_retain_interval) +
                      ": must be a positive multiple of --save-interval (" + std::to_string(o.save_interval) + ")");
  validate_non_persistent(o);
  // With --use-checkpoint-args the shape is complete only once the checkpoint is read.
  if (!o.use_checkpoint_args) validate_model_options(o);
}

// fixed_setting_defs: one line for a setting trident does not have; GPT-2's named ones join
// the flags without effect.
void check_fixed_settings(const Flags& f, TrainOptions& o) {
  for (const FixedSetting& s : fixed_setting_defs()) {
    if (!f.has(s.name)) continue;
    const std::string flag = std::string("--") + s.name;
    if (s.value == nullptr) throw ConfigError(flag + ": not supported: " + s.why);
    const std::string given = f.str(s.name);
    const std::optional<double> number = parse_decimal(given), wanted = parse_decimal(s.value);
    if (number && wanted ? *number == *wanted : given == s.value || (s.also && given == s.also)) {
      o.flags_without_effect.push_back(flag);
      continue;
    }
    throw ConfigError(flag + " " + given + ": not supported: " + s.why + " (" + flag + " " + s.value + ")");
  }
}

void read_and_validate(const Flags& f, TrainOptions& o) {
  for (const FlagDef& d : flag_defs())
    if (f.has(d.name)) o.given_flags.insert(d.name);
  read_model_flags(f, o.model);
  // Megatron's model flags that GPT-2 fixes: checked against the shape once it is complete.
  f.get("ffn-hidden-size", o.ffn_hidden_size);
  f.get("kv-channels", o.kv_channels);
  check_fixed_settings(f, o);
  read_schedule_flags(f, o);
  read_optimizer_flags(f, o);
  read_precision_flags(f, o);
  apply_deepspeed_config(f, o);
  read_run_flags(f, o);
  // Consistency, each error naming the flags involved.
  validate_batch_and_schedule(o);
  validate_weight_decay(o);
  validate_adam(o);
  validate_precision(o);
  if (o.disable_bf16_reduced_precision_matmul && o.model.dtype != DType::BF16)  // Megatron's acts with --bf16 only
    o.flags_without_effect.push_back("--disable-bf16-reduced-precision-matmul (without --bf16)");
  validate_run(o);
}

// Megatron's assertion lr_warmup_steps < lr_decay_steps in the flags the user sets: the decay
// ends with the run unless --lr-decay-iters/--lr-decay-samples says otherwise, so a config's
// warm-up can outlast the default --train-iters (100) that the user never gave.
std::string warmup_outlasts_decay(const TrainOptions& o) {
  if (o.lr_warmup_fraction >= 0) return "--lr-warmup-fraction must be below 1";
  const bool s = o.sample_based;
  const std::string warmup = s ? "--lr-warmup-samples (" + std::to_string(o.lr_warmup_samples) + ")"
                               : "--lr-warmup-iters (" + std::to_string(o.lr_warmup_iters) + ")";
  if (s ? o.lr_decay_samples != 0 : o.lr_decay_iters != 0)
    return s ? "--lr-decay-samples (" + std::to_string(o.lr_decay_samples) + ") must exceed " + warmup
             : "--lr-decay-iters (" + std::to_string(o.lr_decay_iters) + ") must exceed " + warmup;
  const std::string run = s ? "--train-samples (" + std::to_string(o.train_samples) + ")"
                            : "--train-iters (" + std::to_string(o.train_iters) +
                                  (o.train_iters_is_default ? ", the default)" : ")");
  return run + " must exceed " + warmup + ": the learning-rate decay ends with the run unless " +
         (s ? "--lr-decay-samples" : "--lr-decay-iters") + " says otherwise; set " +
         (s ? "--train-samples or --lr-decay-samples" : "--train-iters or --lr-decay-iters");
}

// An iteration count in samples (x the global batch), which must fit 64 bits.
uint64_t samples_of(int64_t iterations, uint64_t global_batch, const char* flag) {
  uint64_t samples = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(iterations), global_batch, &samples))
    throw ConfigError(std::string("--") + flag + " (" + std::to_string(iterations) + ") x --global-batch-size (" +
                      std::to_string(global_batch) + ") does not fit 64 bits");
  return samples;
}

// WSD's anneal (Megatron requires its length with the style) must fit between the warm-up's
// end and the decay's: one that reached into the warm-up would make the rate jump down when the
// warm-up ends (Megatron does not check it).
void check_wsd_anneal(const TrainOptions& o) {
  if (o.lr_decay_style != "WSD") return;  // the anneal's flags then do nothing (read_schedule_flags notes them)
  const bool s = o.sample_based;
  const std::string flag = s ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters";
  const bool given = s ? o.lr_wsd_decay_samples != 0 : o.lr_wsd_decay_iters != 0;
  if (!given) throw ConfigError("--lr-decay-style WSD needs " + flag + " (the final anneal's length)");
  const double after_warmup = static_cast<double>(o.decay_samples) - o.warmup_samples;
  if (static_cast<double>(o.wsd_decay_samples) > after_warmup) {
    const double room = s ? after_warmup : after_warmup / static_cast<double>(o.global_batch_size);
    std::ostringstream m;
    m << flag << " (" << (s ? o.lr_wsd_decay_samples : static_cast<uint64_t>(o.lr_wsd_decay_iters))
      << ") must not exceed the decay after the warm-up (" << room << (s ? " samples)" : " iterations)");
    throw ConfigError(m.str());
  }
}

}  // namespace

std::string TrainOptions::non_persistent_dir(const std::string& base) const {
  if (!non_persistent_global_ckpt_dir.empty()) return non_persistent_global_ckpt_dir;
  return (std::filesystem::path(base) / "non_persistent").string();  // Megatron's subfolder
}

int TrainOptions::virtual_pipeline_chunks() const {
  if (!uneven_pipeline.layout.empty())
    return pipeline_layout_chunks(uneven_pipeline.layout, pipeline_model_parallel_size);
  if (num_virtual_stages_per_pipeline_rank > 0) return num_virtual_stages_per_pipeline_rank;
  if (num_layers_per_virtual_pipeline_stage > 0) {
    // Megatron counts the embedding and the loss among the layers a chunk holds where they count.
    return counted_layers(model.num_layers, uneven_pipeline) /
           (pipeline_model_parallel_size * num_layers_per_virtual_pipeline_stage);
  }
  return 1;
}

PipelineSplit TrainOptions::pipeline_split() const {
  return PipelineSplit{model.num_layers, pipeline_model_parallel_size, virtual_pipeline_chunks(), uneven_pipeline};
}

void validate_model_options(const TrainOptions& o) {
  const int P = o.pipeline_model_parallel_size, L = o.model.num_layers;
  if (L < 1) throw ConfigError("--num-layers must be positive, got " + std::to_string(L));
  const UnevenPipeline& uneven = o.uneven_pipeline;
  if (P > L && !uneven.any())
    throw ConfigError("--pipeline-model-parallel-size (" + std::to_string(P) + ") must not exceed --num-layers (" +
                      std::to_string(L) + ")");
  const int per_chunk = o.num_layers_per_virtual_pipeline_stage, chunks = o.num_virtual_stages_per_pipeline_rank;
  // Set on the command line or in the file (a given 0 included), or by hand in the options.
  const auto set = [&](const char* flag, int64_t value) { return value != 0 || o.given_flags.count(flag) > 0; };
  const bool by_layers = set("num-layers-per-virtual-pipeline-stage", per_chunk);
  const bool by_chunks = set("num-virtual-stages-per-pipeline-rank", chunks);
  if (!uneven.layout.empty() && (by_layers || by_chunks))
    throw ConfigError("--pipeline-model-parallel-layout gives the model chunks a stage itself: "
                      "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank go without it");
  if (by_layers || by_chunks) {
    const std::string flag =
        by_layers ? "--num-layers-per-virtual-pipeline-stage" : "--num-virtual-stages-per-pipeline-rank";
    const int value = by_layers ? per_chunk : chunks;
    if (by_layers && by_chunks)
      throw ConfigError("--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank are "
                        "alternatives: give one");
    if (value < 1) throw ConfigError(flag + " must be positive");
    if (P == 1) throw ConfigError(flag + " needs --pipeline-model-parallel-size above 1");
    if (by_layers && (uneven.first_stage_layers > 0 || uneven.last_stage_layers > 0))
      throw ConfigError("--decoder-first/last-pipeline-num-layers with an interleaved schedule take "
                        "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage");
    const int counted = counted_layers(L, uneven);
    if (!uneven.any() || by_layers) {
      if (counted % (P * value) != 0)
        throw ConfigError("--num-layers (" + std::to_string(L) +
                          (counted != L ? ", " + std::to_string(counted) + " with " + counted_as_layers(uneven)
                                        : std::string()) +
                          ") must be a multiple of " +
                          "--pipeline-model-parallel-size (" + std::to_string(P) + ") x " + flag + " (" +
                          std::to_string(value) + ")");
    }
  }
  if (const std::string why = pipeline_split_error(o.pipeline_split()); !why.empty())
    throw ConfigError("pipeline split: " + why);
  if (o.microbatch_group_size > 0 && o.microbatch_group_size != P)
    throw ConfigError("--microbatch-group-size-per-virtual-pipeline-stage " + std::to_string(o.microbatch_group_size) +
                      ": not supported: trident's interleaved schedule runs a chunk's micro-batches in groups of "
                      "--pipeline-model-parallel-size (" + std::to_string(P) + "), Megatron's default");
  const int tp = o.tensor_model_parallel_size;
  if (o.sequence_parallel && tp > 1) {
    // Each TP rank takes a contiguous 1/tp of the micro-batch's B x T rows.
    const int64_t rows = static_cast<int64_t>(o.micro_batch_size) * o.model.seq_length;
    if (rows % tp != 0)
      throw ConfigError("--sequence-parallel: --micro-batch-size (" + std::to_string(o.micro_batch_size) +
                        ") x --seq-length (" + std::to_string(o.model.seq_length) +
                        ") must be a multiple of --tensor-model-parallel-size (" + std::to_string(tp) + ")");
    if (o.model.hidden_size % 4 != 0)
      throw ConfigError("--sequence-parallel: --hidden-size (" + std::to_string(o.model.hidden_size) +
                        ") must be a multiple of 4");
  }
  const int64_t H = o.model.hidden_size, heads = o.model.num_attention_heads;
  if (set("ffn-hidden-size", o.ffn_hidden_size) && o.ffn_hidden_size != 4 * H)
    throw ConfigError("--ffn-hidden-size (" + std::to_string(o.ffn_hidden_size) + ") must be 4 x --hidden-size " +
                      std::to_string(H) + " (" + std::to_string(4 * H) + "): GPT-2's MLP");
  if (set("kv-channels", o.kv_channels) && (heads <= 0 || o.kv_channels * heads != H))
    throw ConfigError("--kv-channels (" + std::to_string(o.kv_channels) + ") must be --hidden-size / " +
                      "--num-attention-heads (" + (heads > 0 ? std::to_string(H / heads) : std::string("?")) +
                      "): GPT-2's head width");
  o.model.validate(o.tensor_model_parallel_size);
}

void resolve_schedule(TrainOptions& o) {
  if (o.global_batch_size <= 0) throw ConfigError("--global-batch-size must be positive");
  const uint64_t gbs = static_cast<uint64_t>(o.global_batch_size);
  if (o.lr_warmup_fraction > 1) throw ConfigError("--lr-warmup-fraction must be in [0, 1]");
  if (o.sample_based) {
    // The token thresholds in samples at the sequence length the run has now (--use-checkpoint-args
    // may have taken it from the checkpoint since the flags were read).
    if (!o.step_batch_size_schedule.empty())
      o.batch_steps = parse_step_batch_schedule(join_words(o.step_batch_size_schedule), o.model.seq_length);
    const BatchSchedule batches = make_batch_schedule(o);
    if (!o.batch_steps.empty() && o.train_samples < static_cast<uint64_t>(batches.global_batch(0)))
      throw ConfigError("--train-samples (" + std::to_string(o.train_samples) + ") must be at least the first batch "
                        "of --step-batch-size-schedule (" + std::to_string(batches.global_batch(0)) + ")");
    if (o.batch_steps.empty() && o.train_samples < gbs)
      throw ConfigError("--train-samples (" + std::to_string(o.train_samples) +
                        ") must be at least --global-batch-size (" + std::to_string(gbs) + ")");
    o.train_iters = batches.varies() ? train_iters_of_samples(batches, o.train_samples)
                                     : static_cast<int64_t>(o.train_samples / gbs);
    o.decay_samples = o.lr_decay_samples != 0 ? o.lr_decay_samples : o.train_samples;
    o.warmup_samples = static_cast<double>(o.lr_warmup_samples);
    o.wsd_decay_samples = o.lr_wsd_decay_samples;
  } else {
    if (o.train_iters <= 0) throw ConfigError("--train-iters must be positive");
    if (o.lr_warmup_iters < 0) throw ConfigError("--lr-warmup-iters must not be negative");
    if (o.lr_decay_iters < 0) throw ConfigError("--lr-decay-iters must not be negative");
    const int64_t decay_iters = o.lr_decay_iters != 0 ? o.lr_decay_iters : o.train_iters;
    o.train_samples = samples_of(o.train_iters, gbs, "train-iters");
    o.decay_samples = samples_of(decay_iters, gbs, o.lr_decay_iters != 0 ? "lr-decay-iters" : "train-iters");
    o.warmup_samples = static_cast<double>(o.lr_warmup_iters) * static_cast<double>(gbs);
    if (o.lr_wsd_decay_iters < 0) throw ConfigError("--lr-wsd-decay-iters must not be negative");
    o.wsd_decay_samples = samples_of(o.lr_wsd_decay_iters, gbs, "lr-wsd-decay-iters");
  }
  if (o.lr_warmup_fraction >= 0) o.warmup_samples = o.lr_warmup_fraction * static_cast<double>(o.decay_samples);
  // Megatron asserts warm-up < decay; a constant schedule never decays, so only the
  // decaying styles need it here.
  if (o.lr_decay_style != "constant" && !(o.warmup_samples < static_cast<double>(o.decay_samples)))
    throw ConfigError(warmup_outlasts_decay(o));
  check_wsd_anneal(o);
  // The validation samples the run reads: every periodic evaluation and the final one.
  const auto evaluations = static_cast<uint64_t>(sized_validations(o));
  uint64_t valid_samples = 0;
  if (o.eval_iters > 0 && __builtin_mul_overflow(samples_of(o.eval_iters, gbs, "eval-iters"), evaluations, &valid_samples))
    throw ConfigError("--eval-iters (" + std::to_string(o.eval_iters) + ") x --global-batch-size x the " +
                      std::to_string(evaluations) + " evaluations does not fit 64 bits");
}

int64_t sized_validations(const TrainOptions& o) {
  if (o.eval_interval <= 0) return 1;
  int64_t n = o.train_iters / o.eval_interval + 1;
  // (at least the final validation's, which always runs: Megatron's rule gives none when
  // --start-eval-at-iter lies past the run)
  if (o.start_eval_at_iter) n = std::max<int64_t>(1, n - *o.start_eval_at_iter / o.eval_interval);
  return n;
}

bool validates_after(const TrainOptions& o, int64_t iteration) {
  return o.eval_interval > 0 && iteration % o.eval_interval == 0 &&
         (!o.start_eval_at_iter || iteration >= *o.start_eval_at_iter);
}

int64_t periodic_validations(const TrainOptions& o, int64_t after, int64_t upto) {
  const int64_t E = o.eval_interval;
  if (E <= 0) return 0;
  // The multiples k E with k E > after and k E >= --start-eval-at-iter, up to upto.
  const int64_t first = std::max<int64_t>(after / E + 1, o.start_eval_at_iter ? (*o.start_eval_at_iter + E - 1) / E : 1);
  return std::max<int64_t>(0, upto / E - first + 1);
}

// Megatron's evaluation batch sizes, which trident takes only equal to the training's.
static void check_evaluation_batches(const TrainOptions& o) {
  const auto check = [](const std::optional<int64_t>& given, int64_t training, const char* flag, const char* of) {
    if (given && *given != training)
      throw ConfigError(std::string("--") + flag + " " + std::to_string(*given) + ": trident evaluates with the "
                        "training's batches (" + of + " " + std::to_string(training) + ")");
  };
  check(o.eval_micro_batch_size, o.micro_batch_size, "eval-micro-batch-size", "--micro-batch-size");
  check(o.eval_global_batch_size, o.global_batch_size, "eval-global-batch-size", global_batch_flag(o).c_str());
}

void resolve_global_batch_size(TrainOptions& o, int data_parallel_size) {
  if (!o.deepspeed_config.empty())
    check_deepspeed_batch(o.deepspeed_batch, o.micro_batch_size, data_parallel_size, o.deepspeed_config);
  if (o.global_batch_size_is_default) {
    o.global_batch_size = o.micro_batch_size * data_parallel_size;
    resolve_schedule(o);
  }
  check_evaluation_batches(o);
}

std::string global_batch_flag(const TrainOptions& o) {
  return o.step_batch_size_schedule.empty() ? "--global-batch-size" : "the last batch of --step-batch-size-schedule";
}

BackendOptions backend_options(const TrainOptions& o) {
  return {.allow_tf32 = !o.no_tf32,
          .bf16_reduction_in_fp32 = o.disable_bf16_reduced_precision_matmul && o.model.dtype == DType::BF16};
}

LrSchedule make_lr_schedule(const TrainOptions& o) {
  LrSchedule s;
  s.max_lr = o.lr;
  s.min_lr = o.min_lr;
  s.init_lr = o.lr_warmup_init;
  s.style = parse_lr_decay_style(o.lr_decay_style);
  s.warmup_samples = o.warmup_samples;
  s.decay_samples = static_cast<double>(o.decay_samples);
  s.wsd_decay_samples = static_cast<double>(o.wsd_decay_samples);
  s.wsd_style = parse_wsd_decay_style(o.lr_wsd_decay_style);
  s.warmup_tokens = o.lr_warmup_tokens;
  s.decay_tokens = o.lr_decay_tokens;
  return s;
}

BatchSchedule make_batch_schedule(const TrainOptions& o) {
  BatchSchedule r;
  r.global = o.global_batch_size;
  r.start = o.rampup_start > 0 ? o.rampup_start : o.global_batch_size;
  r.increment = o.rampup_increment;
  r.samples = o.rampup_samples;
  r.steps = o.batch_steps;
  return r;
}

WeightDecaySchedule make_weight_decay_schedule(const TrainOptions& o) {
  WeightDecaySchedule s;
  s.start_wd = o.start_weight_decay >= 0 ? o.start_weight_decay : o.weight_decay;
  s.end_wd = o.end_weight_decay >= 0 ? o.end_weight_decay : o.weight_decay;
  s.incr_samples = static_cast<double>(o.train_samples);
  s.style = parse_wd_incr_style(o.weight_decay_incr_style);
  return s;
}

LossScalerConfig make_loss_scaler_config(const TrainOptions& o) {
  LossScalerConfig c;
  const DType t = o.model.dtype;
  if (t != DType::F16 && t != DType::BF16) return c;  // None
  if (o.loss_scale > 0) {
    c.kind = LossScaleKind::Constant;
    c.constant_scale = o.loss_scale;
  } else if (t == DType::F16) {
    c.kind = o.deepspeed_fp16_optimizer ? LossScaleKind::DeepSpeedFused : LossScaleKind::Dynamic;
    c.initial_scale = o.initial_loss_scale;
    c.min_scale = o.min_loss_scale;
    c.growth_interval = o.loss_scale_window;
    c.hysteresis = o.hysteresis;
  }
  return c;
}

std::string flags_every_rank_shares(const TrainOptions& o) {
  std::ostringstream s;
  s << std::boolalpha;
  const ModelConfig& m = o.model;
  const auto line = [&](const char* flag, const auto& value) {
    s << "--" << flag << ' ';
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>) {
      char buf[64];  // the shortest text that reads back as the same value: values that differ print differently
      s << std::string_view(buf, std::to_chars(buf, buf + sizeof buf, value).ptr - buf);
    } else {
      s << value;
    }
    s << '\n';
  };
  line("tensor-model-parallel-size", o.tensor_model_parallel_size);
  line("pipeline-model-parallel-size", o.pipeline_model_parallel_size);
  line("num-virtual-stages-per-pipeline-rank", o.virtual_pipeline_chunks());
  line("decoder-first-pipeline-num-layers", o.uneven_pipeline.first_stage_layers);
  line("decoder-last-pipeline-num-layers", o.uneven_pipeline.last_stage_layers);
  line("account-for-embedding-in-pipeline-split", o.uneven_pipeline.embedding_as_layer);
  line("account-for-loss-in-pipeline-split", o.uneven_pipeline.loss_as_layer);
  line("pipeline-model-parallel-layout", o.uneven_pipeline.layout);
  line("sequence-parallel", o.sequence_parallel);
  line("zero-stage", o.zero_stage);
  line("overlap-grad-reduce", o.overlap_grad_reduce);
  line("overlap-param-gather", o.overlap_param_gather);
  line("comm", o.comm);
  line("device", o.device);
  line("num-layers", m.num_layers);
  line("hidden-size", m.hidden_size);
  line("num-attention-heads", m.num_attention_heads);
  line("seq-length", m.seq_length);
  line("max-position-embeddings", m.max_position_embeddings);
  line("vocab-size", m.vocab_size);
  line("make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  line("hidden-dropout", m.hidden_dropout);
  line("attention-dropout", m.attention_dropout);
  line("init-method-std", m.init_method_std);
  line("embedding-init-method-std", m.embedding_init_method_std);  // also the embeddings' weight decay
  line("precision", dtype_name(m.dtype));
  line("micro-batch-size", o.micro_batch_size);
  line("global-batch-size", o.global_batch_size);
  line("train-iters", o.train_iters);
  line("train-samples", o.train_samples);
  line("rampup-batch-size", join_words(o.rampup_batch_size));
  std::string steps;
  for (const BatchStep& b : o.batch_steps) steps += std::to_string(b.samples) + ":" + std::to_string(b.batch) + " ";
  line("step-batch-size-schedule (samples)", steps);
  std::string skips;
  for (int64_t it : o.iterations_to_skip) {
    if (!skips.empty()) skips += ' ';
    skips += std::to_string(it);
  }
  line("iterations-to-skip", skips);
  line("recompute-granularity", o.recompute_granularity);
  line("recompute-method", o.recompute_method);
  line("recompute-num-layers", o.recompute_num_layers);
  line("seed", o.seed);
  line("lr", o.lr);
  line("min-lr", o.min_lr);
  line("lr-decay-style", o.lr_decay_style);
  line("lr-wsd-decay-style", o.lr_wsd_decay_style);
  line("lr-wsd-decay-samples", o.wsd_decay_samples);
  line("lr-warmup-init", o.lr_warmup_init);
  line("warm-up samples", o.warmup_samples);
  line("decay samples", o.decay_samples);
  line("clip-grad", o.clip_grad);
  line("weight-decay", o.weight_decay);
  line("adam-beta1", o.adam_beta1);
  line("adam-beta2", o.adam_beta2);
  line("adam-eps", o.adam_eps);
  line("accumulate-allreduce-grads-in-fp32", o.accumulate_allreduce_grads_in_fp32);
  line("loss-scale", o.loss_scale);
  line("initial-loss-scale", o.initial_loss_scale);
  line("min-loss-scale", o.min_loss_scale);
  line("loss-scale-window", o.loss_scale_window);
  line("hysteresis", o.hysteresis);
  line("eval-interval", o.eval_interval);
  line("start-eval-at-iter", o.start_eval_at_iter.value_or(-1));
  line("eval-iters", o.eval_iters);
  line("log-interval", o.log_interval);
  line("log-params-norm", o.log_params_norm);
  line("log-num-zeros-in-grad", o.log_num_zeros_in_grad);
  line("log-optimizer-states-to-tensorboard", o.log_optimizer_states_to_tensorboard);  // collective
  line("log-energy", o.log_energy);  // collective
  line("timing-log-level", o.timing_log_level);
  line("timing-log-option", o.timing_log_option);
  line("log-timers-to-tensorboard", o.log_timers_to_tensorboard);
  line("max-nan-iterations", o.max_nan_iterations);
  line("check-weight-hash-across-dp-replicas-interval", o.check_weight_hash_interval);
  line("log-progress", o.log_progress);  // its start is collective
  line("tensorboard-dir given", !o.tensorboard_dir.empty());
  line("tensorboard-log-interval", o.tensorboard_log_interval);
  line("tensorboard-queue-size", o.tensorboard_queue_size);
  line("tensorboard-tags", o.tensorboard_tags);
  line("data-path given", !o.data_path.empty());
  line("train-data-path given", !o.train_data_path.empty());
  line("valid-data-path given", !o.valid_data_path.empty());
  line("test-data-path given", !o.test_data_path.empty());
  line("split", o.split);
  line("mid-level-dataset-surplus", o.mid_level_dataset_surplus ? std::to_string(*o.mid_level_dataset_surplus) : "");
  line("eod-mask-loss", o.eod_mask_loss);
  line("reset-position-ids", o.reset_position_ids);
  line("reset-attention-mask", o.reset_attention_mask);
  line("calculate-per-token-loss", o.calculate_per_token_loss);
  line("save given", !o.save.empty());
  line("save-interval", o.save_interval);
  line("save-retain-interval", o.save_retain_interval);
  line("non-persistent-save-interval", o.non_persistent_save_interval);
  line("non-persistent-ckpt-type", o.non_persistent_ckpt_type);
  line("non-persistent-local-ckpt-algo", o.non_persistent_local_ckpt_algo);
  line("async-save", o.async_save);
  line("load given", !o.load.empty());
  line("pretrained-checkpoint given", !o.pretrained_checkpoint.empty());
  line("no-load-lr-state", o.no_load_lr_state);
  line("full-validation", o.full_validation);
  line("multiple-validation-sets", o.multiple_validation_sets);
  line("exit-interval", o.exit_interval);
  line("skip-train", o.skip_train);
  line("kill-switch-path given", !o.kill_switch_path.empty());  // a collective after every iteration
  const auto tokens = [](const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : std::string("none"); };
  line("lr-warmup-tokens", tokens(o.lr_warmup_tokens));
  line("lr-decay-tokens", tokens(o.lr_decay_tokens));
  line("train-tokens", tokens(o.train_tokens));
  line("exit-duration-in-mins given", o.exit_duration_in_mins > 0);  // each rank may have its own limit
  return s.str();
}

bool parse_train_options(int argc, const char* const* argv, TrainOptions& o) {
  const GatheredArgs gathered = gather_args(argc, argv, o);
  const std::vector<std::string>& args = gathered.args;
  cxxopts::Options options("trident-train", "Train GPT-2 (Megatron-compatible flags)");
  for (const FlagDef& d : flag_defs()) {
    if (d.is_bool)
      options.add_options()(d.name, d.help);
    else
      options.add_options()(d.name, d.help, cxxopts::value<std::string>());
  }
  // Name the unknown flags exactly as the user typed them, all in the one line (a script
  // brought over from Megatron would otherwise take one try per flag).
  std::string unknown;
  int unknown_count = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagDef* def = find_flag(name);
    if (!def) {
      unknown += (unknown.empty() ? "--" : ", --") + name;
      ++unknown_count;
      continue;
    }
    check_flag_word("--" + name, def->is_bool, eq != std::string::npos,
                    i + 1 < args.size() ? args[i + 1].c_str() : nullptr);
  }
  if (unknown_count > 0)
    throw ConfigError((unknown_count == 1 ? "unknown flag " : "unknown flags ") + unknown + " (see --help)");
  std::vector<const char*> cargv;
  for (const std::string& s : args) cargv.push_back(s.c_str());
  cxxopts::ParseResult r;
  try {
    r = options.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  if (!r.unmatched().empty()) throw ConfigError("unexpected argument '" + r.unmatched()[0] + "'");
  if (r.count("help")) {
    std::cout << options.help() << std::endl;
    return false;
  }
  try {
    read_and_validate(Flags(std::move(r)), o);
  } catch (const ConfigError& e) {
    throw ConfigError(with_config_origins(e.what(), gathered.from_config));
  }
  return true;
}

}  // namespace trident
