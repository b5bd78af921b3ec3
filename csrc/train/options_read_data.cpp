// The data and tokenizer flags into TrainOptions: --data-path and the per-split paths (or the
// files that stand for their words), BigScience's weighted split paths, the tokenizer, and the
// switches that change what a sample's documents train.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/data_args_file.h"
#include "train/options_internal.h"
#include "train/weighted_split_paths.h"

namespace trident::options_internal {
namespace {

// --data-args-path and --per-split-data-args-path (Megatron-core's): their words become
// --data-path's, or the per-split paths', and errors name the file.
void read_data_args_files(const Flags& f, TrainOptions& o) {
  if (f.has("data-args-path")) {
    if (!o.data_path.empty() || !o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty())
      throw ConfigError("--data-args-path stands for --data-path's words: give one of them (and not the per-split "
                        "paths with it)");
    const std::string path = f.str("data-args-path");
    o.data_path = read_data_args_file(path);
    o.data_path_flag = "--data-args-path " + path;
  }
  if (f.has("per-split-data-args-path")) {
    if (f.has("data-args-path") || !o.data_path.empty() || !o.train_data_path.empty() || !o.valid_data_path.empty() ||
        !o.test_data_path.empty())
      throw ConfigError("--per-split-data-args-path stands for --train-data-path, --valid-data-path and "
                        "--test-data-path: give it alone");
    const std::string path = f.str("per-split-data-args-path");
    const auto words = read_per_split_data_args_file(path);
    if (words[0].empty() && words[1].empty() && words[2].empty())  // (not synthetic tokens: data was asked for)
      throw ConfigError("--per-split-data-args-path " + path + ": no dataset in \"train\", \"valid\" or \"test\"");
    std::vector<std::string>* splits[3] = {&o.train_data_path, &o.valid_data_path, &o.test_data_path};
    const char* names[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; ++s) {
      *splits[s] = words[s];
      o.split_data_path_flags[s] = "--per-split-data-args-path " + path + " (" + names[s] + ")";
    }
  }
}

// BigScience's --train/--valid/--test-weighted-split-paths, or their -path files: the groups
// of each split (train/weighted_split_paths.h). Its data loading mode 2, instead of mode 1
// (--data-path and --split: BigScience asserts both are None) and of the per-split paths.
void read_weighted_split_paths(const Flags& f, TrainOptions& o) {
  const char* splits[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    const std::string flag = std::string("--") + splits[s] + "-weighted-split-paths";
    const std::string file_flag = flag + "-path", file_flag_name = file_flag.substr(2);
    if (f.has(file_flag_name.c_str())) {
      if (!o.weighted_split_paths[s].empty())
        throw ConfigError(flag + " and " + file_flag + " both give the " + splits[s] + " groups: give one");
      const std::string path = f.str(file_flag_name.c_str());
      o.weighted_split_paths[s] = read_weighted_split_paths_file(path, file_flag);
      o.weighted_split_paths_flags[s] = file_flag + " " + path;
    }
    if (!o.weighted_split_paths[s].empty())
      o.weighted_split_groups[s] =
          parse_weighted_split_paths(o.weighted_split_paths[s], o.weighted_split_paths_flags[s], /*one_group=*/s == 0);
  }
  if (!o.has_weighted_split_paths()) return;
  const std::string given = o.weighted_split_paths_flags[!o.weighted_split_groups[0].empty()   ? 0
                                                         : !o.weighted_split_groups[1].empty() ? 1
                                                                                               : 2];
  const std::string mode1 = !o.data_path.empty() ? o.data_path_flag
                            : f.has("split")     ? std::string("--split")
                                                 : std::string();
  if (!mode1.empty())
    throw ConfigError(given + " and " + mode1 + " are alternatives (BigScience's data loading modes 2 and 1): give one");
  for (int s = 0; s < 3; ++s)
    if (!(s == 0 ? o.train_data_path : s == 1 ? o.valid_data_path : o.test_data_path).empty())
      throw ConfigError(given + " and " + o.split_data_path_flags[s] + " are alternatives: give one");
}

}  // namespace

void read_data_flags(const Flags& f, TrainOptions& o) {
  f.get("vocab-file", o.vocab_file);
  f.get("merge-file", o.merge_file);
  f.get("tokenizer-type", o.tokenizer_type);
  if (o.tokenizer_type == "NullTokenizer" && f.has("vocab-size")) {
    // Megatron builds the tokenizer with or without data: its vocabulary, V + 1, is the model's
    // on synthetic tokens too (make_run_tokenizer sets the same with data).
    o.null_tokenizer_vocab_size = o.model.vocab_size;
    o.model.vocab_size = o.null_tokenizer_vocab_size + 1;
    o.eod_token = static_cast<int32_t>(o.null_tokenizer_vocab_size);
  }
  f.get("split", o.split);
  if (f.has("mid-level-dataset-surplus")) {
    double surplus = 0;
    f.get("mid-level-dataset-surplus", surplus);
    o.mid_level_dataset_surplus = surplus;
  }
  f.get("data-cache-path", o.data_cache_path);
  f.get("mock-data", o.mock_data);
  f.get("eod-mask-loss", o.eod_mask_loss);
  f.get("reset-position-ids", o.reset_position_ids);
  f.get("reset-attention-mask", o.reset_attention_mask);
  f.get("calculate-per-token-loss", o.calculate_per_token_loss);
  read_data_args_files(f, o);
  read_weighted_split_paths(f, o);
}

}  // namespace trident::options_internal
