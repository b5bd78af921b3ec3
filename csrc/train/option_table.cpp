#include "train/option_table.h"

#include <algorithm>
#include <deque>
#include <map>

namespace trident::train_flags {

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
      {"no-bias-dropout-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-gradient-accumulation-fusion", "Megatron's kernel fusion switch: no effect", true},
      {"no-async-tensor-model-parallel-allreduce", "Megatron's communication overlap switch: no effect", true},
      {"use-flash-attn", "Megatron's flash attention switch: the fused attention always runs", true},
      {"attention-softmax-in-fp32", "the fused attention's softmax always runs in fp32", true},
      {"no-query-key-layer-scaling", "Megatron's fp16 softmax rescaling: the attention's softmax is fp32 anyway", true},
      {"apply-query-key-layer-scaling", "Megatron's fp16 softmax rescaling: the attention's softmax is fp32 anyway",
       true},
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
      {"use-legacy-models", "Megatron's model implementation switch: no effect (but with --no-bias-gelu-fusion "
                            "--openai-gelu, the legacy model's tanh GELU)", true},
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
      {"use-te-activation-func", "Transformer Engine's activation kernels: no effect (its GELU is the tanh one, "
                                 "also with --no-bias-gelu-fusion)", true},
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
      {"return-data-index", "Megatron-DeepSpeed's sample index in the batch (for its data analysis): no effect",
       true},
      {"log-path", "BigScience's file of the run's arguments: not written (trident-train's first lines give the "
                   "settings, the checkpoints' metadata.json the model's)"},
      {"object-storage-cache-path", "Megatron's object-storage index cache: no effect (paths are files)"},
      // Read by Megatron only with a setting that trident refuses (or for other models).
      {"trust-remote-code", "read only by Hugging Face tokenizers, which trident does not have", true},
      {"tiktoken-num-special-tokens", "read only with --tokenizer-type TikTokenizer, which trident refuses"},
      {"rotary-position-embeddings-theta", "read only with rotary positions; GPT-2's are learned absolute "
                                           "embeddings"},
      {"rope-type", "read only with rotary positions; GPT-2's are learned absolute embeddings"},
      {"mask-prob", "read only by BERT's and T5's datasets"},
      {"short-seq-prob", "read only by BERT's and T5's datasets"},
      {"relative-attention-num-buckets", "read only with relative positions; GPT-2's are learned absolute "
                                         "embeddings"},
      {"relative-attention-max-distance", "read only with relative positions; GPT-2's are learned absolute "
                                          "embeddings"},
      {"mtp-loss-scaling-factor", "read only with multi-token prediction layers (--mtp-num-layers is 0)"},
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
      {"tiktoken-special-tokens", "TOKEN ...: read only with --tokenizer-type TikTokenizer, which trident refuses"},
  };
  return defs;
}

bool is_list_flag_without_effect(const std::string& flag) {
  for (const FlagDef& d : list_flags_without_effect_defs())
    if (flag == d.name) return true;
  return false;
}

const std::vector<FixedSetting>& fixed_setting_defs() {
  static const char* const kPositions = "GPT-2's positions are learned absolute embeddings";
  static const char* const kGelu = "GPT-2's MLP is GELU";
  static const char* const kBiases = "GPT-2's linear layers all have biases";
  static const char* const kWandb = "Weights & Biases is not supported; --tensorboard-dir writes Megatron's scalars";
  static const std::vector<FixedSetting> defs = {
      {"position-embedding-type", false, "learned_absolute", kPositions, "absolute"},  // BigScience's spelling
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
      {"ds-sequence-parallel-size", false, "1", "no DeepSpeed-Ulysses sequence parallelism (Megatron's "
                                                "--sequence-parallel is supported)"},
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
      // BigScience's and Megatron-DeepSpeed's settings for other models, losses and optimizers.
      {"glu-activation", false, nullptr, kGelu},
      {"pad-vocab-size-to", false, nullptr, "the padding comes from --make-vocab-size-divisible-by (x "
                                            "--tensor-model-parallel-size)"},
      {"loss-on-targets-only", true, nullptr, "every target of a sample is trained on (no prefix-LM loss mask; "
                                              "--eod-mask-loss leaves out the token after each end of document)"},
      {"reweight-loss-based-on-position-frequency", true, nullptr, "every target's loss weighs the same"},
      {"use-bnb-optimizer", true, nullptr, "Adam's moments are fp32 (no 8-bit Adam)"},
      {"embedding-weights-in-fp32", true, nullptr, "the word embedding is kept in the run's dtype, as every "
                                                   "weight (with fp32 master weights)"},
      {"tokenizer-name-or-path", false, nullptr, "the tokenizers are GPT-2's BPE (--vocab-file, --merge-file), "
                                                 "BERT's WordPiece (--vocab-file) and NullTokenizer (--vocab-size)"},
      {"train-data-exact-num-epochs", false, nullptr, "the training index maps hold the epochs the run reads, as "
                                                      "Megatron's"},
      {"reset-iteration", true, nullptr, "a load resumes at the checkpoint's iteration; --finetune starts from "
                                         "iteration 0 with the weights alone"},
      {"force-ds-sequence-parallel", true, nullptr, "no DeepSpeed-Ulysses sequence parallelism (Megatron's "
                                                    "--sequence-parallel is supported)"},
      {"mlp-type", false, "standard", "GPT-2's MLP is dense (no residual mixture of experts)"},
      {"moe-expert-parallel-size", false, "1", "GPT-2 is dense (no experts to split)"},
      {"vocab-extra-ids", false, "0", "GPT-2's BPE vocabulary has no sentinel tokens"},
      {"decoder-num-layers", false, nullptr, "GPT-2 is decoder-only: its layers are --num-layers"},
      {"data-parallel-sharding-strategy", false, "no_shard", "trident shards the optimizer state and the "
                                                             "gradients with --use-distributed-optimizer or "
                                                             "--zero-stage 1 or 2, not the parameters"},
      {"yaml-cfg", false, nullptr, "Megatron's YAML file of its own configuration: give trident's flags in a "
                                   "--config YAML file"},
      {"ckpt-convert-format", false, nullptr, "trident-train does not convert checkpoints: trident-convert does"},
      {"ckpt-convert-save", false, nullptr, "trident-train does not convert checkpoints: trident-convert does"},
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
      {"decoupled-lr", "peak learning rate of the word embedding (the input layer and the LM head tied to it), on "
                       "the same schedule (Megatron-core's; default: --lr)"},
      {"decoupled-min-lr", "with --decoupled-lr: the word embedding's rate after decay (default: --min-lr)"},
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
      {"skip-train-iteration-range", "FIRST-LAST ...: BigScience's data skip: on reaching iteration FIRST, read past "
                                     "the global batches of iterations FIRST to LAST and train FIRST on the next one "
                                     "(the iteration count, schedules and consumed samples do not advance)"},
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
      {"grad-reduce-in-bf16", "with --bf16: accumulate and reduce the gradients in bf16, not fp32 (Megatron-core's: "
                              "half the gradient memory and traffic; the fp32 master weights stay; without --bf16 no "
                              "effect)", true},
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
      {"phase-transition-iterations", "\"T1,T2,...\": Megatron-core's multi-phase training: at each of these "
                                      "iterations the run saves (with --save) and exits, and each phase's run reads "
                                      "its training data (the --data-path it is given) from its first sample"},
      {"log-progress", "append each run's start and each checkpoint's throughput and FLOPs to --save's "
                       "progress.txt (Megatron's)", true},
      {"check-weight-hash-across-dp-replicas-interval", "every this many iterations, stop the run unless every "
                                                        "data-parallel replica holds the same parameters, bit for bit "
                                                        "(Megatron's)"},
      {"no-bias-gelu-fusion", "Megatron's switch off its fused bias-GELU (the tanh approximation, GPT-2's): the MLP "
                              "computes the exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as Megatron then does", true},
      {"openai-gelu", "OpenAI's tanh GELU, trident's default: with --no-bias-gelu-fusion it keeps the tanh GELU in "
                      "Megatron's legacy model (--use-legacy-models, or Megatron-DeepSpeed's --deepspeed) only, as "
                      "Megatron", true},
      {"skip-train", "no training: evaluate the loaded (or initial) model on the validation and test sets "
                     "(Megatron's)", true},
      {"eval-only", "True: BigScience's --skip-train (its argparse reads any value as true: False is refused)"},
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
      {"load-tag", "Megatron-DeepSpeed's checkpoint tag to load (global_stepN, or iter_NNNNNNN): --ckpt-step N"},
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
      {"train-weighted-split-paths", "BigScience's one training group \"NAME: W1 S1:E1 PREFIX1, W2 S2:E2 PREFIX2\": "
                                     "documents [round(S n), round(E n)) of each prefix, blended by the weights "
                                     "(instead of --data-path and the per-split paths)"},
      {"valid-weighted-split-paths", "BigScience's validation groups, each a word in --train-weighted-split-paths' "
                                     "form, each evaluated alone and reported under its NAME"},
      {"test-weighted-split-paths", "BigScience's test groups, each a word in --train-weighted-split-paths' form, "
                                    "each evaluated alone and reported under its NAME"},
      {"train-weighted-split-paths-path", "a file of --train-weighted-split-paths' group: one line \"GROUP\" ended "
                                          "by a newline"},
      {"valid-weighted-split-paths-path", "a file of --valid-weighted-split-paths' groups: one line \"GROUP1\" "
                                          "\"GROUP2\" ... ended by a newline"},
      {"test-weighted-split-paths-path", "a file of --test-weighted-split-paths' groups: one line \"GROUP1\" "
                                         "\"GROUP2\" ... ended by a newline"},
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

namespace {

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
      // BigScience's weighted split paths (its data loading mode 2) against the other ways of
      // giving data (mode 1, and Megatron's), each flag against its -path form.
      {"train-weighted-split-paths", "train-weighted-split-paths-path"},
      {"valid-weighted-split-paths", "valid-weighted-split-paths-path"},
      {"test-weighted-split-paths", "test-weighted-split-paths-path"},
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

// Every flag of `flags` against every flag of `others` (pairs, not one group: the flags of
// each list go together).
std::vector<std::vector<std::string>> pairs_across(const std::vector<std::string>& flags,
                                                   const std::vector<std::string>& others) {
  std::vector<std::vector<std::string>> pairs;
  for (const std::string& f : flags)
    for (const std::string& o : others) pairs.push_back({f, o});
  return pairs;
}

// alternative_groups, and BigScience's weighted split paths (its data loading mode 2)
// against its mode 1 (--data-path, --split) and every other source of data.
const std::vector<std::vector<std::string>>& all_alternative_groups() {
  static const std::vector<std::vector<std::string>> groups = [] {
    std::vector<std::vector<std::string>> all = alternative_groups();
    const auto weighted = pairs_across(
        {"train-weighted-split-paths", "valid-weighted-split-paths", "test-weighted-split-paths",
         "train-weighted-split-paths-path", "valid-weighted-split-paths-path", "test-weighted-split-paths-path"},
        {"data-path", "split", "train-data-path", "valid-data-path", "test-data-path", "data-args-path",
         "per-split-data-args-path", "mock-data"});
    all.insert(all.end(), weighted.begin(), weighted.end());
    return all;
  }();
  return groups;
}

}  // namespace

// The same flag, or another flag of one of its alternative groups.
bool overridden_by_command_line(const std::string& flag, const std::set<std::string>& cli_flags) {
  if (cli_flags.count(flag)) return true;
  for (const std::vector<std::string>& group : all_alternative_groups()) {
    if (std::find(group.begin(), group.end(), flag) == group.end()) continue;
    for (const std::string& other : group)
      if (cli_flags.count(other)) return true;
  }
  return false;
}

}  // namespace trident::train_flags
