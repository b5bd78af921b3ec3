// AdamW over a ParamStore, with the data-parallel gradient reduction and ZeRO sharding
// that decide which part of the state each rank keeps.
//
//   zero 0: gradients are all-reduced over DP; every rank keeps the whole optimizer state.
//   zero 1: each rank keeps fp32 master weights (16-bit runs; fp32 runs update their
//           parameters in place) and Adam moments for its shard only
//           (parallel/zero_shard.h); each bucket's gradients are reduce-scattered into an
//           fp32 shard gradient, the shard is updated, and the updated parameters are
//           all-gathered.
//   zero 2: as 1, but a layer's bucket is reduce-scattered as soon as backward has
//           produced it, every micro-batch, and zeroed again: accumulation happens in the
//           fp32 shard, and layer gradients live in two rotating slots instead of one
//           buffer per layer (ParamStore), so the full-size gradient buffer is gone.
// With zero 0 and 1, each layer's bucket is all-reduced or reduce-scattered as soon as the
// last micro-batch's backward has produced it (Megatron's overlap_grad_reduce). The
// reductions are asynchronous (Comm::allreduce_async; on NcclComm they run on its
// communication stream while backward goes on) and are waited for in reduce_gradients(),
// before anything reads the reduced gradients. ZeRO-0 (any dtype) and ZeRO-1 with fp32
// or bf16 gradients keep every bucket in flight until then. When a reduction's buffers are
// reused during the iteration (ZeRO-1's fp32 staging of fp16 gradients, ZeRO-2's chunk and
// gradient slots) at most one is in flight: queuing the next layer's reduction, or starting
// the next micro-batch's backward (ZeRO-2), first waits for the previous one, so a bucket's
// reduction overlaps the next layer's backward (a micro-batch's last one: the pipeline's
// forwards and transfers until the next backward). set_overlap_grad_reduce(false) waits
// for each reduction as soon as it is queued. TRIDENT_CHECK_ASYNC_COMM=1 checks the waits
// on the CPU (parallel/deferred_async_comm.h).
// Weight decay applies to 2-D weights only; gradient clipping by the global norm and the
// loss-scale unscaling are folded into the update's gradient factor.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/backend.h"
#include "model/param_store.h"
#include "parallel/comm.h"
#include "parallel/zero_shard.h"
#include "train/timers.h"

namespace trident {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  float clip_grad = 1.0f;  // 0 disables clipping
};

class AdamWOptimizer {
 public:
  // `dp` may be null for one process. The ParamStore's groups are the buckets; with
  // zero_stage > 0 their sizes must be multiples of dp->size().
  AdamWOptimizer(Backend& backend, ParamStore& params, const AdamWConfig& cfg, Comm* dp = nullptr,
                 int zero_stage = 0);
  ~AdamWOptimizer();
  AdamWOptimizer(const AdamWOptimizer&) = delete;
  AdamWOptimizer& operator=(const AdamWOptimizer&) = delete;

  // Zeroes the model's gradients and the shard gradients (start of an iteration).
  void zero_grads();
  // Says whether the backward about to run is the iteration's last micro-batch.
  void begin_backward(bool last_micro_batch);
  // The gradients of `layer` for the current micro-batch are complete: reduce its bucket
  // now if this is the last micro-batch (zero 0, 1) or always (zero 2).
  void on_layer_gradients_ready(int layer);
  // After the last micro-batch: reduces the buckets not reduced during backward (the
  // embeddings and final LayerNorm, after the embedding group's all-reduce) and waits for
  // every reduction.
  void reduce_gradients();
  // Sum of squares of the reduced gradients this rank owns, over the parameters for which
  // `counted` is true (the caller sums it over the ranks that own the other parts).
  double owned_grad_sum_squares(const std::function<bool(const ParamSpec&)>& counted);
  // The same over the parameters this rank updates: the fp32 master weights of its pieces (the
  // parameters themselves in fp32 runs; Megatron's --log-params-norm reads the same).
  double owned_param_sum_squares(const std::function<bool(const ParamSpec&)>& counted);
  // The zeros among the same reduced gradients (Megatron's --log-num-zeros-in-grad).
  int64_t owned_grad_zeros(const std::function<bool(const ParamSpec&)>& counted);
  // Magnitude statistics of the state this rank updates, over the parameters for which
  // `counted` is true: the two Adam moments and the weights that owned_param_sum_squares
  // reads (Megatron-DeepSpeed's --log-optimizer-states-to-tensorboard).
  struct StateStats {
    MagnitudeStats exp_avg, exp_avg_sq, weights;
  };
  StateStats owned_state_stats(const std::function<bool(const ParamSpec&)>& counted);
  // One update with learning rate `lr`. `grad_norm` is the global norm of the (unscaled)
  // gradients; it sets the clipping factor. `grad_scale` multiplies the gradients first
  // (loss-scale unscaling). With zero > 0 the updated parameters are all-gathered.
  void step(double lr, double grad_norm, float grad_scale = 1.0f);
  int64_t steps_taken() const { return step_; }
  // --overlap-param-gather (ZeRO): step() only queues the updated parameters' all-gathers,
  // in the order the forward reads them (the embeddings, the layers, the final LayerNorm
  // and tied LM head); the forward waits for each bucket just before reading it
  // (wait_for_params with a layer or Gpt2Model::kParamsBeforeLayers / kParamsAfterLayers),
  // and anything else that reads or writes the parameters (a checkpoint save or load, the
  // end of training, the next step) calls wait_for_all_params() first.
  void set_overlap_param_gather(bool on) { overlap_param_gather_ = on; }
  // --timing-log-level: step() times optimizer-inner-step and params-all-gather.
  void set_timers(Timers* timers) { timers_ = timers; }
  void set_overlap_grad_reduce(bool on) { overlap_grad_reduce_ = on; }
  void wait_for_params(int layer);
  void wait_for_all_params();
  // The weight decay the next steps apply to the parameters that take it (the trainer's
  // weight-decay schedule sets it before every step).
  void set_weight_decay(float weight_decay) { cfg_.weight_decay = weight_decay; }
  // The rate the next steps apply to the word embedding (wte: the input layer and the LM head
  // tied to it) instead of step()'s: Megatron-core's --decoupled-lr group. None: step()'s.
  void set_embedding_lr(std::optional<double> lr) { embedding_lr_ = lr; }

  // Checkpoint access to the state of one owned piece: 0 the fp32 master weights (the
  // model's parameters themselves in fp32 runs), 1 and 2 the Adam moments.
  enum State { kMaster = 0, kExpAvg = 1, kExpAvgSq = 2 };
  Tensor state_slice(State k, const ShardPiece& piece) const;
  bool master_is_params() const { return master_.empty(); }
  void set_steps_taken(int64_t steps) { step_ = steps; }
  // Re-derives the master weights from the model's parameters (after loading parameters
  // without optimizer state).
  void master_from_params();
  const ShardPlan& plan() const { return plan_; }
  bool sharded() const { return zero_stage_ > 0; }
  // Sequence parallelism: the gradients of sequence_parallel_partial parameters are partial
  // sums over the TP ranks of `tp`; each bucket's reduction sums them over `tp` first.
  void set_sequence_parallel(Comm* tp);
  // Device bytes of the optimizer's own state: fp32 master weights (when separate), Adam
  // moments, and with ZeRO the fp32 gradient shard, one bucket's fp32 staging (fp16
  // gradients), with ZeRO-2 one bucket's reduced chunk, with ZeRO-1 and bf16 gradients the
  // reduced shard in bf16.
  size_t state_bytes() const;

 private:
  std::vector<Tensor> owned_ranges(const Tensor& state, bool flat,
                                   const std::function<bool(const ParamSpec&)>& counted) const;
  // owned_ranges of the weights this rank updates (owned_param_sum_squares').
  std::vector<Tensor> owned_weights(const std::function<bool(const ParamSpec&)>& counted);
  void reduce_bucket(size_t bucket);
  void queue_reduction(size_t bucket);
  // Waits for the reductions in flight (ZeRO-2: then adds each chunk to the shard and
  // zeroes the bucket).
  void finish_reductions();
  void round_shard_to_fp16();
  Tensor shard_grads() const;

  Backend& be_;
  ParamStore& params_;
  AdamWConfig cfg_;
  Comm* dp_;
  int zero_stage_;
  ShardPlan plan_;
  std::vector<size_t> layer_bucket_;  // bucket index of each layer (or -1)
  std::vector<char> reduced_;         // bucket reduced during this iteration's backward
  Comm* sequence_parallel_tp_ = nullptr;
  std::vector<std::vector<const LocalParam*>> tp_partial_;  // per bucket (sequence parallelism)
  bool last_backward_ = true;
  // Compact shard state (zero 0: the flat layout). master_ is empty when the fp32 model
  // parameters themselves are the master weights.
  Buffer master_, m_, v_, shard_grads_;
  // zero > 0 with fp16 gradients: one bucket's fp32 gradients; zero 2: its reduced chunk
  // (bf16 with bf16 gradients); zero 1 with bf16 gradients: the reduced shard in bf16.
  Buffer staging_, chunk_, reduced16_;
  struct InFlight {
    size_t bucket;
    std::unique_ptr<CommWork> work;  // null: done (one shard)
  };
  std::vector<InFlight> in_flight_;  // queued reductions, oldest first
  size_t max_in_flight_ = SIZE_MAX;
  bool overlap_param_gather_ = false, overlap_grad_reduce_ = true;
  std::optional<double> embedding_lr_;
  Timers* timers_ = nullptr;
  std::vector<size_t> gather_order_;                    // buckets in the order the forward reads them
  size_t embedding_bucket_ = SIZE_MAX;                  // the group of wpe (first stage)
  std::vector<std::unique_ptr<CommWork>> param_gathers_;  // per bucket; null once waited for
  struct Update {
    int64_t shard_offset, flat_begin, size;
    const LocalParam* param;
  };
  std::vector<Update> updates_;  // owned pieces of every parameter, computed once
  int64_t step_ = 0;
};

}  // namespace trident
