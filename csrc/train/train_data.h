// What a run reads: its tokenizer, and its training, validation and test data (the GPTDataset
// splits of --data-path and its per-split paths, or synthetic tokens), built in Megatron's
// order across the ranks.
#pragma once

#include <memory>
#include <vector>

#include "data/gpt_dataset.h"
#include "parallel/parallel_context.h"
#include "train/options.h"

namespace trident {

class Tokenizer;

// The run's tokenizer (--tokenizer-type, --vocab-file, --merge-file); sets the model's
// vocabulary and the end-of-document id (--eod-mask-loss) from it.
std::unique_ptr<Tokenizer> make_run_tokenizer(TrainOptions& opt);

struct TrainData {
  std::unique_ptr<SampleSource> train, valid, test;
  std::vector<std::unique_ptr<SampleSource>> valid_sets;  // --multiple-validation-sets (valid then null)
  std::vector<std::unique_ptr<SampleSource>> test_sets;   // test weighted split groups (test then null)
};

// Builds the data the options ask for: the GPTDataset splits of --data-path (sized for
// training and every evaluation), or synthetic tokens (of --vocab-size, without a tokenizer).
// With data, sets opt.model.vocab_size from the tokenizer; samples are checked against it as
// they are read. With `parallel` (collective
// then), world rank 0 builds first and writes the index caches, and the other ranks build
// after it, from those caches; a failure on rank 0 stops every rank. Rank 0 prints the
// data's warnings (an empty validation split ...) to stderr.
// kEvaluationOnly (trident-eval): per-split paths without --train-data-path are fine; the
// training stream is then synthetic and never read.
enum class DataUse { kTraining, kEvaluationOnly };
TrainData make_train_data(TrainOptions& opt, ParallelContext* parallel = nullptr, DataUse use = DataUse::kTraining);

}  // namespace trident
