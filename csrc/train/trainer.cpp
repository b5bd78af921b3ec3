// Trainer: its construction (the model chunks of this rank's stage, the optimizer, the
// schedules), the micro-batches it loads, the pipeline steps of a training iteration and of an
// evaluation, the norms and loss sums over the model's ranks, and the run's bounds (time limit,
// skipped iterations, the data the run still needs). train()'s loop is in trainer_loop.cpp.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <ostream>
#include <system_error>

#include "core/error.h"
#include "core/saturating.h"
#include "core/stop_signals.h"
#include "data/documents.h"
#include "parallel/gather_words.h"
#include "train/pending_save.h"
#include "train/tensorboard.h"
#include "train/training_phases.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

// Megatron's timer of a pipeline exchange, by the transfers it makes.
TimerId exchange_timer(const std::vector<PipeTransfer>& transfers) {
  bool send_forward = false, recv_forward = false, send_backward = false, recv_backward = false;
  for (const PipeTransfer& t : transfers) {
    send_forward |= t.kind == TransferKind::SendForward;
    recv_forward |= t.kind == TransferKind::RecvForward;
    send_backward |= t.kind == TransferKind::SendBackward;
    recv_backward |= t.kind == TransferKind::RecvBackward;
  }
  const int kinds = send_forward + recv_forward + send_backward + recv_backward;
  if (kinds == 1)
    return send_forward ? TimerId::ForwardSend
           : recv_forward ? TimerId::ForwardRecv
           : send_backward ? TimerId::BackwardSend
                           : TimerId::BackwardRecv;
  if (kinds == 2 && send_forward && recv_forward) return TimerId::ForwardSendForwardRecv;
  if (kinds == 2 && send_forward && recv_backward) return TimerId::ForwardSendBackwardRecv;
  if (kinds == 2 && send_backward && recv_forward) return TimerId::BackwardSendForwardRecv;
  if (kinds == 2 && send_backward && recv_backward) return TimerId::BackwardSendBackwardRecv;
  return TimerId::ForwardBackwardSendForwardBackwardRecv;
}

// --exit-duration-in-mins counts from the start of the process, as Megatron counts from the
// start of its program: setting up, loading a checkpoint and building the data count too.
const auto process_start = std::chrono::steady_clock::now();

std::ostream& null_stream() {
  static std::ostream s(nullptr);
  return s;
}

void add(LossStats& total, const LossStats& s) {
  total.loss_sum += s.loss_sum;
  total.correct += s.correct;
  total.tokens += s.tokens;
}

// This rank's model chunks (one without an interleaved pipeline): their layers, and which
// holds the embeddings (the model's first chunk) and the final LayerNorm and LM head (its last).
std::vector<StageLayout> stage_chunk_layouts(const TrainOptions& opt, ParallelContext& par) {
  const ProcessGrid& grid = par.grid;
  const GridShape& g = grid.shape;
  const int chunks = opt.virtual_pipeline_chunks();
  StageLayout base;
  base.tp = g.tp;
  base.tp_rank = grid.tp_rank;
  base.tp_comm = par.tp.get();
  base.zero_shards = opt.zero_stage > 0 ? g.dp : 1;
  base.fp32_grads = opt.accumulate_allreduce_grads_in_fp32;
  base.layer_grads_in_slots = opt.zero_stage == 2;
  base.sequence_parallel = opt.sequence_parallel && g.tp > 1;
  base.reset_position_ids = opt.reset_position_ids;
  base.reset_attention_mask = opt.reset_attention_mask;
  base.forward_only = opt.skip_train;
  if (opt.recompute_granularity == "full") {
    base.recompute.method = opt.recompute_method == "block" ? RecomputePlan::Method::kBlock
                                                            : RecomputePlan::Method::kUniform;
    base.recompute.num_layers = opt.recompute_num_layers;
  }
  std::vector<StageLayout> layouts;
  for (const LayerRange& r : pipeline_chunk_layers(opt.pipeline_split(), grid.pp_rank)) {
    StageLayout l = base;
    l.layer_begin = r.begin;
    l.layer_end = r.end;
    l.first_stage = grid.first_stage() && layouts.empty();
    l.last_stage = grid.last_stage() && static_cast<int>(layouts.size()) == chunks - 1;
    layouts.push_back(l);
  }
  return layouts;
}

}  // namespace

Trainer::Trainer(const TrainOptions& opt, Backend& backend, std::unique_ptr<SampleSource> train_data,
                 std::ostream& log, ParallelContext* parallel)
    : opt_(opt),
      be_(backend),
      data_(std::move(train_data)),
      log_(log),
      par_(parallel),
      timers_(static_cast<int>(opt.timing_log_level), &backend) {
  if (!par_) {
    own_parallel_ = make_parallel_context(1, 1);
    par_ = own_parallel_.get();
  }
  out_ = par_->world_rank() == 0 ? &log_ : &null_stream();
  resolve_schedule(opt_);
  const GridShape& g = par_->grid.shape;
  if (opt_.global_batch_size % (opt_.micro_batch_size * g.dp) != 0)
    throw ConfigError(global_batch_flag(opt_) + " (" + std::to_string(opt_.global_batch_size) +
                      ") must be a multiple of --micro-batch-size (" + std::to_string(opt_.micro_batch_size) +
                      ") x data-parallel size (" + std::to_string(g.dp) + ")");
  batch_schedule_ = make_batch_schedule(opt_);
  const int64_t per_micro_step = static_cast<int64_t>(opt_.micro_batch_size) * g.dp;
  const BatchSchedule& bs = batch_schedule_;
  if (bs.varies() && bs.steps.empty() && (bs.start % per_micro_step != 0 || bs.increment % per_micro_step != 0))
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(bs.start) + ") and INCR (" +
                      std::to_string(bs.increment) + ") must be multiples of --micro-batch-size (" +
                      std::to_string(opt_.micro_batch_size) + ") x data-parallel size (" + std::to_string(g.dp) + ")");
  // From the start; with --phase-transition-iterations from the checkpoint the phase's data was
  // built for (its samples before the phase are not there), and with skip ranges from the
  // checkpoint too (the ranges it applied, or that the run resumes past, read nothing more).
  applied_skip_ranges_ = opt_.start_applied_skip_ranges;
  range_skipped_samples_ = opt_.start_range_skipped_samples;
  if (opt_.phase_transition_iterations.empty() && opt_.skip_train_iteration_ranges.empty() &&
      range_skipped_samples_ == 0)
    check_data_covers_run(0, 0, 0);
  else
    check_data_covers_run(opt_.start_iteration, opt_.start_consumed_samples, 0, range_skipped_samples_);
  check_profile_ranks();
  const ProcessGrid& grid = par_->grid;
  const int chunks = opt_.virtual_pipeline_chunks();
  full_micro_batches_ = opt_.global_batch_size / (opt_.micro_batch_size * g.dp);
  // The micro-batch counts of the run: the full batch's, and a ramp-up's or the steps' smaller
  // ones. A step this layout cannot run is left out: a run resumed past it with more ranks
  // never takes it (train() checks the steps still to come).
  std::vector<int> micro_batch_counts = {full_micro_batches_};
  for (int64_t b : bs.batches_from(0))
    if (b != bs.global && (bs.steps.empty() || batch_fits_layout(b).empty()))
      micro_batch_counts.push_back(static_cast<int>(b / per_micro_step));
  if (chunks > 1)
    for (int m : micro_batch_counts)
      if (m % g.pp != 0)
        throw ConfigError("the interleaved pipeline schedule (" + std::to_string(chunks) +
                          " model chunks per stage) needs the micro-batches of every iteration to be a multiple of "
                          "--pipeline-model-parallel-size (" + std::to_string(g.pp) + "): a global batch of " +
                          std::to_string(m * per_micro_step) +
                          " (" + (m == full_micro_batches_ ? global_batch_flag(opt_) : "--rampup-batch-size") + ")" +
                          " / (--micro-batch-size " + std::to_string(opt_.micro_batch_size) + " x data-parallel size " +
                          std::to_string(g.dp) + ") = " + std::to_string(m));
  const std::vector<StageLayout> layouts = stage_chunk_layouts(opt_, *par_);
  // Activation slots for every batch size of the run and for evaluation.
  activation_slots_.assign(chunks, 1);
  auto need_slots = [&](const std::vector<PipeStep>& steps) {
    const std::vector<int> n = pipeline_activation_slots(steps, chunks);
    for (int c = 0; c < chunks; ++c) activation_slots_[c] = std::max(activation_slots_[c], n[c]);
  };
  for (int m : micro_batch_counts) need_slots(interleaved_schedule(g.pp, grid.pp_rank, chunks, m));
  evaluation_steps_ = forward_only_schedule(g.pp, grid.pp_rank, chunks, full_micro_batches_);
  need_slots(evaluation_steps_);
  set_micro_batches(full_micro_batches_);
  // Validates the model shape (heads and vocabulary against tp).
  std::shared_ptr<ParamStore> params = make_stage_params(opt_.model, be_, layouts);
  for (int c = 0; c < chunks; ++c)
    chunks_.push_back(std::make_unique<Gpt2Model>(opt_.model, be_, layouts[c], opt_.micro_batch_size,
                                                  activation_slots_[c], params, c > 0 ? chunks_[0].get() : nullptr));
  set_dropout_seed(opt_.seed);
  if (opt_.recompute_granularity == "selective")
    *out_ << "trident: --recompute-granularity selective: the fused attention keeps no attention probabilities "
             "and recomputes them in its backward already; nothing else is recomputed"
          << std::endl;
  params->init(opt_.seed);
  AdamWConfig ac;
  ac.beta1 = opt_.adam_beta1;
  ac.beta2 = opt_.adam_beta2;
  ac.eps = opt_.adam_eps;
  ac.weight_decay = opt_.weight_decay;
  ac.clip_grad = opt_.clip_grad;
  optimizer_ = std::make_unique<AdamWOptimizer>(be_, *params, ac, par_->dp.get(), opt_.zero_stage);
  optimizer_->set_timers(&timers_);
  optimizer_->set_overlap_param_gather(opt_.overlap_param_gather);
  optimizer_->set_overlap_grad_reduce(opt_.overlap_grad_reduce);
  for (auto& chunk : chunks_) {
    chunk->set_layer_gradients_ready([this](int layer) { optimizer_->on_layer_gradients_ready(layer); });
    chunk->set_params_needed([this](int layer) { optimizer_->wait_for_params(layer); });
  }
  if (layouts.front().sequence_parallel) optimizer_->set_sequence_parallel(par_->tp.get());
  schedule_ = make_lr_schedule(opt_);
  scheduler_ = schedule_.step(LrPosition{}, 0, 0);  // Megatron's step(0) when the scheduler is made
  wd_schedule_ = make_weight_decay_schedule(opt_);
  scaler_ = LossScaler(make_loss_scaler_config(opt_));
  // Rank 0 writes the events; a directory it cannot create stops every rank.
  tensorboard_tags_ = parse_tensorboard_tags(opt_.tensorboard_tags, "--tensorboard-tags");
  if (!opt_.tensorboard_dir.empty())
    run_on_rank0_for_all(*par_, [&] {
      tensorboard_ = std::make_unique<TensorBoardWriter>(opt_.tensorboard_dir,
                                                         static_cast<size_t>(opt_.tensorboard_queue_size));
    });
  const int T = opt_.model.seq_length;
  sample_.resize(T + 1);
  tokens_.resize(static_cast<size_t>(opt_.micro_batch_size) * T);
  targets_.resize(tokens_.size());
  if (opt_.reset_position_ids) positions_.resize(tokens_.size());
  if (opt_.reset_position_ids || opt_.reset_attention_mask) document_starts_.resize(tokens_.size());
}

Trainer::~Trainer() {
  // Unwinding for an error: the process is about to end (and abort the job), which must wait
  // neither for a checkpoint's removal (what is left is a *.del-* folder) nor for an
  // --async-save writer still in flight (a slow or hung disk): waiting would keep this rank
  // from reporting its error while the others' collectives time out and name it as stuck.
  // The writer keeps its PendingSave (leaked) and the snapshot (SnapshotArena keeps its
  // memory while unwinding); its uncommitted temporary folder is a dead writer's to the next
  // save.
  if (std::uncaught_exceptions() > 0) {
    if (retirement_.joinable()) retirement_.detach();
    if (pending_save_ && pending_save_->writer.joinable()) {
      pending_save_->writer.detach();
      (void)pending_save_.release();
    }
  }
  join_retirement();
}

// Megatron's loss_mask with --eod-mask-loss: no loss where the input token ends a document
// (the first token of the next one is not predicted from the last).
int32_t Trainer::masked_after() const { return opt_.eod_mask_loss ? opt_.eod_token : -1; }

int64_t Trainer::load_micro_batch(const SampleSource& data, uint64_t first_sample) {
  const int T = opt_.model.seq_length;
  const int32_t masked = masked_after();
  int64_t kept = 0;
  for (int b = 0; b < opt_.micro_batch_size; ++b) {
    data.get(first_sample + b, sample_.data());
    for (int t = 0; t < T; ++t) {
      tokens_[b * T + t] = sample_[t];
      targets_[b * T + t] = sample_[t] == masked ? -1 : sample_[t + 1];
      kept += targets_[b * T + t] >= 0;
    }
    if (document_starts_.empty()) continue;
    int32_t* starts = document_starts_.data() + static_cast<ptrdiff_t>(b) * T;
    document_starts(sample_.data(), T, opt_.eod_token, starts);
    if (!positions_.empty())
      for (int t = 0; t < T; ++t) positions_[b * T + t] = t - starts[t];
  }
  return kept;
}

int64_t Trainer::kept_targets(const SampleSource& data, uint64_t first_sample, uint64_t samples) {
  const int T = opt_.model.seq_length;
  const int32_t masked = masked_after();
  int64_t kept = 0;
  for (uint64_t i = 0; i < samples; ++i) {
    data.get(first_sample + i, sample_.data());
    kept += T - std::count(sample_.begin(), sample_.begin() + T, masked);
  }
  return kept;
}

// Whole-model statistics count each parameter once: TP-sharded tensors on every TP rank
// (their slices), TP-replicated ones on TP rank 0 only, the tied word embedding on the
// first stage only, and with ZeRO each DP rank its shard. `counted` picks this rank's
// parameters; sum_over_model adds the ranks' parts (on every rank).
bool Trainer::counted_here(const ParamSpec& s) const {
  const ProcessGrid& grid = par_->grid;
  return (s.shard != ShardRule::Replicated || grid.tp_rank == 0) && (s.name != "wte" || grid.first_stage());
}

void Trainer::sum_over_model(const Tensor& host_values, ReduceOp op) {
  if (optimizer_->sharded()) par_->dp->allreduce(host_values, op);
  par_->tp->allreduce(host_values, op);
  par_->pp->allreduce(host_values, op);
}

// Squared norm over the whole model of the gradients (or the parameters).
double Trainer::global_norm_sq(bool of_params) {
  const auto counted = [this](const ParamSpec& s) { return counted_here(s); };
  std::vector<float> v = {static_cast<float>(of_params ? optimizer_->owned_param_sum_squares(counted)
                                                       : optimizer_->owned_grad_sum_squares(counted))};
  sum_over_model(Tensor(v.data(), Shape{1}, DType::F32, Device::Cpu));
  return v[0];
}

// The loss statistics live on the last stage: sum them over DP there, then give every
// stage the result so all ranks take the same decisions (skip on NaN, logging).
// In double, added in rank order (gathered as raw words: the communicators carry no double):
// a float sum miscounts past 2^24 tokens (an evaluation of a corpus's 17M tokens was one short).
void Trainer::reduce_loss_stats(LossStats& s) {
  double v[3] = {s.loss_sum, s.correct, s.tokens};
  if (par_->grid.last_stage()) {
    const std::vector<double> all = gather_words(*par_->dp, std::vector<double>(v, v + 3));
    for (int k = 0; k < 3; ++k) {
      v[k] = 0;
      for (size_t r = 0; 3 * r < all.size(); ++r) v[k] += all[3 * r + static_cast<size_t>(k)];
    }
  }
  constexpr int64_t kWords = 3 * sizeof(double) / sizeof(int32_t);
  par_->pp->broadcast(Tensor(v, Shape{kWords}, DType::I32, Device::Cpu), par_->grid.shape.pp - 1);
  s.loss_sum = v[0];
  s.correct = v[1];
  s.tokens = v[2];
}

// Runs `steps` (this stage's training schedule, or evaluation_steps_) over one global batch
// of `micro_batches` micro-batches from sample `first_sample` of `data`.
LossStats Trainer::run_steps(const std::vector<PipeStep>& steps, int micro_batches, const SampleSource& data,
                             uint64_t first_sample, bool training, float grad_scale) {
  const int B = opt_.micro_batch_size;
  const int dp = par_->grid.shape.dp, dp_rank = par_->grid.dp_rank;
  const int P = par_->grid.shape.pp, stage = par_->grid.pp_rank;
  // With model chunks the stages form a ring (the last stage feeds the first's next chunk).
  const int prev = (stage + P - 1) % P, next = (stage + 1) % P;
  // Activations and gradients keep apart even when both neighbours are one rank (P = 2).
  enum Tag { kActivations = 0, kGradients = 1 };
  auto slot = [&](int chunk, int mb) { return mb % activation_slots_[chunk]; };
  LossStats total;
  std::vector<P2pTransfer> transfers;
  Timers* timers = training ? &timers_ : nullptr;  // an evaluation's steps are not timed
  for (const PipeStep& st : steps) {
    Gpt2Model& m = *chunks_[st.chunk];
    switch (st.op) {
      case PipeOp::Forward: {
        const Timers::Scope timed(timers, TimerId::ForwardCompute);
        // Megatron's sampler: DP rank r takes slice [r B, (r + 1) B) of each B x dp block.
        const uint64_t first = first_sample + (static_cast<uint64_t>(st.micro_batch) * dp + dp_rank) * B;
        float scale = grad_scale;
        // Every stage's attention needs the documents with --reset-attention-mask.
        if (m.layout().first_stage || m.layout().last_stage || opt_.reset_attention_mask) {
          const Timers::Scope batch(timers, TimerId::BatchGenerator);
          const int64_t kept = load_micro_batch(data, first);
          // With masked targets each micro-batch's loss is the mean over those it keeps, as
          // Megatron's (grad_scale is for the mean over all B T); one that keeps none adds nothing.
          // --calculate-per-token-loss's grad_scale is for the global batch's kept targets already.
          const int64_t all = static_cast<int64_t>(B) * opt_.model.seq_length;
          if (opt_.eod_mask_loss && !opt_.calculate_per_token_loss && kept != all)
            scale = kept > 0 ? static_cast<float>(static_cast<double>(grad_scale) * all / kept) : 0.0f;
        }
        MicroBatch mb{tokens_.data(), targets_.data(), first};
        if (opt_.reset_position_ids) mb.positions = positions_.data();
        if (opt_.reset_attention_mask) mb.document_starts = document_starts_.data();
        m.forward(slot(st.chunk, st.micro_batch), mb, training, scale);
        if (m.layout().last_stage) add(total, m.loss_stats());
        break;
      }
      case PipeOp::Backward: {
        const Timers::Scope timed(timers, TimerId::BackwardCompute);
        // A chunk's backwards run in micro-batch order: its last one completes its gradients.
        optimizer_->begin_backward(st.micro_batch == micro_batches - 1);
        m.backward(slot(st.chunk, st.micro_batch));
        break;
      }
      case PipeOp::Exchange: {
        const Timers::Scope timed(timers, exchange_timer(st.transfers));
        transfers.clear();
        for (const PipeTransfer& t : st.transfers) {
          const Gpt2Model& c = *chunks_[t.chunk];
          const int s = slot(t.chunk, t.micro_batch);
          switch (t.kind) {
            case TransferKind::SendForward: transfers.push_back({true, c.stage_output(s), next, kActivations}); break;
            case TransferKind::RecvForward: transfers.push_back({false, c.stage_input(s), prev, kActivations}); break;
            case TransferKind::SendBackward: transfers.push_back({true, c.input_grad(), prev, kGradients}); break;
            case TransferKind::RecvBackward: transfers.push_back({false, c.output_grad(), next, kGradients}); break;
          }
        }
        par_->pp->exchange(transfers);
        break;
      }
    }
  }
  return total;
}

EvalResult Trainer::evaluate(const SampleSource& data, uint64_t first_sample, int64_t iterations) {
  const uint64_t needed = first_sample + static_cast<uint64_t>(iterations) * opt_.global_batch_size;
  if (data.size() < needed)
    throw ConfigError("--eval-iters: the evaluation split has " + std::to_string(data.size()) +
                      " samples, evaluation needs " + std::to_string(needed));
  LossStats total;
  EvalResult r;
  for (int64_t i = 0; i < iterations; ++i) {
    add(total, run_steps(evaluation_steps_, full_micro_batches_, data,
                         first_sample + static_cast<uint64_t>(i) * opt_.global_batch_size, false, 0.0f));
    // As Megatron, a long evaluation checks the time limit after every batch too; and the
    // stop signals (a scheduler's SIGTERM must not wait for an evaluation of any length).
    if (out_of_time()) {
      r.timed_out = true;
      return r;
    }
    if (any_rank(*par_, stop_signal_received())) {
      r.stopped = true;
      return r;
    }
  }
  reduce_loss_stats(total);
  r.tokens = total.tokens;
  r.loss = total.loss_sum / total.tokens;
  r.acc = total.correct / total.tokens;
  return r;
}

std::vector<LayerRange> Trainer::chunk_layers() const {
  std::vector<LayerRange> r;
  for (const auto& chunk : chunks_) r.push_back({chunk->layout().layer_begin, chunk->layout().layer_end});
  return r;
}

void Trainer::set_dropout_seed(uint64_t seed) {
  for (auto& chunk : chunks_) chunk->set_dropout_seed(seed);
}

double Trainer::minutes_since_start() {
  return std::chrono::duration<double, std::ratio<60>>(std::chrono::steady_clock::now() - process_start).count();
}

bool Trainer::out_of_time() const {
  // Megatron's rule: every rank stops once any rank has run out of time (an all-reduce MAX).
  return opt_.exit_duration_in_mins > 0 && any_rank(*par_, minutes_since_start() > opt_.exit_duration_in_mins);
}

void Trainer::set_micro_batches(int micro_batches) {
  if (micro_batches == micro_batches_) return;
  micro_batches_ = micro_batches;
  schedule_steps_ =
      interleaved_schedule(par_->grid.shape.pp, par_->grid.pp_rank, opt_.virtual_pipeline_chunks(), micro_batches_);
}

IterationResult Trainer::train_iteration() {
  const auto start = std::chrono::steady_clock::now();
  profile_before_iteration();
  const std::string range = profiling_ ? "iteration " + std::to_string(iteration_ + 1) : "";
  if (profiling_) be_.range_push(range.c_str());
  const int G = static_cast<int>(batch_schedule_.global_batch(consumed_samples_)), T = opt_.model.seq_length;
  // (train() checks the batches of its run up front; a caller that trains without it learns here)
  if (const std::string why = batch_fits_layout(G); !why.empty())
    throw ConfigError("the global batch of " + std::to_string(G) + " samples " + why);
  set_micro_batches(G / (opt_.micro_batch_size * par_->grid.shape.dp));
  IterationResult r;
  r.global_batch = G;
  r.lr = schedule_.lr(scheduler_);
  if (schedule_.has_decoupled_lr()) r.decoupled_lr = schedule_.decoupled_lr(scheduler_);
  optimizer_->set_embedding_lr(r.decoupled_lr);
  r.weight_decay = wd_schedule_.weight_decay(scheduler_.samples);
  optimizer_->set_weight_decay(static_cast<float>(r.weight_decay));
  // The loss is the mean over every target token of the global batch, times the scale; with
  // --calculate-per-token-loss over every kept one. The last stage, which seeds the backward
  // with this scale, counts them itself (Megatron all-reduces each rank's count instead): it
  // reads the global batch's samples once more, which costs no collective.
  double targets = static_cast<double>(G) * T;
  if (opt_.calculate_per_token_loss && par_->grid.last_stage())
    targets = static_cast<double>(kept_targets(*data_, train_data_position(), static_cast<uint64_t>(G)));
  const float grad_scale = targets > 0 ? static_cast<float>(scaler_.scale() / targets) : 0.0f;
  optimizer_->zero_grads();
  LossStats total;
  {
    // Megatron's forward-backward ends with the gradients' reductions (finalize_model_grads).
    const Timers::Scope timed(&timers_, TimerId::ForwardBackward);
    total = run_steps(schedule_steps_, micro_batches_, *data_, train_data_position(), true, grad_scale);
    // The tied word embedding's two copies (first and last stage) get the sum of both
    // gradients, so they stay equal.
    if (par_->grid.shape.pp > 1 && par_->embedding) {
      const Timers::Scope embedding(&timers_, TimerId::EmbeddingGradsAllReduce);
      par_->embedding->allreduce(model().params().grad("wte"), ReduceOp::Sum);
    }
    const Timers::Scope sync(&timers_, TimerId::AllGradsSync);
    optimizer_->reduce_gradients();
  }
  reduce_loss_stats(total);
  r.loss = total.loss_sum / total.tokens;
  r.acc = total.correct / total.tokens;
  r.nan_loss = !std::isfinite(r.loss);
  // The global squared norm counts every gradient element once, on some rank: it is
  // inf/NaN when some rank holds an inf/NaN gradient, and (fp16 squares are at most 65504^2)
  // finite otherwise, so it is also the loss scaler's overflow check: Megatron's separate
  // check reads every gradient once more. An inf/NaN skips the step on every rank; a norm
  // that overflows on its own (huge bf16 gradients) skips it too, as before.
  std::optional<Timers::Scope> optimizer_timed(std::in_place, &timers_, TimerId::Optimizer);
  double norm_sq = 0;
  {
    const Timers::Scope timed(&timers_, TimerId::OptimizerClipMainGrad);
    norm_sq = global_norm_sq(false);
  }
  const bool found_inf = scaler_.enabled() && !std::isfinite(norm_sq);
  r.grad_norm = std::nan("");
  if (!found_inf && !r.nan_loss) {
    r.grad_norm = std::sqrt(norm_sq) * scaler_.inv_scale();
    if (std::isfinite(r.grad_norm)) {
      if (opt_.log_num_zeros_in_grad) {
        const Timers::Scope timed(&timers_, TimerId::OptimizerCountZeros);
        r.num_zeros = static_cast<double>(global_grad_zeros());
      }
      optimizer_->step(r.lr, r.grad_norm, static_cast<float>(scaler_.inv_scale()));
    }
  }
  optimizer_timed.reset();
  r.skipped = !std::isfinite(r.grad_norm);  // never train on a NaN
  scaler_.update(found_inf);
  r.loss_scale = scaler_.scale();  // after the update, as Megatron's log line and TensorBoard show it
  // Megatron steps its LR scheduler by the global batch only after a successful update;
  // Megatron-DeepSpeed's token count then is the consumed tokens before this iteration's.
  if (!r.skipped) scheduler_ = schedule_.step(scheduler_, static_cast<uint64_t>(G), consumed_tokens_);
  r.logged_lr = schedule_.lr(scheduler_);
  if (schedule_.has_decoupled_lr()) r.logged_decoupled_lr = schedule_.decoupled_lr(scheduler_);
  skipped_iterations_ += r.skipped;
  nan_iterations_ += r.nan_loss;  // Megatron's nan iterations: a NaN loss, which always skips
  be_.synchronize();
  consumed_samples_ += G;
  consumed_tokens_ += static_cast<uint64_t>(G) * static_cast<uint64_t>(T);
  flops_so_far_ += megatron_flops_per_iteration(opt_.model, G, par_->grid.shape.tp);  // skipped steps too, as Megatron
  ++iteration_;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (profiling_) be_.range_pop();
  profile_after_iteration();
  if (record_history_) history_.push_back(r);
  count_unusable_iteration(r);
  return r;
}

// --max-nan-iterations: stops the run after more than that many iterations in a row that
// could not update. A NaN/inf loss always counts. A skip for an inf/NaN gradient norm counts
// unless a dynamic loss scaler is on: that one lowers its scale until the gradients fit
// (fp16 at Megatron's 2^32 skips its first iterations by design), while without one (fp32,
// bf16, a constant --loss-scale) nothing changes and every later step would skip as well.
void Trainer::count_unusable_iteration(const IterationResult& r) {
  const bool unusable = r.nan_loss || (r.skipped && !scaler_.dynamic());
  consecutive_unusable_ = unusable ? consecutive_unusable_ + 1 : 0;
  // Of those, the ones skipped for overflowing gradients with a finite loss (constant scale).
  const bool overflow = unusable && !r.nan_loss && scaler_.enabled();
  consecutive_overflows_ = overflow ? consecutive_overflows_ + 1 : 0;
  if (consecutive_unusable_ <= opt_.max_nan_iterations) return;
  const std::string limit = " iterations in a row (--max-nan-iterations " + std::to_string(opt_.max_nan_iterations) +
                            "); stopped at iteration " + std::to_string(iteration_);
  // Every one a finite loss at a constant scale: the fp16 gradients overflow at that scale.
  if (consecutive_overflows_ == consecutive_unusable_) {
    const double scale = scaler_.scale();  // as given: 4294967296, not 4.29497e+09
    const std::string given = scale == std::floor(scale) && scale < 1e18
                                  ? std::to_string(static_cast<long long>(scale))
                                  : detail::concat(scale);
    throw ConfigError("the fp16 gradients overflowed at the constant --loss-scale " + given +
                      " (steps skipped) for " + std::to_string(consecutive_unusable_) + limit +
                      ": lower --loss-scale, or leave it out for dynamic loss scaling");
  }
  throw ConfigError("the loss or the gradient norm was NaN or infinite for " + std::to_string(consecutive_unusable_) +
                    limit + " instead of training on garbage");
}

// Every sample the rest of the run reads from `iteration` on must exist: training reads
// (train_iters - iteration) global batches from sample `consumed` on; validation eval_iters
// global batches from `consumed_valid` on at each remaining multiple of --eval-interval and
// once at the end. make_train_data sizes the splits for a run from iteration 0, so a run
// resumed with another global batch size may need more (it still stops at --train-iters, as
// Megatron: iterations, not samples). --skip-train-iteration-range reads further: the samples
// read past before `iteration` and those its ranges to come will read past (Megatron-DeepSpeed
// builds the data for the run's samples alone too: the skips need what the data holds beyond).
void Trainer::check_data_covers_run(int64_t iteration, uint64_t consumed, uint64_t consumed_valid,
                                    uint64_t range_skipped) const {
  const uint64_t G = static_cast<uint64_t>(opt_.global_batch_size);
  // `flags`: what sets how much of this split the run reads.
  auto check = [&](const char* split, const std::string& flags, const SampleSource& data, uint64_t from,
                   uint64_t samples) {
    const uint64_t end = saturating_add(from, samples);  // a skip's UINT64_MAX
    if (data.size() >= end) return;
    std::string msg = flags + ", " + global_batch_flag(opt_) + " " + std::to_string(G) + ": the " + split + " data has " +
                      std::to_string(data.size()) + " samples, the run reads " + std::to_string(end);
    if (iteration > 0)
      msg += " (resumed at iteration " + std::to_string(iteration) + " with " + std::to_string(from) + " " + split +
             " samples read; the data is sized for a run from iteration 0 at this global batch size)";
    throw ConfigError(msg);
  };
  // --skip-train reads no training data and evaluates once; a phase's run ends at its transition.
  int64_t T = opt_.skip_train ? iteration : opt_.train_iters;
  if (const int64_t end = phase_at(iteration).end_iteration; end >= 0) T = std::min(T, end);
  // Training batches follow the batch schedule (a ramp-up, steps); evaluation always reads whole batches.
  const int64_t from = std::min(iteration, T);
  if (!opt_.skip_train) {
    const uint64_t read_past = samples_read_past(opt_.skip_train_iteration_ranges, applied_skip_ranges_,
                                                 batch_schedule_, from, consumed, T);
    const uint64_t trained = batch_schedule_.samples_after(consumed, T - from);
    check("training",
          detail::concat(opt_.sample_based ? "--train-samples" : "--train-iters",
                         range_skipped + read_past > 0 ? ", --skip-train-iteration-range" : ""),
          *data_, consumed + range_skipped, saturating_add(trained, read_past));
  }
  if (opt_.eval_iters > 0 && !opt_.full_validation) {  // a full validation reads what there is
    const int64_t evaluations = periodic_validations(opt_, iteration, T) + 1;  // and the final one
    for (const auto& set : valid_)
      check("validation", opt_.start_eval_at_iter ? "--eval-iters, --eval-interval, --start-eval-at-iter"
                                                  : "--eval-iters, --eval-interval",
            *set, validation_set_position(consumed_valid), static_cast<uint64_t>(evaluations * opt_.eval_iters) * G);
  }
  for (const auto& test : tests_)
    if (opt_.eval_iters > 0) check("test", "--eval-iters", *test, 0, static_cast<uint64_t>(opt_.eval_iters) * G);
}

MegatronScalars Trainer::scalars() {
  return MegatronScalars(*tensorboard_, tensorboard_tags_);
}

RunPosition Trainer::run_position() const {
  return {iteration_, static_cast<int64_t>(consumed_samples_), static_cast<int64_t>(consumed_tokens_)};
}

bool Trainer::training_done() const {
  return iteration_ >= opt_.train_iters || (opt_.train_tokens && consumed_tokens_ >= *opt_.train_tokens);
}

void Trainer::check_training_phase() const {
  if (opt_.skip_train) return;  // no training data read
  const TrainingPhase now = phase_at(iteration_), built = phase_at(opt_.start_iteration);
  const uint64_t G = static_cast<uint64_t>(opt_.global_batch_size);
  if (now.index != built.index ||
      phase_data_start(now, iteration_, consumed_samples_, G) !=
          phase_data_start(built, opt_.start_iteration, opt_.start_consumed_samples, G))
    throw ConfigError("--phase-transition-iterations: the training data was built for " + phase_text(built) +
                      " (the checkpoint chosen at the start, iteration " + std::to_string(opt_.start_iteration) +
                      "), but the run loaded iteration " + std::to_string(iteration_) + ", in " + phase_text(now) +
                      " (a local checkpoint passed over?): start it again with that phase's data");
  if (!training_done())
    *out_ << "trident: --phase-transition-iterations: " << phase_text(now) << ", its training data read from its "
          << "first sample (" << now.samples << " samples)" << std::endl;
}

TrainingPhase Trainer::phase_at(int64_t iteration) const {
  return training_phase(opt_.phase_transition_iterations, iteration, static_cast<uint64_t>(opt_.global_batch_size),
                        run_training_samples(opt_));
}

bool Trainer::kill_switch_found() const {
  if (opt_.kill_switch_path.empty()) return false;
  std::error_code ec;  // unreadable counts as absent: the switch is a file someone creates
  return any_rank(*par_, std::filesystem::exists(opt_.kill_switch_path, ec));
}

bool Trainer::skip_next_iteration() const { return opt_.iterations_to_skip.count(iteration_ + 1) > 0; }

void Trainer::skip_range(const IterationRange& r) {
  // The global batch does not change while the consumed samples stand still.
  const uint64_t G = batch_schedule_.global_batch(consumed_samples_);
  const uint64_t samples = static_cast<uint64_t>(r.last - iteration_) * G;
  range_skipped_samples_ += samples;
  applied_skip_ranges_.push_back(r);
  *out_ << "trident: skipped the data of iterations " << iteration_ + 1 << " to " << r.last
        << " (--skip-train-iteration-range " << range_text(r) << "): " << samples << " samples read past; iteration "
        << iteration_ + 1 << " trains on the batch after them" << std::endl;
}

void Trainer::skip_iteration() {
  // --profile's window counts skipped iterations too (Megatron starts it before its skip).
  profile_before_iteration();
  // Trident's samples are addressed by their position: reading past a batch is counting it.
  const uint64_t G = batch_schedule_.global_batch(consumed_samples_);
  consumed_samples_ += G;
  skipped_samples_ += G;
  consumed_tokens_ += G * static_cast<uint64_t>(opt_.model.seq_length);
  ++iteration_;
  profile_after_iteration();
  *out_ << "trident: skipped iteration " << iteration_ << " (--iterations-to-skip): " << G
        << " samples read past" << std::endl;
}

std::string Trainer::batch_fits_layout(int64_t global_batch) const {
  const GridShape& g = par_->grid.shape;
  const int64_t per_micro_step = static_cast<int64_t>(opt_.micro_batch_size) * g.dp;
  if (global_batch % per_micro_step != 0)
    return "is not a multiple of --micro-batch-size (" + std::to_string(opt_.micro_batch_size) +
           ") x data-parallel size (" + std::to_string(g.dp) + ")";
  const int chunks = opt_.virtual_pipeline_chunks();
  if (chunks > 1 && (global_batch / per_micro_step) % g.pp != 0)
    return "gives " + std::to_string(global_batch / per_micro_step) + " micro-batches, which the interleaved "
           "pipeline schedule (" + std::to_string(chunks) + " model chunks per stage) needs to be a multiple of "
           "--pipeline-model-parallel-size (" + std::to_string(g.pp) + ")";
  return "";
}

void Trainer::check_batch_steps_to_come() const {
  const std::vector<BatchStep>& steps = batch_schedule_.steps;
  if (steps.empty() || iteration_ >= opt_.train_iters) return;
  // Where the run's last iteration starts: a step from beyond it is never taken.
  const uint64_t last_start =
      consumed_samples_ + batch_schedule_.samples_after(consumed_samples_, opt_.train_iters - iteration_ - 1);
  for (size_t i = 0; i < steps.size(); ++i) {
    const bool passed = i + 1 < steps.size() && steps[i + 1].samples <= consumed_samples_;
    const bool reached = steps[i].samples <= last_start;
    if (const std::string why = batch_fits_layout(steps[i].batch); !passed && reached && !why.empty())
      throw ConfigError("--step-batch-size-schedule: the global batch of " + std::to_string(steps[i].batch) +
                        " (from " + std::to_string(steps[i].tokens) + " tokens on) " + why);
  }
}

void Trainer::say_out_of_time(const std::string& when) const {
  *out_ << "trident: exiting " << when << " after " << minutes_since_start() << " minutes (--exit-duration-in-mins)"
        << std::endl;
}

}  // namespace trident
