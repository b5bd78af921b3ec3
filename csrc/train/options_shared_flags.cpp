// flags_every_rank_shares: the flags that every rank of a job must have been given alike, as the
// "--flag value" lines that make_parallel_context compares across ranks.
#include <charconv>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "train/options.h"
#include "train/options_internal.h"

namespace trident {
using options_internal::join_words;

namespace {

// The shortest text that reads back as the same value: values that differ print differently.
std::string shortest_text(double value) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, value).ptr - buf);
}

// Iteration numbers as one text, `separator` between them.
template <typename Iterations>
std::string joined_iterations(const Iterations& iterations, char separator) {
  std::string text;
  for (int64_t it : iterations) {
    if (!text.empty()) text += separator;
    text += std::to_string(it);
  }
  return text;
}

}  // namespace

std::string flags_every_rank_shares(const TrainOptions& o) {
  std::ostringstream s;
  s << std::boolalpha;
  const ModelConfig& m = o.model;
  const auto line = [&](const char* flag, const auto& value) {
    s << "--" << flag << ' ';
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>) {
      s << shortest_text(value);
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
  line("gelu", gelu_name(m.gelu));
  line("micro-batch-size", o.micro_batch_size);
  line("global-batch-size", o.global_batch_size);
  line("train-iters", o.train_iters);
  line("train-samples", o.train_samples);
  line("rampup-batch-size", join_words(o.rampup_batch_size));
  std::string steps;
  for (const BatchStep& b : o.batch_steps) steps += std::to_string(b.samples) + ":" + std::to_string(b.batch) + " ";
  line("step-batch-size-schedule (samples)", steps);
  line("iterations-to-skip", joined_iterations(o.iterations_to_skip, ' '));
  std::string ranges;
  for (const IterationRange& r : o.skip_train_iteration_ranges) ranges += range_text(r) + " ";
  line("skip-train-iteration-range", ranges);
  line("phase-transition-iterations", joined_iterations(o.phase_transition_iterations, ','));
  line("recompute-granularity", o.recompute_granularity);
  line("recompute-method", o.recompute_method);
  line("recompute-num-layers", o.recompute_num_layers);
  line("seed", o.seed);
  line("lr", o.lr);
  line("min-lr", o.min_lr);
  line("decoupled-lr (-1: none)", o.decoupled_lr.value_or(-1.0));
  line("decoupled-min-lr (-1: none)", o.decoupled_min_lr.value_or(-1.0));
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
  // The groups without their prefixes (nodes may mount the data elsewhere): names, weights, ranges.
  const char* weighted_flags[3] = {"train-weighted-split-paths (names, weights, ranges)",
                                   "valid-weighted-split-paths (names, weights, ranges)",
                                   "test-weighted-split-paths (names, weights, ranges)"};
  for (int split = 0; split < 3; ++split) {
    std::ostringstream groups;
    for (const WeightedSplitGroup& g : o.weighted_split_groups[split]) {
      groups << g.name << ":";
      for (size_t k = 0; k < g.blend.prefixes.size(); ++k)
        groups << " " << shortest_text(g.blend.weights[k]) << " " << shortest_text(g.blend.fractions[k].start) << ":"
               << shortest_text(g.blend.fractions[k].end);
      groups << "; ";
    }
    line(weighted_flags[split], groups.str());
  }
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

}  // namespace trident
