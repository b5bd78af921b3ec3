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
                 std::ostream& log, ParallelContext* parallel)
    : opt_(opt), be_(backend), data_(std::move(train_data)), log_(log), par_(parallel) {
  if (!par_) {
    own_parallel_ = make_parallel_context(1, 1);
    par_ = own_parallel_.get();
  }
  const GridShape& g = par_->grid.shape;
  if (opt_.global_batch_size % (opt_.micro_batch_size * g.dp) != 0)
    throw ConfigError("--global-batch-size (" + std::to_string(opt_.global_batch_size) +
                      ") must be a multiple of --micro-batch-size (" + std::to_string(opt_.micro_batch_size) +
                      ") x data-parallel size (" + std::to_string(g.dp) + ")");
  const uint64_t needed = static_cast<uint64_t>(opt_.train_iters) * opt_.global_batch_size;
  if (data_->size() < needed)
    throw ConfigError("--train-iters: the training data has " + std::to_string(data_->size()) +
                      " samples, the run needs " + std::to_string(needed));
  StageLayout layout;
  layout.tp = g.tp;
  layout.tp_rank = par_->grid.tp_rank;
  layout.tp_comm = par_->tp.get();
  model_ = std::make_unique<Gpt2Model>(opt_.model, be_, layout, opt_.micro_batch_size);  // validates the shape
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

// Squared gradient norm over the whole model, each parameter counted once: TP-sharded
// tensors by every TP rank (their slices), replicated ones by TP rank 0 only. (DP ranks
// hold identical, already reduced gradients.)
double Trainer::global_grad_norm_sq() {
  const ParamStore& P = model_->params();
  if (par_->grid.shape.tp == 1) return be_.sum_squares(P.flat_grads());  // alignment gaps are zero
  double local = 0;
  const bool tp0 = par_->grid.tp_rank == 0;
  for (const LocalParam& p : P.list())
    if (p.spec.shard != ShardRule::Replicated || tp0) local += be_.sum_squares(P.grad(p));
  std::vector<float> v = {static_cast<float>(local)};
  par_->tp->allreduce(Tensor(v.data(), Shape{1}, DType::F32, Device::Cpu), ReduceOp::Sum);
  return v[0];
}

void Trainer::reduce_loss_stats(LossStats& s) {
  if (par_->grid.shape.dp == 1) return;
  std::vector<float> v = {static_cast<float>(s.loss_sum), static_cast<float>(s.correct), static_cast<float>(s.tokens)};
  par_->dp->allreduce(Tensor(v.data(), Shape{3}, DType::F32, Device::Cpu), ReduceOp::Sum);
  s.loss_sum = v[0];
  s.correct = v[1];
  s.tokens = v[2];
}

IterationResult Trainer::train_iteration() {
  const auto start = std::chrono::steady_clock::now();
  const int G = opt_.global_batch_size, B = opt_.micro_batch_size, T = opt_.model.seq_length;
  const int dp = par_->grid.shape.dp, dp_rank = par_->grid.dp_rank;
  const int micro_batches = G / (B * dp);
  // The loss is the mean over every target token of the global batch.
  const float grad_scale = 1.0f / (static_cast<float>(G) * static_cast<float>(T));
  IterationResult r;
  r.lr = schedule_.lr(consumed_samples_);
  model_->params().zero_grads();
  LossStats total;
  for (int j = 0; j < micro_batches; ++j) {
    // Megatron's sampler: DP rank r takes slice [r B, (r + 1) B) of each B x dp block.
    const uint64_t first = consumed_samples_ + (static_cast<uint64_t>(j) * dp + dp_rank) * B;
    load_micro_batch(first);
    model_->forward(0, MicroBatch{tokens_.data(), targets_.data(), first}, true, grad_scale);
    model_->backward(0);
    const LossStats s = model_->loss_stats();
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.tokens += s.tokens;
  }
  if (dp > 1) par_->dp->allreduce(model_->params().flat_grads(), ReduceOp::Sum);
  reduce_loss_stats(total);
  r.loss = total.loss_sum / total.tokens;
  r.acc = total.correct / total.tokens;
  if (std::isfinite(r.loss)) {
    r.grad_norm = std::sqrt(global_grad_norm_sq());
    optimizer_->step(r.lr, r.grad_norm);
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
  const GridShape& g = par_->grid.shape;
  // Only world rank 0 logs; the others train silently.
  std::ostream null_stream(nullptr);
  std::ostream& out = par_->world_rank() == 0 ? log_ : null_stream;
  out << "trident: world " << g.world << " = tp " << g.tp << " x pp " << g.pp << " x dp " << g.dp << std::endl;
  out << "trident: GPT-2 " << m.num_layers << " layers, hidden " << m.hidden_size << ", heads "
       << m.num_attention_heads << ", seq " << m.seq_length << ", vocab " << m.vocab_size << " (padded "
       << m.padded_vocab_size(g.tp) << "), " << m.num_parameters(g.tp) << " parameters, backend " << be_.name()
       << ", dtype " << dtype_name(m.dtype) << std::endl;
  double loss_sum = 0, acc_sum = 0, ms_sum = 0;
  int n = 0;
  const double flops = model_flops_per_iteration(m, opt_.global_batch_size, g.tp) / g.world;
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
      out << format_iteration_log(l) << std::endl;
      loss_sum = acc_sum = ms_sum = 0;
      n = 0;
    }
  }
  const AllocatorStats st = be_.allocator().stats();
  out << "trident: done, " << iteration_ << " iterations, " << consumed_samples_ << " samples; memory: "
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
