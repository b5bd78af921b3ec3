// metadata.json: what a checkpoint holds and how it was written.
//
// {
//   "format": "trident-checkpoint", "format_version": 1,
//   "iteration": 100, "consumed_samples": 12800,
//   "model": {every ModelConfig field; "dtype": "fp32" | "fp16" | "bf16"; "gelu": "erf" for the
//             exact GELU, written only then: absent means "tanh"},
//   "layout": {"tp": 2, "pp": 1, "dp": 4, "zero_stage": 1},  (+ "virtual_pipeline_chunks": N when N > 1,
//              and Megatron's uneven split when given: "decoder_first_pipeline_num_layers": N,
//              "decoder_last_pipeline_num_layers": N, "account_for_embedding_in_pipeline_split": true,
//              "account_for_loss_in_pipeline_split": true, "pipeline_model_parallel_layout": "Et|tL")
//   "trainer_state": {...opaque: RNG, loss scaler, scheduler, data order...},
//   "files": [{"path": "mp_rank_00/model.safetensors", "size": 123, "xxh3": "16 hex digits"}, ...]
// }
// File paths are relative to the directory holding metadata.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "parallel/pipeline_split.h"

namespace trident {

inline constexpr const char* kMetadataFileName = "metadata.json";
inline constexpr int kCheckpointFormatVersion = 1;

struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1;
  int zero_stage = 0;
  // Model chunks per pipeline stage (interleaved schedule): they decide which stage holds
  // which layers (pipeline_chunk_layers). Written only when above 1.
  int virtual_pipeline_chunks = 1;
  UnevenPipeline uneven;  // written only when given
  bool operator==(const ParallelLayout&) const = default;
};

// The layers of each stage and chunk of the run that wrote a checkpoint.
PipelineSplit pipeline_split_of(const ModelConfig& model, const ParallelLayout& l);

// Whether two layouts of `model` have the same tp, dp and ZeRO stage and place every layer on
// the same stage and chunk (Megatron's flags spell some splits two ways: at 2 layers and pp 2,
// --decoder-first-pipeline-num-layers 1 is the even split). Both splits must be valid.
bool same_layout(const ParallelLayout& a, const ParallelLayout& b, const ModelConfig& model);

// "tp 2 x pp 1 x dp 4, zero 1" (and ", N model chunks a stage" when N > 1), for messages.
std::string layout_text(const ParallelLayout& l);

struct FileRecord {
  std::string path;  // relative to the checkpoint directory
  uint64_t size = 0;
  std::string xxh3;  // checksum.h
  bool operator==(const FileRecord&) const = default;
};

struct CheckpointMetadata {
  int format_version = kCheckpointFormatVersion;
  ModelConfig model;
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  ParallelLayout layout;
  nlohmann::json trainer_state = nlohmann::json::object();
  std::vector<FileRecord> files;
};

nlohmann::json model_config_to_json(const ModelConfig& c);
// Throws IoError "<source>: field 'model.<key>': <problem>".
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source);

nlohmann::json metadata_to_json(const CheckpointMetadata& m);
// Validates every field; throws IoError "<source>: field '<path>': <problem>".
CheckpointMetadata metadata_from_json(const nlohmann::json& j, const std::string& source);

// The trainer_state fields trident reads, checked for their kinds and ranges (a hand edit, a
// garbled conversion): counts are integers in [0, 9e15], seeds integers >= 0, rates and the
// FLOPs finite and >= 0, the schedule's styles strings, the loss scale positive. Throws
// IoError "<source>: field 'trainer_state.<key>': <problem>"; metadata_from_json calls it.
void check_trainer_state(const nlohmann::json& trainer_state, const std::string& source);

// Writes `path` atomically (pretty-printed JSON).
void write_metadata(const std::string& path, const CheckpointMetadata& m);
// Reads and validates; IoError names the file and the field.
CheckpointMetadata read_metadata(const std::string& path);

// The checkpoint a checkpoint's run continued from, in the same directory: the run's previous
// save, or the checkpoint it resumed from; none for a run from scratch (or a fine-tune, one
// resumed from another directory, a conversion). trainer_state["previous_checkpoint_iteration"]
// holds it (an iteration, or null for none); checkpoints of older trident builds do not say.
inline constexpr const char* kPreviousCheckpointKey = "previous_checkpoint_iteration";
struct PreviousCheckpoint {
  enum Kind { kNotRecorded, kRecorded, kUnreadable } kind = kNotRecorded;  // unreadable: metadata.json
  std::optional<int64_t> iteration;  // when recorded: nullopt for none
};
PreviousCheckpoint read_previous_checkpoint(const std::filesystem::path& iteration_dir);

// trainer_state keys that trident's saves and the Megatron import share: the dropout seed (the
// RNG state: trident's dropout is Philox keyed by it), the --seed that ordered the samples
// (data/gpt_dataset.h), and the Adam hyperparameters of the run ({"beta1", "beta2", "eps"}).
inline constexpr const char* kRngStateKey = "dropout_seed";
inline constexpr const char* kDataSeedKey = "data_seed";
inline constexpr const char* kAdamKey = "adam";

// The order of the samples that a checkpoint's consumed samples count in:
// trainer_state[kSampleOrderKey] is kSampleOrder, Megatron's (numpy's shuffles, data/
// gpt_dataset.h), in checkpoints of trident since it took that order and in Megatron imports
// with their training state; older trident builds had an order of their own.
inline constexpr const char* kSampleOrderKey = "sample_order";
inline constexpr const char* kSampleOrder = "megatron";

// --skip-train-iteration-range's trainer_state keys (train/data_skip_ranges.h), written once a
// range has been applied: the ranges applied ([[first, last], ...]) and the samples they read
// past, which the training data is read beyond the consumed samples by.
inline constexpr const char* kAppliedSkipRangesKey = "applied_skip_ranges";
inline constexpr const char* kSkippedRangeSamplesKey = "skipped_range_samples";

// A FileRecord for `dir/rel` (size and checksum read from disk).
FileRecord make_file_record(const std::filesystem::path& dir, const std::string& rel);
// Checks every listed file under `dir` (size and checksum); IoError names the first bad one.
void verify_checkpoint_files(const std::filesystem::path& dir, const CheckpointMetadata& m);

}  // namespace trident
