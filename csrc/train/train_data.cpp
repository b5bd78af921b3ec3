#include "train/train_data.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/array_cache.h"
#include "data/tokenizer.h"
#include "train/batch_schedule.h"
#include "train/data_skip_ranges.h"
#include "train/same_data_check.h"
#include "train/synthetic_data.h"
#include "train/training_phases.h"

namespace trident {
namespace {

// Megatron's order for building the datasets: world rank 0 builds the index maps and
// writes their caches, then the other ranks build and find them, instead of every rank
// building the same maps at once (each holding them in memory) and writing the same files.
// Should rank 0 fail, every rank learns it and stops rather than wait for it.
TrainValidTest build_datasets_rank0_first(const GptDatasetConfig& dc, ParallelContext* par) {
  if (!par || par->world_size() == 1) return build_gpt_datasets(dc);
  // Before anything is built: a rank given other data stops the job at once.
  // The prefixes opened for the check are the build's: each is opened and validated once.
  OpenedDatasets opened(dc.vocab_size);
  check_every_rank_reads_the_same_data(*par->world, [&] { return gpt_dataset_identities(dc, opened); });
  TrainValidTest sets;
  const uint64_t failures_before = cache_write_failures();
  run_on_rank0_for_all(*par, [&] { sets = build_gpt_datasets(dc, &opened); });
  // Rank 0 has warned of a cache it could not write: the others, writing the same files, keep
  // quiet (one that fails where rank 0 did not, on a node-local --data-cache-path, still warns).
  const bool rank0_warned = any_rank(*par, par->world_rank() == 0 && cache_write_failures() > failures_before);
  if (par->world_rank() != 0) {
    std::optional<QuietCacheWarnings> quiet;
    if (rank0_warned) quiet.emplace();
    sets = build_gpt_datasets(dc, &opened);
  }
  return sets;
}

constexpr uint64_t kMaxSkippedSamples = uint64_t{1} << 48;

// The training samples that --skip-train-iteration-range reads past over the run: those its
// checkpoint's ranges read, and those of the ranges still to come from where it starts.
// Megatron-DeepSpeed builds the data for the run's samples alone and runs out on its skips'
// account (a weighted blend holds exactly what it is built for).
uint64_t samples_skip_ranges_need(const TrainOptions& opt) {
  if (opt.skip_train) return 0;  // no training data read
  const uint64_t to_come = samples_read_past(opt.skip_train_iteration_ranges, opt.start_applied_skip_ranges,
                                             make_batch_schedule(opt), opt.start_iteration,
                                             opt.start_consumed_samples, opt.train_iters);
  if (to_come > kMaxSkippedSamples - std::min(kMaxSkippedSamples, opt.start_range_skipped_samples))
    throw ConfigError("--skip-train-iteration-range: the ranges read past more than 2^48 samples, more than any "
                      "data holds");
  return opt.start_range_skipped_samples + to_come;
}

}  // namespace

std::unique_ptr<Tokenizer> make_run_tokenizer(TrainOptions& opt) {
  auto tokenizer = make_tokenizer(opt.tokenizer_type, opt.vocab_file, opt.merge_file, opt.null_tokenizer_vocab_size);
  opt.model.vocab_size = tokenizer->vocab_size();
  opt.eod_token = tokenizer->eod();
  return tokenizer;
}

TrainData make_train_data(TrainOptions& opt, ParallelContext* parallel, DataUse use) {
  resolve_schedule(opt);
  const uint64_t G = opt.global_batch_size;
  // Megatron's sizes: the run's training samples (run_training_samples), or with
  // --phase-transition-iterations the phase's, read from the phase's first sample; every
  // periodic evaluation plus the final one reads fresh validation samples; the test split is
  // read once.
  const bool phased = use == DataUse::kTraining && !opt.phase_transition_iterations.empty();
  const TrainingPhase phase =
      training_phase(phased ? opt.phase_transition_iterations : std::vector<int64_t>{}, opt.start_iteration, G,
                     run_training_samples(opt));
  const uint64_t train = phase.samples + samples_skip_ranges_need(opt);
  const auto phase_window = [&](std::unique_ptr<SampleSource> s) -> std::unique_ptr<SampleSource> {
    if (!phased) return s;
    return std::make_unique<PhaseWindow>(
        std::move(s), phase_data_start(phase, opt.start_iteration, opt.start_consumed_samples, G));
  };
  const auto evals = static_cast<uint64_t>(sized_validations(opt));
  const uint64_t valid = evals * opt.eval_iters * G, test = opt.eval_iters * G;
  TrainData d;
  if (!opt.has_data()) {
    const int64_t V = opt.model.vocab_size;
    const int T = opt.model.seq_length;
    d.train = phase_window(std::make_unique<SyntheticSource>(V, T, opt.seed));
    d.valid = std::make_unique<SyntheticSource>(V, T, opt.seed + 1);
    d.test = std::make_unique<SyntheticSource>(V, T, opt.seed + 2);
    return d;
  }
  make_run_tokenizer(opt);
  GptDatasetConfig dc;
  if (!opt.data_path.empty()) dc.blend = parse_data_path(opt.data_path, opt.data_path_flag);
  for (int s = 0; s < 3; ++s)
    for (const WeightedSplitGroup& g : opt.weighted_split_groups[s]) dc.weighted_split_groups[s].push_back(g.blend);
  const std::vector<std::string>* per_split[3] = {&opt.train_data_path, &opt.valid_data_path, &opt.test_data_path};
  for (int s = 0; s < 3; ++s)
    if (!per_split[s]->empty()) dc.per_split[s] = parse_data_path(*per_split[s], opt.split_data_path_flags[s]);
  dc.split = opt.split;
  dc.mid_level_dataset_surplus = opt.mid_level_dataset_surplus;
  dc.multiple_validation_sets = opt.multiple_validation_sets;
  dc.seq_length = opt.model.seq_length;
  dc.seed = opt.seed;
  dc.train_samples = train;
  dc.valid_samples = opt.full_validation ? GptDatasetConfig::kWholeSplit : opt.eval_iters > 0 ? valid : 0;
  dc.test_samples = opt.eval_iters > 0 ? test : 0;
  dc.cache_dir = opt.data_cache_path;
  dc.vocab_size = opt.model.vocab_size;
  TrainValidTest sets = build_datasets_rank0_first(dc, parallel);
  if (!parallel || parallel->world_rank() == 0)
    for (const std::string& w : sets.warnings)  // one write a line: mpirun interleaves the ranks' output by writes
      std::cerr << ("trident: warning: " + w + "\n") << std::flush;
  if (!sets.train && !opt.data_path.empty()) throw ConfigError("--split: the training split of --data-path is empty");
  if (!sets.train && !opt.train_data_path.empty())
    throw ConfigError(opt.split_data_path_flags[0] + ": no training documents");
  if (!sets.train && use == DataUse::kTraining && opt.has_weighted_split_paths())
    throw ConfigError(opt.weighted_split_paths_flags[0] + " is required (training needs its group)");
  if (!sets.train && use == DataUse::kTraining)
    throw ConfigError(opt.split_data_path_flags[0] == "--train-data-path"
                          ? "--train-data-path is required with --valid-data-path or --test-data-path"
                          : opt.split_data_path_flags[0] + ": no dataset (training needs one)");
  if (!sets.train)  // evaluation only: a training stream the caller never reads
    sets.train = std::make_unique<SyntheticSource>(opt.model.vocab_size, opt.model.seq_length, opt.seed);
  d.train = phase_window(std::move(sets.train));
  d.valid = std::move(sets.valid);
  d.valid_sets = std::move(sets.valid_sets);
  d.test = std::move(sets.test);
  d.test_sets = std::move(sets.test_sets);
  return d;
}

}  // namespace trident
