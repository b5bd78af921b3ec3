// Megatron's OptimizerParamScheduler state in trident's checkpoints (scheduler_state.h).
#include "train/scheduler_state.h"

#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ckpt/metadata.h"
#include "core/error.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

// One parameter of the scheduler's saved state: its key (Megatron's name), what sets it on the
// command line, its value in ParamSchedules as JSON both ways (`set` throws on a value of the
// wrong type or an unknown style), and, where it does not always matter, whether it matters
// to the two schedules (null: always).
struct SchedulerField {
  const char* key;
  const char* flags;
  nlohmann::json (*get)(const ParamSchedules&);
  void (*set)(ParamSchedules&, const nlohmann::json&);
  bool (*matters)(const ParamSchedules& cli, const ParamSchedules& ckpt) = nullptr;
  // Builds before 2026-12-02 saved it rounded to fp32 (0.009999999776482582 for 0.01): a
  // value equal at fp32 is the same.
  bool fp32_in_older_checkpoints = false;
  // Absent from a checkpoint: null (a token count that checkpoints written before it was
  // saved never had), not "keep the command line's".
  bool absent_is_null = false;
};

template <auto Part, auto Member>
SchedulerField number_field(const char* key, const char* flags) {
  return {key, flags, [](const ParamSchedules& s) { return nlohmann::json((s.*Part).*Member); },
          [](ParamSchedules& s, const nlohmann::json& v) { (s.*Part).*Member = v.get<double>(); }};
}

// An optional field of the LR schedule (a token count, a decoupled rate): null when not set.
template <auto Member>
SchedulerField optional_field(const char* key, const char* flags) {
  using Value = typename std::remove_reference_t<decltype(std::declval<LrSchedule&>().*Member)>::value_type;
  SchedulerField f = {
      key, flags,
      [](const ParamSchedules& s) { return (s.lr.*Member) ? nlohmann::json(*(s.lr.*Member)) : nlohmann::json(); },
      [](ParamSchedules& s, const nlohmann::json& v) {
        s.lr.*Member = v.is_null() ? std::nullopt : std::optional<Value>(v.get<Value>());
      }};
  f.absent_is_null = true;
  return f;
}

// The length of the weight decay's rise is the run's length, so a constant decay (the
// default) would make every lengthened run differ from its checkpoint, which Megatron reports;
// trident compares it only where a schedule rises.
bool weight_decay_rises(const ParamSchedules& cli, const ParamSchedules& ckpt) {
  return cli.wd.style != WdIncrStyle::Constant || ckpt.wd.style != WdIncrStyle::Constant;
}

// WSD's anneal matters only where a schedule has one (its length is 0 otherwise).
bool either_anneals(const ParamSchedules& cli, const ParamSchedules& ckpt) {
  return cli.lr.style == LrDecayStyle::WarmupStableDecay || ckpt.lr.style == LrDecayStyle::WarmupStableDecay;
}

// Megatron's OptimizerParamScheduler.state_dict fields, in trident's units: the warm-up,
// decay and weight-decay lengths in samples (Megatron's "steps" are samples too:
// iteration-based runs multiply by the global batch). init_lr, WSD's anneal and the decoupled
// rates are trident's additions: Megatron saves neither --lr-warmup-init, the --lr-wsd-decay
// flags nor --decoupled-lr there (its param groups hold the decoupled rates).
const std::vector<SchedulerField>& scheduler_fields() {
  using P = ParamSchedules;
  static const std::vector<SchedulerField> fields = {
      number_field<&P::lr, &LrSchedule::max_lr>("max_lr", "--lr"),
      number_field<&P::lr, &LrSchedule::min_lr>("min_lr", "--min-lr"),
      number_field<&P::lr, &LrSchedule::init_lr>("init_lr", "--lr-warmup-init"),
      number_field<&P::lr, &LrSchedule::warmup_samples>(
          "lr_warmup_steps",
          "warm-up samples: --lr-warmup-iters x --global-batch-size, --lr-warmup-samples or --lr-warmup-fraction"),
      number_field<&P::lr, &LrSchedule::decay_samples>(
          "lr_decay_steps",
          "decay samples: --lr-decay-iters (default --train-iters) x --global-batch-size, or --lr-decay-samples "
          "(default --train-samples)"),
      optional_field<&LrSchedule::warmup_tokens>("lr_warmup_tokens", "--lr-warmup-tokens"),
      optional_field<&LrSchedule::decay_tokens>("lr_decay_tokens", "--lr-decay-tokens"),
      optional_field<&LrSchedule::decoupled_max_lr>("decoupled_lr", "--decoupled-lr"),
      optional_field<&LrSchedule::decoupled_min_lr>("decoupled_min_lr", "--decoupled-min-lr (default --min-lr)"),
      {"lr_decay_style", "--lr-decay-style",
       [](const P& s) { return nlohmann::json(lr_decay_style_name(s.lr.style)); },
       [](P& s, const nlohmann::json& v) { s.lr.style = parse_lr_decay_style(v.get<std::string>()); }},
      [] {
        SchedulerField f = number_field<&P::lr, &LrSchedule::wsd_decay_samples>(
            "wsd_decay_steps", "anneal samples: --lr-wsd-decay-iters x --global-batch-size, or --lr-wsd-decay-samples");
        f.matters = either_anneals;
        return f;
      }(),
      [] {
        SchedulerField f = {"lr_wsd_decay_style", "--lr-wsd-decay-style",
                            [](const P& s) { return nlohmann::json(wsd_decay_style_name(s.lr.wsd_style)); },
                            [](P& s, const nlohmann::json& v) {
                              s.lr.wsd_style = parse_wsd_decay_style(v.get<std::string>());
                            }};
        f.matters = either_anneals;
        return f;
      }(),
      [] {
        SchedulerField f = number_field<&P::wd, &WeightDecaySchedule::start_wd>(
            "start_wd", "--start-weight-decay (default --weight-decay)");
        f.fp32_in_older_checkpoints = true;
        return f;
      }(),
      [] {
        SchedulerField f = number_field<&P::wd, &WeightDecaySchedule::end_wd>(
            "end_wd", "--end-weight-decay (default --weight-decay)");
        f.fp32_in_older_checkpoints = true;
        return f;
      }(),
      [] {
        SchedulerField f = number_field<&P::wd, &WeightDecaySchedule::incr_samples>(
            "wd_incr_steps", "weight-decay samples: --train-iters x --global-batch-size, or --train-samples");
        f.matters = weight_decay_rises;
        return f;
      }(),
      {"wd_incr_style", "--weight-decay-incr-style",
       [](const P& s) { return nlohmann::json(wd_incr_style_name(s.wd.style)); },
       [](P& s, const nlohmann::json& v) { s.wd.style = parse_wd_incr_style(v.get<std::string>()); }},
  };
  return fields;
}

}  // namespace

nlohmann::json scheduler_state(const ParamSchedules& s, const LrPosition& p) {
  nlohmann::json j = {{"num_steps", p.samples}, {"num_tokens", p.tokens}};
  // trident's name: Megatron-DeepSpeed keeps it in lr_warmup_tokens, the flag's field.
  j["warmup_end_tokens"] = p.warmup_end_tokens ? nlohmann::json(*p.warmup_end_tokens) : nlohmann::json();
  for (const SchedulerField& f : scheduler_fields()) j[f.key] = f.get(s);
  return j;
}

ParamSchedules schedules_after_load(const ParamSchedules& cli, const nlohmann::json& trainer_state,
                                    const TrainOptions& o, const fs::path& dir, std::ostream& out) {
  const auto it = trainer_state.find("opt_param_scheduler");
  if (it == trainer_state.end() || !it->is_object()) return cli;
  nlohmann::json saved = *it;
  for (const SchedulerField& f : scheduler_fields())
    if (f.absent_is_null && !saved.contains(f.key)) saved[f.key] = nullptr;
  const std::string metadata = (dir / kMetadataFileName).string();
  ParamSchedules ckpt = cli;
  for (const SchedulerField& f : scheduler_fields()) {
    const auto v = saved.find(f.key);
    if (v == saved.end()) continue;
    try {
      f.set(ckpt, *v);
    } catch (const std::exception& e) {
      throw IoError("--load: " + metadata + ": trainer_state.opt_param_scheduler." + f.key + " " + v->dump() +
                    " is not a valid value (" + e.what() + ")");
    }
  }
  std::string differences;
  for (const SchedulerField& f : scheduler_fields()) {
    const auto v = saved.find(f.key);
    if (v == saved.end() || (f.matters && !f.matters(cli, ckpt))) continue;
    const nlohmann::json cli_value = f.get(cli);
    if (cli_value == *v) continue;
    if (f.fp32_in_older_checkpoints && cli_value.is_number() && v->is_number() &&
        static_cast<float>(cli_value.get<double>()) == static_cast<float>(v->get<double>()))
      continue;
    const auto text = [](const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
    if (!differences.empty()) differences += "; ";
    differences += std::string(f.key) + " (" + f.flags + ") is " + text(cli_value) + " on the command line but " +
                   text(*v) + " in the checkpoint";
  }
  if (differences.empty()) return cli;
  const char* what = "learning-rate and weight-decay schedule";
  if (o.override_opt_param_scheduler) {
    out << "trident: --override-opt_param-scheduler: training with the command line's " << what
        << ", not the checkpoint's: " << differences << std::endl;
    return cli;
  }
  if (o.use_checkpoint_opt_param_scheduler) {
    out << "trident: --use-checkpoint-opt_param-scheduler: training with the checkpoint's " << what
        << ", not the command line's: " << differences << std::endl;
    return ckpt;
  }
  // A changed global batch alone changes an iteration-based schedule's lengths in samples.
  const int64_t saved_batch = trainer_state.value("global_batch_size", int64_t{0});
  const std::string batch = saved_batch > 0 && saved_batch != o.global_batch_size && !o.sample_based
                                ? "; the checkpoint was written at --global-batch-size " + std::to_string(saved_batch) +
                                      ": an iteration-based schedule's lengths are iterations x the global batch"
                                : "";
  throw ConfigError("--load: " + dir.string() + ": the " + what + " differs from the checkpoint's: " + differences +
                    batch +
                    " (give --override-opt_param-scheduler to train with the command line's, or "
                    "--use-checkpoint-opt_param-scheduler to train with the checkpoint's)");
}

LrPosition saved_scheduler_position(const LrSchedule& schedule, const nlohmann::json& trainer_state,
                                    uint64_t consumed_samples, uint64_t consumed_tokens) {
  const auto it = trainer_state.find("opt_param_scheduler");
  if (it == trainer_state.end() || !it->contains("num_steps")) return schedule.step(LrPosition{}, consumed_samples, consumed_tokens);
  LrPosition start;
  const auto end = it->find("warmup_end_tokens");
  if (end != it->end() && !end->is_null()) start.warmup_end_tokens = end->get<uint64_t>();
  return schedule.step(start, (*it)["num_steps"].get<uint64_t>(), it->value("num_tokens", consumed_tokens));
}

void check_decay_start_known(const LrSchedule& schedule, const nlohmann::json& trainer_state, const fs::path& dir) {
  const bool needs_start = schedule.style == LrDecayStyle::Linear || schedule.style == LrDecayStyle::Cosine;
  if (!needs_start || !schedule.decay_tokens || schedule.warmup_tokens || schedule.warmup_samples <= 0) return;
  const auto it = trainer_state.find("opt_param_scheduler");
  if (it == trainer_state.end() || !it->contains("num_steps")) return;  // older still: the consumed samples
  const auto end = it->find("warmup_end_tokens");
  if ((end != it->end() && !end->is_null()) || (*it)["num_steps"].get<double>() <= schedule.warmup_samples) return;
  throw ConfigError("--load: " + dir.string() + " is past its warm-up of " + detail::concat(schedule.warmup_samples) +
                    " samples without the token count where it ended (its run counted no tokens): a decay in tokens "
                    "(--lr-decay-tokens) cannot start from it; resume without --lr-decay-tokens, or give the warm-up "
                    "in tokens (--lr-warmup-tokens)");
}

}  // namespace trident
