// trident-eval: lm loss and perplexity of a checkpoint, loaded at any layout (one process, or
// under mpirun with --tensor-model-parallel-size / --pipeline-model-parallel-size like
// trident-train; the rest of the world is data parallel).
//
//   trident-eval --load DIR [--iteration N] [trident-train's model, data and layout flags]
//       [--split-name valid|test] [--first-sample N]
//   trident-eval --load DIR --sequential --data-path PREFIX --vocab-file ... [--max-tokens N]
//
// Split mode evaluates --eval-iters global batches of the validation (default) or test split
// built exactly as trident-train builds it (make_train_data: same --data-path, --split,
// --seed, --seq-length, --train-iters/--eval-interval/--eval-iters and global batch, or the
// synthetic streams without --data-path). Like training's final evaluation, validation starts
// at the checkpoint's consumed validation samples and test at 0 (--first-sample overrides).
// Sequential mode reads one .bin/.idx prefix in file order as consecutive windows of
// seq-length + 1 tokens that overlap by one token, like GPTDataset's samples, without
// shuffling: every token after the first is predicted exactly once; --max-tokens N reads only
// the first N tokens. The last window and the last global batch are padded with ignored
// positions (token -1: no embedding row, no loss), so nothing is dropped and nothing is
// counted twice.
//
// The parameters are loaded exactly (canonical tensors of whatever layout wrote the
// checkpoint, sliced for this rank); optimizer state is not read. The model flags must
// describe the checkpoint's model (checked; one error line naming the flag otherwise).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/canonical_slices.h"
#include "ckpt/offline_checkpoint.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "kernels/backends.h"
#include "parallel/collective_timeout.h"
#include "parallel/parallel_context.h"
#include "mpi_tool_main.h"
#include "tools/integer_flag.h"
#include "tools/tool_flags.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_to_load.h"
#include "train/same_data_check.h"
#include "train/synthetic_data.h"
#include "train/train_data.h"
#include "train/trainer.h"
#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace trident {
namespace {
namespace fs = std::filesystem;

constexpr const char* kUsage =
    "Usage: trident-eval --load DIR [--iteration N] [--split-name valid|test] [--first-sample N]\n"
    "                    [--sequential [--max-tokens N]] [trident-train flags]\n"
    "  --load DIR          checkpoint directory (its latest iteration) or one iter_NNNNNNN folder;\n"
    "                      with --non-persistent-ckpt-type global the one trident-train resumes from\n"
    "  --iteration N       evaluate DIR/iter_N instead of the latest (Megatron's --ckpt-step N)\n"
    "  --split-name S      valid (default) or test: --eval-iters global batches of the split built as\n"
    "                      trident-train builds it (pass the training run's data and length flags)\n"
    "  --first-sample N    first sample of the split (default: where training's final evaluation\n"
    "                      reads: the checkpoint's consumed validation samples, 0 for test)\n"
    "  --sequential        read the --data-path prefix in order as consecutive windows of\n"
    "                      seq-length + 1 tokens (no shuffling, every token predicted once)\n"
    "  --max-tokens N      with --sequential: read only the first N tokens\n"
    "Model, data, batch and layout flags are trident-train's (trident-train --help; with\n"
    "--use-checkpoint-args the model shape flags not given come from the checkpoint); run under\n"
    "mpirun with --tensor-model-parallel-size / --pipeline-model-parallel-size for other layouts.\n";


struct EvalFlags {
  std::optional<int64_t> iteration, first_sample;
  std::string split_name = "valid";
  bool sequential = false, help = false;
  uint64_t max_tokens = 0;  // 0: all
  bool split_given = false, max_tokens_given = false;
};

constexpr long long kMaxCount = std::numeric_limits<int64_t>::max();

// Takes trident-eval's own flags out of argv; the rest is trident-train's.
std::vector<std::string> take_eval_flags(int argc, char** argv, EvalFlags& f) {
  std::vector<std::string> rest = take_tool_flags(argc, argv, "trident-eval", [&](const ToolFlag& t) {
    if (t.name == "--help") {
      f.help = true;
    } else if (t.name == "--sequential") {
      t.no_value();
      f.sequential = true;
    } else if (t.name == "--iteration") {
      f.iteration = parse_integer_flag("iteration", t.value(), 0, kMaxIterationFlag);
    } else if (t.name == "--first-sample") {
      f.first_sample = parse_integer_flag("first-sample", t.value(), 0, kMaxCount);
    } else if (t.name == "--max-tokens") {
      f.max_tokens = static_cast<uint64_t>(parse_integer_flag("max-tokens", t.value(), 2, kMaxCount));
      f.max_tokens_given = true;
    } else if (t.name == "--split-name") {
      f.split_name = t.value();
      f.split_given = true;
      if (f.split_name != "valid" && f.split_name != "test")
        throw ConfigError("--split-name: '" + f.split_name + "' is not valid or test");
    } else {
      return false;
    }
    return true;
  });
  if (f.sequential && (f.split_given || f.first_sample))
    throw ConfigError(std::string("--sequential reads the whole prefix in order; --") +
                      (f.split_given ? "split-name" : "first-sample") + " does not apply");
  if (f.max_tokens_given && !f.sequential) throw ConfigError("--max-tokens needs --sequential");
  return rest;
}

// trident-eval's own flags, as flags_every_rank_shares gives trident-train's: a rank that
// evaluated another split, iteration or part of the data would add its losses to the others'.
std::string eval_flags_every_rank_shares(const EvalFlags& f) {
  const auto value = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string("(none)"); };
  return "--iteration " + value(f.iteration) + "\n--first-sample " + value(f.first_sample) + "\n--split-name " +
         f.split_name + "\n--sequential " + (f.sequential ? "true" : "false") + "\n--max-tokens " +
         std::to_string(f.max_tokens) + "\n";
}

// One .bin/.idx prefix in file order as windows of T + 1 tokens starting every T tokens,
// padded with -1 (ignored) to a whole number of global batches. The ids read are checked
// against the vocabulary (IndexedDataset).
class SequentialWindows final : public SampleSource {
 public:
  SequentialWindows(std::shared_ptr<const IndexedDataset> data, int seq_length, uint64_t max_tokens,
                    uint64_t global_batch)
      : data_(std::move(data)), T_(seq_length) {
    const auto sizes = data_->sizes();
    starts_.reserve(sizes.size() + 1);
    uint64_t total = 0;
    for (int32_t s : sizes) {
      starts_.push_back(total);
      total += static_cast<uint64_t>(s);
    }
    starts_.push_back(total);
    tokens_ = max_tokens > 0 ? std::min(total, max_tokens) : total;
    if (tokens_ < 2)
      throw ConfigError("--data-path: " + data_->prefix() + " has " + std::to_string(tokens_) +
                        " tokens; --sequential needs at least 2");
    windows_ = (tokens_ - 1 + T_ - 1) / T_;
    padded_ = (windows_ + global_batch - 1) / global_batch * global_batch;
  }
  uint64_t size() const override { return padded_; }
  const std::string& prefix() const { return data_->prefix(); }
  uint64_t windows() const { return windows_; }
  uint64_t tokens() const { return tokens_; }
  void get(uint64_t i, int32_t* out) const override {
    const uint64_t begin = std::min(i * T_, tokens_), end = std::min(i * T_ + T_ + 1, tokens_);
    std::fill(out, out + T_ + 1, -1);
    uint64_t pos = begin;
    while (pos < end) {  // copy [pos, end) item by item
      const size_t item = std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin() - 1;
      const uint64_t offset = pos - starts_[item];
      const uint64_t n = std::min(end, starts_[item + 1]) - pos;
      data_->read(item, offset, n, out + (pos - begin));
      pos += n;
    }
  }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  uint64_t T_;
  std::vector<uint64_t> starts_;  // first token of each item, then the total
  uint64_t tokens_ = 0, windows_ = 0, padded_ = 0;
};

int run(int argc, char** argv) {
  EvalFlags ef;
  std::vector<std::string> args = take_eval_flags(argc, argv, ef);
  if (ef.help) {
    std::cout << kUsage;
    return 0;
  }
  TrainOptions opt;
  if (!parse_train_options(args, opt)) return 0;
  if (opt.load.empty()) throw ConfigError("--load: required (the checkpoint to evaluate)");
  if (!opt.save.empty()) throw ConfigError("--save: trident-eval writes no checkpoint (see trident-convert)");
  if (!opt.save_canonical.empty()) throw ConfigError("--save-canonical: not a trident-eval flag");
  if (opt.eval_iters <= 0 && !ef.sequential) throw ConfigError("--eval-iters must be positive");
  // Megatron's --ckpt-step is trident-eval's --iteration.
  check_one_iteration_flag(opt.ckpt_step >= 0, ef.iteration.has_value());
  if (opt.ckpt_step >= 0) ef.iteration = opt.ckpt_step;

  // --use-mp-args-from-checkpoint-args: the layout of the checkpoint evaluated, before the grid.
  const std::string mp_taken = take_parallel_args(opt, ef.iteration.value_or(-1));
  // As trident-train: the backend first (NcclComm runs on its GPU), TF32 as in training.
  auto backend = make_backend(opt.device, backend_options(opt));
  set_collective_timeout(opt.distributed_timeout_minutes);
  auto parallel = make_parallel_context(opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size,
                                        resolve_comm_kind(opt.comm, *backend), backend.get(),
                                        flags_every_rank_shares(opt) + eval_flags_every_rank_shares(ef));
  resolve_global_batch_size(opt, parallel->grid.shape.dp);
  if (!mp_taken.empty() && parallel->world_rank() == 0)
    std::cout << "trident-eval: --use-mp-args-from-checkpoint-args: " << mp_taken << std::endl;
  // A bad checkpoint is bad input: report it like a configuration error (one line, exit 2).
  // Each rank opens only the files holding its slices, so a corrupt file is reported by
  // rank 0 when rank 0 reads it, else by a rank that does.
  fs::path dir;
  std::unique_ptr<ShardedCheckpointReader> ckpt;
  try {
    if (opt.local_checkpoints() && parallel->world_rank() == 0)
      std::cout << "trident-eval: note: local non-persistent checkpoints are not read; --load's is evaluated"
                << std::endl;
    if (!ef.iteration && opt.non_persistent_ckpt_type == "global") {  // the checkpoint trident-train resumes from
      std::string passed_over;
      const std::optional<fs::path> resumed = checkpoint_to_load(opt, &passed_over);
      if (const std::string mismatch = checkpoint_choice_mismatch(*parallel->world, opt, resumed); !mismatch.empty())
        throw ConfigError(mismatch);
      if (!passed_over.empty() && parallel->world_rank() == 0)
        std::cout << "trident-eval: note: " << passed_over << std::endl;
      if (!resumed) throw ConfigError("--load: no checkpoint in " + opt.load);
      dir = *resumed;
    } else {
      dir = resolve_checkpoint_dir(opt.load, ef.iteration, opt.ckpt_step >= 0 ? opt.ckpt_step_flag : "--iteration");
    }
    ckpt = std::make_unique<ShardedCheckpointReader>(dir);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  const CheckpointMetadata& meta = ckpt->metadata();
  if (opt.use_checkpoint_args) {
    const std::string taken = take_checkpoint_args(opt, &meta.model);
    if (parallel->world_rank() == 0) std::cout << "trident-eval: --use-checkpoint-args: " << taken << std::endl;
  }

  // What is evaluated: one split, or with --multiple-validation-sets each validation set.
  struct EvalSet {
    std::unique_ptr<SampleSource> data;
    std::string label;  // "valid set", "validation-1 set", "sequential data"
    uint64_t first = 0;
    int64_t iterations = 0;
  };
  std::unique_ptr<SampleSource> train;
  std::vector<EvalSet> sets;
  const SequentialWindows* seq = nullptr;
  if (ef.sequential) {
    if (opt.data_path.empty()) throw ConfigError("--sequential needs --data-path PREFIX");
    const auto blend = parse_data_path(opt.data_path, opt.data_path_flag);
    if (blend.prefixes.size() != 1)
      throw ConfigError(opt.data_path_flag + ": --sequential reads one prefix, not a blend");
    make_run_tokenizer(opt);
    try {
      // Ranks name the prefix by their nodes' paths: its content must be the same.
      OpenedDatasets opened(opt.model.vocab_size);
      check_every_rank_reads_the_same_data(*parallel->world,
                                           [&] { return data_blend_identities(blend, "sequential", opened); });
      auto s = std::make_unique<SequentialWindows>(opened.open(blend.prefixes[0]), opt.model.seq_length,
                                                   ef.max_tokens, static_cast<uint64_t>(opt.global_batch_size));
      seq = s.get();
      const int64_t iterations = static_cast<int64_t>(s->size() / opt.global_batch_size);
      sets.push_back({std::move(s), "sequential data", 0, iterations});
    } catch (const IoError& e) {
      throw ConfigError(e.what());
    }
    // The trainer needs a training stream; it is never read.
    train = std::make_unique<SyntheticSource>(opt.model.vocab_size, opt.model.seq_length, opt.seed);
  } else {
    if (!opt.has_data() && !opt.mock_data && parallel->world_rank() == 0)  // as trident-train says
      std::cout << "trident-eval: no --data-path: evaluating on synthetic tokens (--mock-data silences this)"
                << std::endl;
    TrainData d = make_train_data(opt, parallel.get(), DataUse::kEvaluationOnly);
    train = std::move(d.train);
    const bool valid = ef.split_name == "valid";
    const uint64_t consumed_valid = meta.trainer_state.value("consumed_valid_samples", uint64_t{0});
    uint64_t first = ef.first_sample ? static_cast<uint64_t>(*ef.first_sample) : valid ? consumed_valid : 0;
    if (opt.has_weighted_split_paths()) {  // BigScience's groups: each set alone, by its name
      auto& group_sets = valid ? d.valid_sets : d.test_sets;
      const auto& groups = opt.weighted_split_groups[valid ? 1 : 2];
      if (!ef.first_sample && valid) first = validation_set_position(opt, consumed_valid, group_sets.size());
      for (size_t k = 0; k < group_sets.size(); ++k)
        sets.push_back({std::move(group_sets[k]), groups[k].name + " set", first, opt.eval_iters});
    } else if (opt.multiple_validation_sets && valid) {
      for (size_t k = 0; k < d.valid_sets.size(); ++k)
        sets.push_back({std::move(d.valid_sets[k]), "validation-" + std::to_string(k) + " set", first, opt.eval_iters});
    } else if (auto data = std::move(valid ? d.valid : d.test)) {
      sets.push_back({std::move(data), ef.split_name + " set", first, opt.eval_iters});
    }
    if (sets.empty())
      throw ConfigError("--split-name: the " + ef.split_name + " split is empty (" +
                        (!opt.data_path.empty()          ? std::string("--split leaves --data-path none")
                         : opt.has_weighted_split_paths() ? "no --" + ef.split_name + "-weighted-split-paths group"
                                                          : "no documents in --" + ef.split_name + "-data-path") +
                        ")");
    if (opt.full_validation && valid) {  // each set whole, from its start
      if (ef.first_sample) throw ConfigError("--first-sample: --full-validation reads the validation split from its start");
      for (EvalSet& set : sets) {
        set.first = 0;
        set.iterations = full_validation_iterations(set.data->size(), opt.global_batch_size);
        if (set.iterations == 0)
          throw ConfigError("--full-validation: the " + (sets.size() > 1 ? set.label : "validation split") +
                            " holds " + std::to_string(set.data->size()) + " samples, less than a global batch");
      }
    }
  }

  check_same_model_shape(meta.model, opt.model, dir);

  // The model only evaluates, as trident-train's under --skip-train: it keeps nothing for a
  // backward, and the training data need not cover --train-iters.
  opt.skip_train = true;
  Trainer trainer(opt, *backend, std::move(train), std::cout, parallel.get());
  try {
    load_model_parameters(*ckpt, trainer.model().params(), *backend);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  for (const EvalSet& set : sets) {
    const uint64_t end = set.first + static_cast<uint64_t>(set.iterations) * static_cast<uint64_t>(opt.global_batch_size);
    if (end <= set.data->size()) continue;
    const std::string reads = detail::concat("[", set.first, ", ", end, ") (", set.iterations, " global batches of ",
                                             opt.global_batch_size, ")");
    if (ef.first_sample)  // past the split's end: the flag that asked for it
      throw ConfigError(detail::concat("--first-sample: the ", ef.split_name, " split has ", set.data->size(),
                                       " samples; ", reads, " runs past its end"));
    // The split's samples are drawn as trident-train draws them, for every evaluation of the
    // run (Megatron's sizing): flags other than the training run's size it otherwise.
    throw ConfigError(detail::concat(
        "--eval-iters: drawn for these flags, the ", set.label, " holds ", set.data->size(),
        " samples, and the final evaluation reads ", reads,
        set.first > 0 ? detail::concat(" after the ", set.first, " the checkpoint's run consumed") : std::string(),
        ": give the training run's --train-iters (or --train-samples), --eval-interval, --eval-iters and "
        "--global-batch-size"));
  }
  if (parallel->world_rank() == 0) {
    const GridShape& g = parallel->grid.shape;
    std::cout << "trident-eval: loaded " << dir.string() << " (iteration " << meta.iteration << ", written at "
              << layout_text(meta.layout) << "), evaluated at tp "
              << g.tp << " x pp " << g.pp << " x dp " << g.dp << ", backend " << backend->name() << ", dtype "
              << dtype_name(opt.model.dtype) << std::endl;
  }
  for (const EvalSet& set : sets) {
    const EvalResult r = trainer.evaluate(*set.data, set.first, set.iterations);
    // An evaluation cut short has no loss (Trainer::evaluate returns none): not a perfect score.
    if (r.timed_out)
      throw ConfigError("--exit-duration-in-mins: the time ran out before the evaluation's end (the minutes count "
                        "from the start, loading included): no result");
    if (parallel->world_rank() != 0) continue;
    if (seq)
      std::cout << "trident-eval: sequential " << seq->prefix() << ": " << seq->tokens() << " tokens in "
                << seq->windows() << " windows of " << opt.model.seq_length + 1 << " (" << set.iterations
                << " global batches of " << opt.global_batch_size << ")" << std::endl;
    else
      std::cout << "trident-eval: " << ((opt.multiple_validation_sets && ef.split_name == "valid") || opt.has_weighted_split_paths() ? set.label : ef.split_name + " split")
                << ", samples [" << set.first << ", "
                << set.first + static_cast<uint64_t>(set.iterations) * opt.global_batch_size << ") ("
                << set.iterations << " global batches of " << opt.global_batch_size << ")" << std::endl;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  " evaluation at iteration %lld on %s | lm loss value: %.9E | lm loss PPL: %.9E | tokens: %.0f |",
                  static_cast<long long>(meta.iteration), set.label.c_str(), r.loss,
                  std::exp(std::min(20.0, r.loss)), r.tokens);
    std::cout << buf << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_mpi_tool("trident-eval", &argc, &argv, [&] { return trident::run(argc, argv); });
}
