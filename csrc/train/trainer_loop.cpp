// Trainer::train(): the training loop and its steps (the run's header lines, each
// iteration's log line and TensorBoard scalars, the evaluations and saves it asks for, the
// exit checks, the end of training). The trainer's construction, iteration and evaluation are
// in trainer.cpp, its evaluation data and reports of evaluations in trainer_evaluation.cpp,
// its other reports in trainer_reports.cpp, its checkpoints in trainer_checkpoint.cpp.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>

#include "core/error.h"
#include "core/stop_signals.h"
#include "train/log_line.h"
#include "train/tensorboard.h"
#include "train/throughput.h"
#include "train/trainer.h"

namespace trident {

namespace {

// The iterations since the last log line, which Megatron's line averages and then resets.
struct LogInterval {
  double loss_sum = 0, acc_sum = 0, ms_sum = 0;
  int iterations = 0;
  int updated = 0;               // not skipped: the loss averages' iterations
  int64_t skipped = 0, nan = 0;  // Megatron prints and resets them per line

  void add(const IterationResult& r) {
    if (!r.skipped) {  // Megatron leaves skipped iterations out of the loss averages entirely
      ++updated;
      loss_sum += r.loss;
      acc_sum += r.acc;
    }
    ms_sum += r.ms;
    ++iterations;
    skipped += r.skipped;
    nan += r.nan_loss;
  }
  double ms_per_iteration() const { return ms_sum / iterations; }
};

struct Throughput {
  double tokens_per_second, tflops_per_rank, mfu;
};

// The throughput of the run's iterations, as its log line and TensorBoard report it.
struct ThroughputMeter {
  const ModelConfig& model;
  const GridShape& grid;
  double peak_tflops;  // of one rank's device, for the MFU (0: none)

  // Of iterations of `global_batch` samples (a ramp-up's or a step's batch, as Megatron's log uses).
  Throughput operator()(double ms_per_iteration, int global_batch) const {
    const double s = ms_per_iteration / 1e3;
    const double flops_per_iteration = model_flops_per_iteration(model, global_batch, grid.tp);
    return Throughput{static_cast<double>(global_batch) * model.seq_length / s,
                      flops_per_iteration / grid.world / s / 1e12,
                      model_flops_utilization(flops_per_iteration, s, grid.world, peak_tflops)};
  }
};

}  // namespace

// What train() keeps from one iteration to the next: the settings it reads at each, and
// where the run stands between log lines, batch sizes and stops.
struct Trainer::TrainLoop {
  explicit TrainLoop(const Trainer& t)
      : throughput{t.opt_.model, t.par_->grid.shape,
                   t.opt_.peak_tflops > 0 ? t.opt_.peak_tflops
                                          : peak_tflops_for_device(t.be_.device_name(), t.opt_.model.dtype,
                                                                   !t.opt_.no_tf32)},
        evaluating(t.validation_iterations() > 0),
        saving(!t.opt_.save.empty()),
        timing_log_option(parse_timing_log_option(t.opt_.timing_log_option)) {}

  const ThroughputMeter throughput;
  const bool evaluating;  // some validation set has iterations
  const bool saving;      // --save
  const TimingLogOption timing_log_option;
  // The batch of the iteration before: Megatron saves before the first of a larger one (a
  // ramp-up's or a step's), a skipped one's too, the last point the run can go back to at the
  // batch it had so far. Set as the loop starts.
  int64_t batch_before = 0;
  LogInterval interval;
  bool memory_reported = false;    // after this process's first iteration (a resumed run's too)
  bool stopped_by_signal = false;  // by a signal or the kill switch; the same on every rank (any_rank)
};

void Trainer::train() {
  if (!opt_.skip_train) check_batch_steps_to_come();
  if (!opt_.phase_transition_iterations.empty()) check_training_phase();
  print_run_header();
  TrainLoop loop(*this);
  // The stop handlers from here to the end (trident-train's main installs them earlier, so
  // that a signal during the start-up is kept: this one is then the inner one). A signal
  // stops the evaluations after their batch in flight, and the run exits 0.
  const StopSignals stop_signals(opt_.exit_signal);
  if (opt_.skip_train) {
    evaluate_only();
    return;
  }
  if (stopped_before_training()) return;
  start_energy_monitor();
  if (energy_) energy_->resume();
  loop.batch_before = batch_schedule_.global_batch(consumed_samples_);
  while (!training_done()) {
    save_before_batch_grows(loop);
    if (const auto range = due_skip_range(opt_.skip_train_iteration_ranges, applied_skip_ranges_, iteration_))
      skip_range(*range);
    // As Megatron: a skipped iteration has no log line, evaluation, save or exit check.
    if (skip_next_iteration()) {
      skip_iteration();
      continue;
    }
    const IterationResult r = train_iteration();
    if (!loop.memory_reported) {
      report_peak_memory();
      loop.memory_reported = true;
    }
    if (opt_.check_weight_hash_interval > 0 && iteration_ % opt_.check_weight_hash_interval == 0)
      check_replicas_agree();
    loop.interval.add(r);
    log_iteration(r, loop);
    if (opt_.log_memory_interval > 0 && iteration_ % opt_.log_memory_interval == 0) report_memory();
    if (!validate_during_training(loop)) break;
    save_after_iteration(loop.saving);
    if (exit_requested(loop)) break;
  }
  end_training(loop);
}

void Trainer::print_run_header() const {
  const ModelConfig& m = opt_.model;
  const GridShape& g = par_->grid.shape;
  std::ostream& out = *out_;
  out << "trident: world " << g.world << " = tp " << g.tp << " x pp " << g.pp << " x dp " << g.dp << ", zero stage "
      << opt_.zero_stage << (opt_.overlap_param_gather && g.dp > 1 ? " (parameter gather overlapped)" : "")
      << (opt_.overlap_grad_reduce || g.dp == 1 ? "" : ", gradient reductions not overlapped") << ", "
      << full_micro_batches_ << " micro-batches of " << opt_.micro_batch_size
      << " per iteration";
  const BatchSchedule& bs = batch_schedule_;
  if (bs.varies() && bs.steps.empty())
    out << " (ramping up from a global batch of " << bs.start << " over " << bs.samples << " samples)";
  if (!bs.steps.empty()) {
    out << " (global batches:";
    for (const BatchStep& s : bs.steps)
      out << (&s == &bs.steps.front() ? " " : ", ") << s.batch << " from " << s.tokens << " tokens";
    out << ")";
  }
  if (chunks_.front()->layout().sequence_parallel) out << ", sequence parallel";
  if (chunks_.size() > 1) out << ", interleaved schedule: " << chunks_.size() << " model chunks per stage";
  if (g.pp > 1) out << ", " << pipeline_split_text(opt_.pipeline_split());
  out << std::endl;
  out << "trident: GPT-2 " << m.num_layers << " layers, hidden " << m.hidden_size << ", heads "
      << m.num_attention_heads << ", seq " << m.seq_length << ", vocab " << m.vocab_size << " (padded "
      << m.padded_vocab_size(g.tp) << "), " << m.num_parameters(g.tp) << " parameters, backend " << be_.name()
      << ", dtype " << dtype_name(m.dtype) << (m.gelu == Gelu::Erf ? ", erf GELU" : "") << std::endl;
}

void Trainer::evaluate_only() {
  *out_ << "trident: skipping training (--skip-train): evaluating the model of iteration " << iteration_ << std::endl;
  final_evaluations(/*to_tensorboard=*/false);
  if (tensorboard_) tensorboard_->close();
}

bool Trainer::stopped_before_training() {
  // Asked to stop before training (during the start-up): the loaded state is the latest
  // checkpoint's, so nothing is trained or saved. (Megatron trains one iteration first.)
  if (any_rank(*par_, stop_signal_received()))
    *out_ << "trident: stop requested by a signal before iteration " << iteration_ + 1
          << ": exiting without training" << std::endl;
  else if (kill_switch_found())  // BigScience's kill switch at the start: no training, no checkpoint
    *out_ << "trident: kill switch " << opt_.kill_switch_path << " found before iteration " << iteration_ + 1
          << ": exiting without training" << std::endl;
  else
    return false;
  if (tensorboard_) tensorboard_->close();
  return true;
}

void Trainer::save_before_batch_grows(TrainLoop& loop) {
  const int64_t batch = batch_schedule_.global_batch(consumed_samples_);
  if (batch == loop.batch_before) return;
  *out_ << "trident: the global batch grows from " << loop.batch_before << " to " << batch
        << " samples after iteration " << iteration_ << " (" << consumed_samples_ << " samples consumed)" << std::endl;
  loop.batch_before = batch;
  if (loop.saving && last_saved_iteration_ != iteration_) {
    const EnergyPause not_training(energy_.get());
    save_checkpoint();  // (which commits a pending --async-save first)
  }
}

void Trainer::log_iteration(const IterationResult& r, TrainLoop& loop) {
  const bool logging = iteration_ % opt_.log_interval == 0 || training_done();
  // Known on every rank (only rank 0 holds the writer): --log-params-norm's norm is collective.
  const bool tensorboard_due = !opt_.tensorboard_dir.empty() && iteration_ % opt_.tensorboard_log_interval == 0;
  const double params_norm =
      opt_.log_params_norm && (logging || tensorboard_due) ? std::sqrt(global_norm_sq(true)) : std::nan("");
  const auto optimizer_states = opt_.log_optimizer_states_to_tensorboard && tensorboard_due
                                    ? optimizer_state_statistics()
                                    : std::vector<std::pair<std::string, double>>{};
  ++timed_since_tensorboard_;
  if (tensorboard_due && opt_.log_timers_to_tensorboard && timers_.any()) timers_to_tensorboard();
  if (tensorboard_ && tensorboard_due) write_iteration_scalars(r, params_norm, optimizer_states, loop);
  // Megatron's "iteration-time" (with --log-timers-to-tensorboard): seconds an iteration,
  // averaged over the log line's iterations (their training steps: Megatron's interval
  // timer also holds the logging between them), at multiples of --log-interval only.
  if (tensorboard_ && iteration_ % opt_.log_interval == 0 && opt_.log_timers_to_tensorboard)
    scalars().metric("iteration-time", loop.interval.ms_per_iteration() / 1000.0, run_position(),
                     {.megatron_samples = false});
  if (logging) {
    print_iteration_line(r, params_norm, loop);
    loop.interval = {};
  }
}

void Trainer::timers_to_tensorboard() {
  // Megatron's "<name>-time" scalars: the maximum over the ranks, in seconds an iteration.
  const auto per_rank = timers_.take(par_->world.get(), 1, timed_since_tensorboard_ * 1000.0);
  timed_since_tensorboard_ = 0;
  if (tensorboard_)
    for (const auto& [name, seconds] : timer_maxima(per_rank))
      scalars().at_iteration(std::string(name) + "-time", seconds, iteration_);
}

void Trainer::write_iteration_scalars(const IterationResult& r, double params_norm,
                                      const std::vector<std::pair<std::string, double>>& optimizer_states,
                                      const TrainLoop& loop) {
  const Throughput t = loop.throughput(r.ms, r.global_batch);
  const RunPosition at = run_position();
  MegatronScalars tb = scalars();
  tb.position(at);
  // As Megatron: the loss of every iteration, a skipped one's too (its forward ran), a
  // NaN too; the gradient norm only of a step that has one (not skipped, and clipping on).
  tb.metric("lm loss", r.loss, at);
  tb.at_iteration("lm acc", r.acc, iteration_);
  if (!r.skipped && opt_.clip_grad > 0) tb.metric("grad-norm", r.grad_norm, at);
  // Megatron writes the rate its log line shows: the scheduler's, after the step.
  if (opt_.log_learning_rate_to_tensorboard) {
    tb.metric("learning-rate", r.logged_lr, at);
    if (r.logged_decoupled_lr)  // Megatron-core's: by iteration only
      tb.at_iteration("decoupled-learning-rate", *r.logged_decoupled_lr, iteration_);
  }
  if (std::isfinite(r.num_zeros)) tb.metric("num-zeros", r.num_zeros, at);
  if (std::isfinite(params_norm)) tb.metric("params-norm", params_norm, at);
  // 1 without a scaler, as Megatron writes it.
  if (opt_.log_loss_scale_to_tensorboard) tb.metric("loss-scale", r.loss_scale, at);
  if (opt_.log_world_size_to_tensorboard) tb.metric("world-size", par_->grid.shape.world, at);
  if (opt_.log_memory_to_tensorboard) {  // Megatron's names; this rank's (rank 0's) allocator
    const AllocatorStats m = be_.allocator().stats();
    tb.at_iteration("mem-reserved-bytes", static_cast<double>(m.bytes_reserved), iteration_);
    tb.at_iteration("mem-allocated-bytes", static_cast<double>(m.bytes_in_use), iteration_);
    tb.at_iteration("mem-max-allocated-bytes", static_cast<double>(m.peak_bytes_in_use), iteration_);
    tb.at_iteration("mem-allocated-count", static_cast<double>(m.blocks_in_use), iteration_);
  }
  for (const auto& [name, value] : optimizer_states) tb.optimizer_state(name, value, at);
  if (skipped_samples_ > 0)  // Megatron's, at the iteration
    tb.at_iteration("skipped-train-samples", static_cast<double>(skipped_samples_), iteration_);
  if (opt_.log_batch_size_to_tensorboard)
    tb.metric("batch-size", static_cast<double>(r.global_batch), at, {.deepspeed_tokens = false});
  tb.at_iteration("tokens-per-second", t.tokens_per_second, iteration_);
  tb.at_iteration("tflops-per-rank", t.tflops_per_rank, iteration_);
  if (t.mfu > 0) tb.at_iteration("mfu", t.mfu, iteration_);
}

void Trainer::print_iteration_line(const IterationResult& r, double params_norm, const TrainLoop& loop) {
  const LogInterval& interval = loop.interval;
  const GridShape& g = par_->grid.shape;
  IterationLog l;
  l.iteration = iteration_;
  l.train_iters = opt_.train_iters;
  l.consumed_samples = consumed_samples_;
  l.skipped_samples = skipped_samples_;
  if (opt_.counts_tokens()) l.consumed_tokens = consumed_tokens_;
  l.ms_per_iteration = interval.ms_per_iteration();
  l.learning_rate = r.logged_lr;
  l.decoupled_learning_rate = r.logged_decoupled_lr;
  l.global_batch_size = r.global_batch;
  // Megatron divides by max(1, updated): 0 when every iteration skipped, and no loss field.
  l.lm_loss = interval.loss_sum / std::max(1, interval.updated);
  l.lm_acc = interval.acc_sum / std::max(1, interval.updated);
  l.loss_scale = r.loss_scale;  // 1 without a scaler
  // Megatron computes the norm only to clip: without clipping the line has none.
  l.grad_norm = opt_.clip_grad > 0 ? r.grad_norm : std::nan("");
  l.num_zeros = r.num_zeros;  // of the line's iteration, as Megatron's
  l.params_norm = params_norm;
  l.skipped_iterations = interval.skipped;
  l.nan_iterations = interval.nan;
  const Throughput t = loop.throughput(l.ms_per_iteration, r.global_batch);
  l.tokens_per_second = t.tokens_per_second;
  l.tflops_per_rank = t.tflops_per_rank;
  l.mfu = t.mfu;
  if (opt_.log_throughput) {  // Megatron's field: its FLOPs over the iteration time, per GPU
    l.megatron_tflops_per_gpu =
        megatron_flops_per_iteration(opt_.model, r.global_batch, g.tp) / (l.ms_per_iteration / 1e3) / g.world / 1e12;
    if (tensorboard_ && opt_.log_timers_to_tensorboard)
      scalars().at_iteration("throughput", *l.megatron_tflops_per_gpu, iteration_);
  }
  if (energy_) {  // Megatron's: the ranks' energy since the last line, per iteration and GPU,
    // and over the time counted (its interval timer's: evaluations and saves left out)
    const EnergyMonitor::Lap lap = energy_->lap();
    const double joules = energy_over_ranks(lap.joules) / g.world;
    l.energy_per_gpu = joules / interval.iterations;
    l.power_per_gpu = lap.seconds > 0 ? joules / lap.seconds : 0.0;
    if (tensorboard_) {
      scalars().at_iteration("iter-energy/gpu", *l.energy_per_gpu, iteration_);
      scalars().at_iteration("power/gpu", *l.power_per_gpu, iteration_);
    }
  }
  errno = 0;
  *out_ << format_iteration_log(l) << std::endl;
  const int write_errno = errno;
  // A log that can no longer be written (a full disk under a redirected stdout), or that a
  // line before this one failed, stops the run now, as Python's print raises in Megatron,
  // not silently at exit 0; exit 3, as for any output the storage refuses (the errno of an
  // earlier line's failure is gone). (Not on the other ranks' null stream, never good.)
  if (out_ == &log_ && !log_)
    throw StorageError("the training log (standard output): a write failed" +
                       (write_errno != 0 ? ": " + std::string(std::strerror(write_errno)) : std::string()));
  if (timers_.any()) {
    const std::string block =
        format_timers(timers_.take(par_->world.get(), 0, interval.iterations), loop.timing_log_option);
    if (!block.empty()) *out_ << block << std::endl;
  }
}

bool Trainer::validate_during_training(TrainLoop& loop) {
  // As Megatron: every multiple of --eval-interval, the last iteration included (the final
  // evaluation after the loop then reads the next validation samples).
  if (!loop.evaluating || !validates_after(opt_, iteration_)) return true;
  const EnergyPause not_training(energy_.get());
  for (size_t k = 0; k < valid_.size(); ++k) {
    const EvalResult e = evaluate(*valid_[k], validation_start(), validation_iterations(k));
    if (e.timed_out) {
      say_out_of_time("during the evaluation at iteration " + std::to_string(iteration_));
      return false;
    }
    if (e.stopped) {  // the iteration's training is done: its checkpoint follows in end_training
      *out_ << "trident: stop requested by a signal during the evaluation at iteration " << iteration_ << std::endl;
      loop.stopped_by_signal = true;
      return false;
    }
    log_evaluation("iteration " + std::to_string(iteration_), e, true, validation_set_name(k));
  }
  consumed_valid_samples_ += static_cast<uint64_t>(validation_iterations()) * opt_.global_batch_size;
  return true;
}

void Trainer::save_after_iteration(bool saving) {
  const bool persistent_save = saving && opt_.save_interval > 0 && iteration_ % opt_.save_interval == 0;
  const bool non_persistent_save = !persistent_save && saving && opt_.non_persistent_save_interval > 0 &&
                                   iteration_ % opt_.non_persistent_save_interval == 0 && !training_done();
  if (!pending_save_ && !persistent_save && !non_persistent_save) return;
  const EnergyPause not_training(energy_.get());  // Megatron pauses its monitor for saves
  if (pending_save_) finish_save(/*wait=*/false);  // --async-save: commit once written everywhere
  if (persistent_save)
    save_checkpoint();
  else if (non_persistent_save)
    save_checkpoint(SaveKind::kNonPersistent);  // not at the end: the final save follows
}

bool Trainer::exit_requested(TrainLoop& loop) {
  if (any_rank(*par_, stop_signal_received())) {
    *out_ << "trident: stop requested by a signal at iteration " << iteration_ << std::endl;
    loop.stopped_by_signal = true;
    return true;
  }
  // BigScience looks before each iteration: after the last one the run ends as usual.
  if (!training_done() && kill_switch_found()) {  // the iteration is saved in end_training, as for a signal
    *out_ << "trident: kill switch " << opt_.kill_switch_path << " found at iteration " << iteration_ << std::endl;
    loop.stopped_by_signal = true;
    return true;
  }
  if (out_of_time()) {
    say_out_of_time("at iteration " + std::to_string(iteration_));
    return true;
  }
  if (opt_.exit_interval > 0 && iteration_ % opt_.exit_interval == 0 && !training_done()) {
    *out_ << "trident: exiting at iteration " << iteration_ << " (--exit-interval)" << std::endl;
    return true;
  }
  if (!opt_.phase_transition_iterations.empty() && !training_done())
    if (const TrainingPhase ended = phase_at(iteration_ - 1); ended.end_iteration == iteration_) {  // saved in end_training
      *out_ << "trident: exiting at iteration " << iteration_ << " (--phase-transition-iterations), the end of "
            << phase_text(ended) << ": go on with the next phase's data and --load" << std::endl;
      return true;
    }
  return false;
}

void Trainer::end_training(const TrainLoop& loop) {
  optimizer_->wait_for_all_params();  // the parameters are read after train() (exports)
  if (energy_) {  // Megatron's line at the end of its training loop, before the final save
    energy_->lap();
    *out_ << "Total training energy (GPU): " << python_float_repr(energy_over_ranks(energy_->total()) / 1e6) << " MJ"
          << std::endl;
  }
  // train()'s stop handlers stay through the last save: a second signal (a scheduler sending
  // again, a second Ctrl-C) must not kill the save that the first one asked for. One that
  // came during it still stops the run there, without the final evaluations.
  if (loop.saving && last_saved_iteration_ != iteration_) save_checkpoint();
  finish_save(/*wait=*/true);
  const bool completed = ends_complete(loop.stopped_by_signal);
  // Every way out writes the event file to the end and closes it (a failed write or close is
  // an error here too).
  if (tensorboard_) tensorboard_->close();
  if (!completed) return;
  const AllocatorStats st = be_.allocator().stats();
  *out_ << "trident: done, " << iteration_ << " iterations, " << consumed_samples_ << " samples; memory: "
        << st.peak_bytes_in_use / (1024.0 * 1024.0) << " MiB peak, " << st.raw_allocs << " device allocations"
        << std::endl;
}

bool Trainer::ends_complete(bool stopped_by_signal) {
  if (stopped_by_signal) return false;  // said in the loop
  if (training_done() && any_rank(*par_, stop_signal_received())) {
    *out_ << "trident: stop requested by a signal at the end of training: no final evaluation" << std::endl;
    return false;
  }
  if (!training_done()) return false;
  if (iteration_ < opt_.train_iters)  // Megatron-DeepSpeed ends the run there as it would at --train-iters
    *out_ << "trident: --train-tokens " << *opt_.train_tokens << " reached at iteration " << iteration_ << " ("
          << consumed_tokens_ << " tokens)" << std::endl;
  return final_evaluations(/*to_tensorboard=*/true);
}

}  // namespace trident
