// What the trainer builds from resolved TrainOptions: the LR, batch and weight-decay schedules,
// the loss scaler's config, and the backend's options.
#include "train/options.h"

namespace trident {

BackendOptions backend_options(const TrainOptions& o) {
  return {.allow_tf32 = !o.no_tf32,
          .bf16_reduction_in_fp32 = o.disable_bf16_reduced_precision_matmul && o.model.dtype == DType::BF16};
}

LrSchedule make_lr_schedule(const TrainOptions& o) {
  LrSchedule s;
  s.max_lr = o.lr;
  s.min_lr = o.min_lr;
  if (o.decoupled_lr) {
    s.decoupled_max_lr = o.decoupled_lr;
    s.decoupled_min_lr = o.decoupled_min_lr.value_or(o.min_lr);
  }
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

}  // namespace trident
