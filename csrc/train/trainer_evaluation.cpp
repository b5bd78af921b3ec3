// The trainer's evaluation data and what it reports of an evaluation: the validation and test
// sets, how many iterations a validation reads and where, Megatron's evaluation block and
// scalars, and the final evaluations. The evaluation itself (Trainer::evaluate) runs the
// pipeline's steps in trainer.cpp; the validations during training are in trainer_loop.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "core/error.h"
#include "train/tensorboard_tags.h"
#include "train/trainer.h"

namespace trident {

void Trainer::set_evaluation_data(std::unique_ptr<SampleSource> valid, std::unique_ptr<SampleSource> test) {
  std::vector<std::unique_ptr<SampleSource>> sets;
  if (valid) sets.push_back(std::move(valid));
  set_evaluation_data(std::move(sets), std::move(test));
}

void Trainer::set_evaluation_data(std::vector<std::unique_ptr<SampleSource>> valid_sets,
                                  std::unique_ptr<SampleSource> test) {
  std::vector<std::unique_ptr<SampleSource>> tests;
  if (test) tests.push_back(std::move(test));
  set_evaluation_data(std::move(valid_sets), std::move(tests));
}

void Trainer::set_evaluation_data(std::vector<std::unique_ptr<SampleSource>> valid_sets,
                                  std::vector<std::unique_ptr<SampleSource>> test_sets) {
  valid_ = std::move(valid_sets);
  tests_ = std::move(test_sets);
  // An evaluation split can be shorter than the run reads (an unweighted blend holds one
  // epoch): say so now rather than at the evaluation that runs out.
  check_data_covers_run(iteration_, consumed_samples_, consumed_valid_samples_, range_skipped_samples_);
  if (!opt_.full_validation) return;
  for (size_t k = 0; k < valid_.size(); ++k) {
    const int64_t n = validation_iterations(k);
    const std::string split = opt_.multiple_validation_sets || !opt_.weighted_split_groups[1].empty()
                                  ? validation_set_name(k) + " set"
                                  : "validation split";
    if (n == 0)
      throw ConfigError("--full-validation: the " + split + " holds " + std::to_string(valid_[k]->size()) +
                        " samples, less than a global batch (--global-batch-size " +
                        std::to_string(opt_.global_batch_size) + "): nothing to validate on");
    *out_ << "trident: --full-validation: " << n << " iterations of " << opt_.global_batch_size << " samples read "
          << n * opt_.global_batch_size << " of the " << split << "'s " << valid_[k]->size()
          << " samples at each validation" << std::endl;
  }
}

void Trainer::log_evaluation(const std::string& where, const EvalResult& r, bool to_tensorboard,
                             const std::string& set_name) {
  // Megatron's block; PPL = exp(min(20, loss)).
  const double ppl = std::exp(std::min(20.0, r.loss));
  char buf[320];
  std::snprintf(buf, sizeof buf, " %s loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", set_name.c_str(),
                where.c_str(), r.loss, ppl);
  const std::string line = buf, dashes(line.size() + 1, '-');
  *out_ << dashes << "\n" << line << "\n" << dashes << std::endl;
  // Megatron-LM writes the validation's; Megatron-DeepSpeed also the test set's, in the
  // same panel. Both at the training's position, the perplexity only when asked for.
  const bool test = where.find("test") != std::string::npos;
  if (!tensorboard_ || !to_tensorboard) return;
  MegatronScalars tb = scalars();
  if (!opt_.weighted_split_groups[test ? 2 : 1].empty()) {  // set_name: a group's
    const std::string name = test ? "lm loss test" : "lm loss validation";
    if (!test || tb.tags() == TensorBoardTags::kMegatronDeepSpeed) {
      tb.group_metric(set_name, name, r.loss, run_position());
      if (opt_.log_validation_ppl_to_tensorboard) tb.group_metric(set_name, name + " ppl", ppl, run_position());
    }
    return;
  }
  if (!test || tb.tags() == TensorBoardTags::kMegatronDeepSpeed) {
    const std::string name = test ? "lm loss test" : "lm loss " + set_name;
    tb.metric(name, r.loss, run_position());
    if (opt_.log_validation_ppl_to_tensorboard) tb.metric(name + " ppl", ppl, run_position());
  }
}

bool Trainer::final_evaluations(bool to_tensorboard) {
  const auto final_evaluation = [&](const std::string& where, const SampleSource& data, uint64_t first,
                                    int64_t iterations, const std::string& set_name) {
    const EvalResult e = evaluate(data, first, iterations);
    if (e.timed_out)
      say_out_of_time("during the evaluation " + where);
    else if (e.stopped)
      *out_ << "trident: stop requested by a signal during the evaluation " << where << " at iteration "
            << iteration_ << ": no more evaluation" << std::endl;
    else
      log_evaluation("iteration " + std::to_string(iteration_) + " " + where, e, to_tensorboard, set_name);
    return !e.timed_out && !e.stopped;
  };
  for (size_t k = 0; k < valid_.size(); ++k)
    if (validation_iterations(k) > 0 && !final_evaluation("on validation set", *valid_[k], validation_start(),
                                                          validation_iterations(k), validation_set_name(k)))
      return false;
  for (size_t k = 0; k < tests_.size(); ++k)
    if (opt_.eval_iters > 0 && !final_evaluation("on test set", *tests_[k], 0, opt_.eval_iters, test_set_name(k)))
      return false;
  return true;
}

int64_t full_validation_iterations(uint64_t samples, int64_t global_batch_size) {
  return static_cast<int64_t>(samples / static_cast<uint64_t>(global_batch_size));
}

int64_t Trainer::validation_iterations(size_t k) const {
  if (opt_.full_validation) return full_validation_iterations(valid_[k]->size(), opt_.global_batch_size);
  return opt_.eval_iters;
}

int64_t Trainer::validation_iterations() const {
  int64_t n = 0;
  for (size_t k = 0; k < valid_.size(); ++k) n += validation_iterations(k);
  return n;
}

std::string Trainer::validation_set_name(size_t k) const {
  if (k < opt_.weighted_split_groups[1].size()) return opt_.weighted_split_groups[1][k].name;
  return opt_.multiple_validation_sets ? "validation-" + std::to_string(k) : "validation";
}

std::string Trainer::test_set_name(size_t k) const {
  return k < opt_.weighted_split_groups[2].size() ? opt_.weighted_split_groups[2][k].name : "validation";
}

uint64_t Trainer::validation_start() const {
  return opt_.full_validation ? 0 : validation_set_position(consumed_valid_samples_);
}

uint64_t Trainer::validation_set_position(uint64_t consumed_valid) const {
  return trident::validation_set_position(opt_, consumed_valid, valid_.size());
}

uint64_t validation_set_position(const TrainOptions& opt, uint64_t consumed_valid, size_t sets) {
  const bool own_positions = !opt.weighted_split_groups[1].empty() && sets > 1;
  return own_positions ? consumed_valid / sets : consumed_valid;
}

}  // namespace trident
