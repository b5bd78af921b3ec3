// The single-process training loop: micro-batches with gradient accumulation, global-norm
// clipping, AdamW, Megatron's LR schedule, and the Megatron-style log line.
// (Multi-process layouts plug in through StageLayout/Comm in the parallelism work.)
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "data/gpt_dataset.h"
#include "model/gpt2.h"
#include "parallel/parallel_context.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/options.h"

namespace trident {

struct IterationResult {
  double loss = 0, acc = 0, grad_norm = 0, lr = 0, ms = 0;
};

class Trainer {
 public:
  // `train_data` yields samples of seq_length + 1 tokens; `log` receives the log lines
  // (written by world rank 0 only). `parallel` null means one process.
  Trainer(const TrainOptions& opt, Backend& backend, std::unique_ptr<SampleSource> train_data, std::ostream& log,
          ParallelContext* parallel = nullptr);
  ~Trainer();

  IterationResult train_iteration();  // one iteration over the global batch
  void train();                        // train_iters iterations, logging every log_interval
  const std::vector<IterationResult>& history() const { return history_; }
  Gpt2Model& model() { return *model_; }
  int64_t iteration() const { return iteration_; }

 private:
  void load_micro_batch(uint64_t first_sample);
  double global_grad_norm_sq();
  void reduce_loss_stats(LossStats& s);

  TrainOptions opt_;
  Backend& be_;
  std::unique_ptr<SampleSource> data_;
  std::ostream& log_;
  std::unique_ptr<ParallelContext> own_parallel_;
  ParallelContext* par_;
  std::unique_ptr<Gpt2Model> model_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  LrSchedule schedule_;
  std::vector<int32_t> sample_, tokens_, targets_;  // host staging, sized once
  int64_t iteration_ = 0;
  uint64_t consumed_samples_ = 0;
  int64_t nan_iterations_ = 0;
  std::vector<IterationResult> history_;
};

// Builds the training data the options ask for: the GPTDataset train split of
// --data-path, or synthetic tokens. Sets opt.model.vocab_size from the tokenizer.
std::unique_ptr<SampleSource> make_train_data(TrainOptions& opt);

}  // namespace trident
