#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include "core/error.h"
#include "model/gpt2.h"

namespace trident {
namespace {

ShardPlan make_plan(const ParamStore& params, Comm* dp, int zero_stage) {
  std::vector<FlatRange> buckets;
  for (const ParamGroup& g : params.groups()) buckets.push_back(FlatRange{g.begin, g.end});
  const bool shard = zero_stage > 0 && dp != nullptr;
  return ShardPlan(std::move(buckets), shard ? dp->size() : 1, shard ? dp->rank() : 0);
}

}  // namespace

AdamWOptimizer::AdamWOptimizer(Backend& backend, ParamStore& params, const AdamWConfig& cfg, Comm* dp,
                               int zero_stage)
    : be_(backend),
      params_(params),
      cfg_(cfg),
      dp_(dp),
      zero_stage_(zero_stage),
      plan_(make_plan(params, dp, zero_stage)) {
  TRIDENT_CHECK(zero_stage >= 0 && zero_stage <= 2, "zero stage");
  TRIDENT_CHECK(zero_stage == 2 || !params.layer_grads_in_slots(), "gradient slots need ZeRO-2");
  const int64_t n = plan_.shard_numel();
  if (params_.flat_params().dtype != DType::F32) master_ = be_.empty({n}, DType::F32);
  master_from_params();
  m_ = be_.zeros({n}, DType::F32);
  v_ = be_.zeros({n}, DType::F32);
  if (sharded()) {
    shard_grads_ = be_.zeros({n}, DType::F32);
    int64_t largest = 0;
    for (const FlatRange& b : plan_.buckets()) largest = std::max(largest, b.size());
    // fp16 gradients are reduced in fp32 (staging_: no overflow mid-sum; round_shard_to_fp16
    // gives zero 0's overflows back); bf16 ones (--grad-reduce-in-bf16) in bf16, as Megatron's
    // distributed optimizer reduce-scatters its bf16 gradient buffer: half the traffic.
    const DType grads = params_.flat_grads().dtype;
    const bool staged = grads == DType::F16;
    if (staged) staging_ = be_.empty({largest}, DType::F32);
    if (zero_stage == 2) chunk_ = be_.empty({largest / plan_.shards()}, grads == DType::BF16 ? grads : DType::F32);
    // zero 1 in bf16: each bucket's reduced chunk at its place in a bf16 shard, cast into the
    // fp32 one when waited for.
    if (zero_stage == 1 && grads == DType::BF16) reduced16_ = be_.empty({n}, grads);
    // One reduction in flight when the next one reuses what it reads or writes (staging_,
    // chunk_, a gradient slot); zero 1 in fp32 or bf16 reads the gradients and writes the
    // shard, which nothing else touches before reduce_gradients().
    if (staged || zero_stage == 2) max_in_flight_ = 1;
  }
  for (size_t b = 0; b < params_.groups().size(); ++b) {
    const int layer = params_.groups()[b].layer;
    if (layer < 0) continue;
    if (static_cast<size_t>(layer) >= layer_bucket_.size()) layer_bucket_.resize(layer + 1, SIZE_MAX);
    layer_bucket_[layer] = b;
  }
  reduced_.assign(plan_.buckets().size(), 0);
  param_gathers_.resize(plan_.buckets().size());
  // The forward's reading order: the embeddings (the group holding wpe: first stage only),
  // the layers, then the other non-layer groups (final LayerNorm, the last stage's tied wte).
  embedding_bucket_ = params_.has("wpe") ? params_.find("wpe").group : SIZE_MAX;
  if (embedding_bucket_ != SIZE_MAX) gather_order_.push_back(embedding_bucket_);
  for (size_t b : layer_bucket_)
    if (b != SIZE_MAX) gather_order_.push_back(b);
  for (size_t b = 0; b < params_.groups().size(); ++b)
    if (params_.groups()[b].layer < 0 && b != embedding_bucket_) gather_order_.push_back(b);
  TRIDENT_CHECK(gather_order_.size() == plan_.buckets().size(), "a transformer layer split over parameter groups");
  for (const LocalParam& p : params_.list())
    for (const ShardPiece& s : plan_.owned_pieces(FlatRange{p.offset, p.offset + p.numel()}))
      updates_.push_back(Update{s.shard_offset, s.flat_begin, s.size(), &p});
}

void AdamWOptimizer::set_sequence_parallel(Comm* tp) {
  sequence_parallel_tp_ = tp != nullptr && tp->size() > 1 ? tp : nullptr;
  tp_partial_.assign(plan_.buckets().size(), {});
  for (const LocalParam& p : params_.list())
    if (sequence_parallel_partial(p.spec)) tp_partial_.at(p.group).push_back(&p);
}

size_t AdamWOptimizer::state_bytes() const {
  size_t n = 0;
  for (const Buffer* b : {&master_, &m_, &v_, &shard_grads_, &staging_, &chunk_, &reduced16_})
    n += b->empty() ? 0 : b->t().nbytes();
  return n;
}

AdamWOptimizer::~AdamWOptimizer() {
  // Gathers may still write the parameters (--overlap-param-gather); not while unwinding,
  // on the way to ending the job, when the communicators may be gone.
  if (std::uncaught_exceptions() == 0) wait_for_all_params();
}

void AdamWOptimizer::master_from_params() {
  wait_for_all_params();  // the parameters may have been loaded: nothing may land on them
  if (master_.empty()) return;
  const Tensor& flat = params_.flat_params();
  for (size_t b = 0; b < plan_.buckets().size(); ++b) {
    const FlatRange c = plan_.owned_chunk(b);
    be_.cast(flat.flat_slice(c.begin, c.size()), master_.t().flat_slice(plan_.shard_offset(b), c.size()));
  }
}

Tensor AdamWOptimizer::state_slice(State k, const ShardPiece& s) const {
  switch (k) {
    case kMaster:
      return master_.empty() ? params_.flat_params().flat_slice(s.flat_begin, s.size())
                             : master_.t().flat_slice(s.shard_offset, s.size());
    case kExpAvg: return m_.t().flat_slice(s.shard_offset, s.size());
    case kExpAvgSq: return v_.t().flat_slice(s.shard_offset, s.size());
  }
  throw InternalError("optimizer state");
}

Tensor AdamWOptimizer::shard_grads() const { return sharded() ? shard_grads_.t() : params_.flat_grads(); }

void AdamWOptimizer::zero_grads() {
  TRIDENT_CHECK(in_flight_.empty(), "zero_grads with gradient reductions in flight");
  params_.zero_grads();
  if (sharded()) be_.fill(shard_grads_, 0.0f);
  reduced_.assign(plan_.buckets().size(), 0);
}

void AdamWOptimizer::begin_backward(bool last_micro_batch) {
  last_backward_ = last_micro_batch;
  // ZeRO-2 reduces every micro-batch: the next backward accumulates into the buckets again.
  if (zero_stage_ == 2) finish_reductions();
}

// Queues bucket b's reduction; without overlap, waits for it at once.
void AdamWOptimizer::reduce_bucket(size_t b) {
  queue_reduction(b);
  if (!overlap_grad_reduce_) finish_reductions();
}

// One bucket's data-parallel reduction, queued: all-reduce in place (zero 0), or
// reduce-scatter (in fp32 for fp32 and fp16 gradients, the fp16 ones rounded back to fp16
// once reduced: round_shard_to_fp16; in bf16 for bf16 ones) into the bucket's shard (zero 1,
// reduced once an iteration; bf16 through reduced16_) or into chunk_ (zero 2, added to the
// shard when done). Its buffers must stay persistent (gradients, staging_, chunk_,
// reduced16_, the shard): the communication stream may still use them after the compute
// stream has gone on, so a temporary from the allocator could be handed out again under it.
void AdamWOptimizer::queue_reduction(size_t b) {
  const Tensor grads = params_.group_grads(b);
  reduced_[b] = 1;
  if (sequence_parallel_tp_)  // first the sums over this rank's rows, over the TP ranks
    for (const LocalParam* p : tp_partial_[b]) sequence_parallel_tp_->allreduce(params_.grad(*p), ReduceOp::Sum);
  if (!sharded()) {
    if (dp_ != nullptr && dp_->size() > 1) in_flight_.push_back({b, dp_->allreduce_async(grads, ReduceOp::Sum)});
    return;
  }
  // staging_, chunk_ or a ZeRO-2 gradient slot is about to be written again.
  if (in_flight_.size() >= max_in_flight_) finish_reductions();
  Tensor in = grads;
  if (!staging_.empty()) {
    in = staging_.t().flat_slice(0, grads.numel());
    be_.cast(grads, in);
  }
  const int64_t chunk = grads.numel() / plan_.shards();
  const Tensor out = zero_stage_ == 2       ? chunk_.t().flat_slice(0, chunk)
                     : reduced16_.empty() ? shard_grads_.t().flat_slice(plan_.shard_offset(b), chunk)
                                          : reduced16_.t().flat_slice(plan_.shard_offset(b), chunk);
  if (plan_.shards() > 1) {
    in_flight_.push_back({b, dp_->reduce_scatter_async(in, out)});
  } else {  // one shard: no communication (and no host-only LocalComm on a device buffer)
    be_.copy(out, in.flat_slice(0, chunk));
    in_flight_.push_back({b, nullptr});
  }
}

void AdamWOptimizer::finish_reductions() {
  for (InFlight& r : in_flight_) {
    if (r.work) r.work->wait();
    if (!sharded()) continue;
    const int64_t chunk = plan_.buckets()[r.bucket].size() / plan_.shards();
    const Tensor shard = shard_grads_.t().flat_slice(plan_.shard_offset(r.bucket), chunk);
    if (zero_stage_ == 2) {
      be_.accumulate(shard, chunk_.t().flat_slice(0, chunk));
      be_.fill(params_.group_grads(r.bucket), 0.0f);  // for the next micro-batch or layer
    } else if (!reduced16_.empty()) {
      be_.cast(reduced16_.t().flat_slice(plan_.shard_offset(r.bucket), chunk), shard);
    }
  }
  in_flight_.clear();
}

void AdamWOptimizer::on_layer_gradients_ready(int layer) {
  if (zero_stage_ == 2 || last_backward_) reduce_bucket(layer_bucket_.at(layer));
}

void AdamWOptimizer::reduce_gradients() {
  for (size_t b = 0; b < plan_.buckets().size(); ++b)
    if (!reduced_[b]) reduce_bucket(b);
  finish_reductions();
  if (sharded() && params_.flat_grads().dtype == DType::F16) round_shard_to_fp16();
}

// fp16 gradients without --accumulate-allreduce-grads-in-fp32: zero 0 (as one process)
// all-reduces them as fp16 numbers, so a sum past 65504 is inf and the step is skipped;
// ZeRO reduces them in fp32 (staging_), where it stays finite. Rounding the reduced shard to
// fp16 once gives it zero 0's overflows (and precision): the same steps skip in every layout
// (Megatron's distributed optimizer reduce-scatters such gradients in fp16). The model's
// fp16 gradients, reduced and not read again until the next zero_grads, hold the fp16 copy.
void AdamWOptimizer::round_shard_to_fp16() {
  const Tensor shard = shard_grads_.t(), scratch = params_.flat_grads();
  TRIDENT_CHECK(scratch.numel() >= shard.numel(), "the fp16 gradients are smaller than their shard");
  const Tensor half = scratch.flat_slice(0, shard.numel());
  be_.cast(shard, half);
  be_.cast(half, shard);
}

// The counted pieces of `state`, a tensor laid out as the shard (pieces at their shard
// offsets) or, with `flat`, as the flat parameters (pieces at their flat offsets), for one
// multi-tensor reduction (one synchronisation); pieces that follow each other merge into
// one range.
std::vector<Tensor> AdamWOptimizer::owned_ranges(const Tensor& state, bool flat,
                                                 const std::function<bool(const ParamSpec&)>& counted) const {
  std::vector<Tensor> ranges;
  int64_t begin = 0, end = 0;
  for (const Update& u : updates_) {
    if (!counted(u.param->spec)) continue;
    const int64_t at = flat ? u.flat_begin : u.shard_offset;
    if (end > begin && at == end) {
      end += u.size;
      continue;
    }
    if (end > begin) ranges.push_back(state.flat_slice(begin, end - begin));
    begin = at;
    end = begin + u.size;
  }
  if (end > begin) ranges.push_back(state.flat_slice(begin, end - begin));
  return ranges;
}

double AdamWOptimizer::owned_grad_sum_squares(const std::function<bool(const ParamSpec&)>& counted) {
  return be_.sum_squares_multi(owned_ranges(shard_grads(), false, counted));  // zero 0: the flat gradients, at shard offsets
}

int64_t AdamWOptimizer::owned_grad_zeros(const std::function<bool(const ParamSpec&)>& counted) {
  return be_.count_zeros_multi(owned_ranges(shard_grads(), false, counted));
}

double AdamWOptimizer::owned_param_sum_squares(const std::function<bool(const ParamSpec&)>& counted) {
  return be_.sum_squares_multi(owned_weights(counted));
}

std::vector<Tensor> AdamWOptimizer::owned_weights(const std::function<bool(const ParamSpec&)>& counted) {
  if (!master_.empty()) return owned_ranges(master_.t(), false, counted);
  wait_for_all_params();  // the updated parameters themselves, which a gather may still write
  return owned_ranges(params_.flat_params(), true, counted);
}

AdamWOptimizer::StateStats AdamWOptimizer::owned_state_stats(const std::function<bool(const ParamSpec&)>& counted) {
  return {be_.magnitude_stats_multi(owned_ranges(m_.t(), false, counted)),
          be_.magnitude_stats_multi(owned_ranges(v_.t(), false, counted)),
          be_.magnitude_stats_multi(owned_weights(counted))};
}

void AdamWOptimizer::step(double lr, double grad_norm, float grad_scale) {
  wait_for_all_params();  // a step without a forward since the last one (benchmarks)
  float scale = grad_scale;
  // Megatron: clip_coeff = max_norm / (norm + 1e-6), applied when below 1.
  if (cfg_.clip_grad > 0) {
    const double coeff = cfg_.clip_grad / (grad_norm + 1e-6);
    if (coeff < 1.0) scale = static_cast<float>(grad_scale * coeff);
  }
  ++step_;
  const Tensor grads = shard_grads();
  // One adamw_multi call per learning rate: the word embedding's may be its own.
  std::vector<AdamWArgs> batch, embedding;
  batch.reserve(updates_.size());
  for (const Update& u : updates_) {
    const bool own_lr = embedding_lr_ && u.param->spec.name == "wte";
    AdamWArgs a;
    a.master = master_.empty() ? params_.flat_params().flat_slice(u.flat_begin, u.size)
                               : master_.t().flat_slice(u.shard_offset, u.size);
    a.grad = grads.flat_slice(u.shard_offset, u.size);
    a.m = m_.t().flat_slice(u.shard_offset, u.size);
    a.v = v_.t().flat_slice(u.shard_offset, u.size);
    if (!master_.empty()) a.model_param = params_.flat_params().flat_slice(u.flat_begin, u.size);
    a.lr = static_cast<float>(own_lr ? *embedding_lr_ : lr);
    a.beta1 = cfg_.beta1;
    a.beta2 = cfg_.beta2;
    a.eps = cfg_.eps;
    a.weight_decay = u.param->spec.weight_decay ? cfg_.weight_decay : 0.0f;
    a.grad_scale = scale;
    a.step = step_;
    (own_lr ? embedding : batch).push_back(a);
  }
  {
    const Timers::Scope timed(timers_, TimerId::OptimizerInnerStep);
    for (const std::vector<AdamWArgs>* list : {&batch, &embedding})
      if (!list->empty()) be_.adamw_multi(*list);
  }
  if (plan_.shards() == 1) return;
  const Timers::Scope timed(timers_, TimerId::ParamsAllGather);  // with the overlap: the queueing
  for (size_t b : gather_order_) {
    const FlatRange r = plan_.buckets()[b], c = plan_.owned_chunk(b);
    const Tensor mine = params_.flat_params().flat_slice(c.begin, c.size());
    const Tensor all = params_.flat_params().flat_slice(r.begin, r.size());
    if (overlap_param_gather_)
      param_gathers_[b] = dp_->allgather_async(mine, all);
    else
      dp_->allgather(mine, all);
  }
}

void AdamWOptimizer::wait_for_params(int layer) {
  auto wait = [this](size_t b) {
    if (param_gathers_[b]) std::exchange(param_gathers_[b], nullptr)->wait();
  };
  if (layer >= 0) {
    if (static_cast<size_t>(layer) < layer_bucket_.size() && layer_bucket_[layer] != SIZE_MAX)
      wait(layer_bucket_[layer]);
  } else if (layer == Gpt2Model::kParamsBeforeLayers) {
    if (embedding_bucket_ != SIZE_MAX) wait(embedding_bucket_);
  } else {
    for (size_t b = 0; b < params_.groups().size(); ++b)
      if (params_.groups()[b].layer < 0) wait(b);
  }
}

void AdamWOptimizer::wait_for_all_params() {
  for (auto& g : param_gathers_)
    if (g) std::exchange(g, nullptr)->wait();
}

}  // namespace trident
