#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <ostream>

#include "core/error.h"
#include "data/tokenizer.h"
#include "train/log_line.h"
#include "train/synthetic_data.h"

namespace trident {

Trainer::Trainer(const TrainOptions& opt, Backend& backend, std::unique_ptr<SampleSource> train_data,
                 std::ostream& log)
    : opt_(opt), be_(backend), data_(std::move(train_data)), log_(log) {
  const uint64_t needed = static_cast<uint64_t>(opt_.train_iters) * opt_.global_batch_size;
  if (data_->size() < needed)
    throw ConfigError("--train-iters: the training data has " + std::to_string(data_->size()) +
                      " samples, the run needs " + std::to_string(needed));
  model_ = std::make_unique<Gpt2Model>(opt_.model, be_, StageLayout{}, opt_.micro_batch_size);
  model_->set_dropout_seed(opt_.seed);
  model_->params().init(opt_.seed);
  AdamWConfig ac;
  ac.beta1 = opt_.adam_beta1;
  ac.beta2 = opt_.adam_beta2;
  ac.eps = opt_.adam_eps;
  ac.weight_decay = opt_.weight_decay;
  ac.clip_grad = opt_.clip_grad;
  optimizer_ = std::make_unique<AdamWOptimizer>(be_, model_->params(), ac);
  schedule_.max_lr = opt_.lr;
  schedule_.min_lr = opt_.min_lr;
  schedule_.style = parse_lr_decay_style(opt_.lr_decay_style);
  schedule_.warmup_samples = static_cast<uint64_t>(opt_.lr_warmup_iters) * opt_.global_batch_size;
  schedule_.decay_samples = static_cast<uint64_t>(opt_.lr_decay_iters) * opt_.global_batch_size;
  const int T = opt_.model.seq_length;
  sample_.resize(T + 1);
  tokens_.resize(static_cast<size_t>(opt_.micro_batch_size) * T);
  targets_.resize(tokens_.size());
}

Trainer::~Trainer() = default;

void Trainer::load_micro_batch(uint64_t first_sample) {
  const int T = opt_.model.seq_length;
  for (int b = 0; b < opt_.micro_batch_size; ++b) {
    data_->get(first_sample + b, sample_.data());
    for (int t = 0; t < T; ++t) {
      tokens_[b * T + t] = sample_[t];
      targets_[b * T + t] = sample_[t + 1];
    }
  }
}

IterationResult Trainer::train_iteration() {
  const auto start = std::chrono::steady_clock::now();
  const int G = opt_.global_batch_size, B = opt_.micro_batch_size, T = opt_.model.seq_length;
  const int micro_batches = G / B;
  // The loss is the mean over every target token of the global batch.
  const float grad_scale = 1.0f / (static_cast<float>(G) * static_cast<float>(T));
  IterationResult r;
  r.lr = schedule_.lr(consumed_samples_);
  model_->params().zero_grads();
  LossStats total;
  for (int j = 0; j < micro_batches; ++j) {
    const uint64_t first = consumed_samples_ + static_cast<uint64_t>(j) * B;
    load_micro_batch(first);
    model_->forward(0, MicroBatch{tokens_.data(), targets_.data(), first}, true, grad_scale);
    model_->backward(0);
    const LossStats s = model_->loss_stats();
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.tokens += s.tokens;
  }
  r.loss = total.loss_sum / total.tokens;
  r.acc = total.correct / total.tokens;
  if (std::isfinite(r.loss)) {
    r.grad_norm = optimizer_->step(r.lr);
  } else {
    ++nan_iterations_;  // never train on a NaN loss
    r.grad_norm = std::nan("");
  }
  be_.synchronize();
  consumed_samples_ += G;
  ++iteration_;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  history_.push_back(r);
  return r;
}

void Trainer::train() {
  const ModelConfig& m = opt_.model;
  log_ << "trident: GPT-2 " << m.num_layers << " layers, hidden " << m.hidden_size << ", heads "
       << m.num_attention_heads << ", seq " << m.seq_length << ", vocab " << m.vocab_size << " (padded "
       << m.padded_vocab_size(1) << "), " << m.num_parameters(1) << " parameters, backend " << be_.name()
       << ", dtype " << dtype_name(m.dtype) << std::endl;
  double loss_sum = 0, acc_sum = 0, ms_sum = 0;
  int n = 0;
  const double flops = model_flops_per_iteration(m, opt_.global_batch_size);
  while (iteration_ < opt_.train_iters) {
    const IterationResult r = train_iteration();
    loss_sum += r.loss;
    acc_sum += r.acc;
    ms_sum += r.ms;
    ++n;
    if (iteration_ % opt_.log_interval == 0 || iteration_ == opt_.train_iters) {
      IterationLog l;
      l.iteration = iteration_;
      l.train_iters = opt_.train_iters;
      l.consumed_samples = consumed_samples_;
      l.ms_per_iteration = ms_sum / n;
      l.learning_rate = r.lr;
      l.global_batch_size = opt_.global_batch_size;
      l.lm_loss = loss_sum / n;
      l.lm_acc = acc_sum / n;
      l.grad_norm = r.grad_norm;
      l.nan_iterations = nan_iterations_;
      l.tokens_per_second = static_cast<double>(opt_.global_batch_size) * m.seq_length / (l.ms_per_iteration / 1e3);
      l.tflops_per_rank = flops / (l.ms_per_iteration / 1e3) / 1e12;
      log_ << format_iteration_log(l) << std::endl;
      loss_sum = acc_sum = ms_sum = 0;
      n = 0;
    }
  }
  const AllocatorStats st = be_.allocator().stats();
  log_ << "trident: done, " << iteration_ << " iterations, " << consumed_samples_ << " samples; memory: "
       << st.peak_bytes_in_use / (1024.0 * 1024.0) << " MiB peak, " << st.raw_allocs << " device allocations"
       << std::endl;
}

std::unique_ptr<SampleSource> make_train_data(TrainOptions& opt) {
  const uint64_t needed = static_cast<uint64_t>(opt.train_iters) * opt.global_batch_size;
  if (opt.data_path.empty())
    return std::make_unique<SyntheticSource>(opt.model.vocab_size, opt.model.seq_length, opt.seed);
  auto tokenizer = make_tokenizer(opt.tokenizer_type, opt.vocab_file, opt.merge_file);
  opt.model.vocab_size = tokenizer->vocab_size();
  GptDatasetConfig dc;
  dc.blend = parse_data_path(opt.data_path);
  dc.split = opt.split;
  dc.seq_length = opt.model.seq_length;
  dc.seed = opt.seed;
  dc.train_samples = needed;
  dc.cache_dir = opt.data_cache_path;
  TrainValidTest sets = build_gpt_datasets(dc);
  if (!sets.train) throw ConfigError("--split: the training split of --data-path is empty");
  return std::move(sets.train);
}

}  // namespace trident
