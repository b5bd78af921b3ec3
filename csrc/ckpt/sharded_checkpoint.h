// A trident checkpoint as written by many ranks, read back as canonical tensors.
//
// Inside DIR/iter_NNNNNNN/ every (tp, pp) rank folder (rank_dir_name) holds
//   model.safetensors      written by DP rank 0: the rank's TP slice of each parameter it
//                          holds, under the canonical name, in the model's dtype;
//   optim_dp<D>.safetensors one per DP rank that owns optimizer state (every DP rank with
//                          ZeRO, DP rank 0 without): pieces of the TP slices' flat ranges,
//                          fp32, keyed "<name>|<state>|<first local index>" with state
//                          master, exp_avg or exp_avg_sq;
// each file's __metadata__ says tp, tp_rank, pp_rank and dp_rank. metadata.json lists every
// file with its size and checksum. Because pieces name canonical parameters and local
// index ranges under the layout that wrote them, any other layout can rebuild what it
// needs: the reader assembles canonical tensors (the word embedding without vocabulary
// padding), whole or only the elements of one rank's (tp, shard) slice, from the files that
// hold them.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/index_ranges.h"
#include "ckpt/metadata.h"
#include "ckpt/safetensors.h"
#include "model/param_spec.h"

namespace trident {

inline constexpr const char* kOptimizerStates[] = {"master", "exp_avg", "exp_avg_sq"};

inline constexpr const char* kModelFileName = "model.safetensors";
std::string optimizer_piece_key(const std::string& param, const std::string& state, int64_t first);
std::string optimizer_file_name(int dp_rank);  // "optim_dp0003.safetensors"
// The __metadata__ every rank file carries (the reader needs tp_rank).
std::map<std::string, std::string> rank_file_metadata(int tp, int tp_rank, int pp_rank, int dp_rank);

// Reads what one rank needs from a checkpoint of any layout. Only metadata.json is read at
// construction; a rank file is opened, and its size and checksum verified, the first time a
// tensor in it is read (then kept open). To read a tensor, the reader opens the files that
// may hold it, in order of preference, until the elements asked for are covered: files
// already open, then the files of the pipeline stage that holds the parameter (the writer's
// layer split: pipeline_chunk_layers at its pp and chunks), then those of the rank asked
// about; a file of another TP rank is skipped when its slice holds none of them (file names say which rank
// wrote them: rank_dir_name, optimizer_file_name). So at an unchanged layout each rank
// opens only its own files, a corrupt file is reported by the ranks that need it alone, and
// files written in any other way are still found (opened last).
class ShardedCheckpointReader {
 public:
  // Reads and validates DIR/metadata.json (DIR is one iter_NNNNNNN folder); IoError naming it.
  explicit ShardedCheckpointReader(const std::filesystem::path& dir);
  ~ShardedCheckpointReader();

  const CheckpointMetadata& metadata() const { return meta_; }
  const std::filesystem::path& dir() const { return dir_; }
  // Whether the checkpoint has optimizer files (optimizer_file_name).
  bool has_optimizer_state() const { return has_optimizer_; }
  // Full canonical fp32 tensor (stored form: word embedding rows = vocab size) of a
  // parameter. Throws IoError when the checkpoint lacks it or part of it.
  std::vector<float> model_tensor(const std::string& name);
  std::vector<float> optimizer_tensor(const std::string& name, const std::string& state);
  // TP rank `tp_rank`'s slice at `tp` of parameter `spec` (as gpt2_param_specs(model, tp)
  // describes it), what extract_local_stored cuts from model_tensor(), reading only the
  // files that hold part of the slice.
  std::vector<float> model_slice(const ParamSpec& spec, int tp, int tp_rank);
  // Same for optimizer state `state`, of which only the slice's elements in `wanted` (local
  // index ranges, e.g. a ZeRO rank's pieces) are read; the others are 0. `dp_rank`: the
  // reading rank's, whose own optimizer file is preferred.
  std::vector<float> optimizer_slice(const ParamSpec& spec, const std::string& state, int tp, int tp_rank,
                                     int dp_rank, const IndexRanges& wanted);
  // The canonical parameters of the checkpoint's model (gpt2_param_specs at its tp).
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // The files opened so far (paths relative to dir()), in order: what this rank has read.
  const std::vector<std::string>& opened_files() const { return opened_; }

  // Where a file's name says it belongs: kind, and -1 for what the name does not say.
  enum class FileKind { Model, Optimizer, Other };
  struct FilePlace {
    FileKind kind = FileKind::Other;
    int tp_rank = -1, pp_rank = -1, dp_rank = -1;
  };

 private:
  struct Entry {
    size_t file;
    std::string key;
    int tp_rank;
    int64_t first;  // local index of the piece's first element (optimizer pieces)
  };
  // Which files to prefer among those that may hold a tensor (-1: no preference).
  struct Preference {
    int tp_rank = -1, dp_rank = -1;
  };
  SafetensorsReader& open(size_t file);
  std::map<std::string, std::vector<Entry>> index_tensors(size_t file, const SafetensorsReader& r) const;
  const ParamSpec& spec(const std::string& name) const;
  bool stage_may_hold(int pp_rank, const ParamSpec& s) const;
  std::vector<size_t> candidate_files(const ParamSpec& s, FileKind kind, const IndexRanges& need,
                                      const Preference& prefer) const;
  IndexRanges held_by(const ParamSpec& s, const Entry& e);
  std::vector<Entry> find_pieces(const ParamSpec& s, FileKind kind, const std::string& key, const IndexRanges& need,
                                 const Preference& prefer);
  std::vector<float> read(const ParamSpec& s, const std::string& state, const IndexRanges& need,
                          const Preference& prefer);
  // model_slice and optimizer_slice: `state` "" for the model; dp_rank -1 when no optimizer
  // file is preferred; `wanted` local index ranges of the slice.
  std::vector<float> read_slice(const ParamSpec& run_spec, const std::string& state, int tp, int tp_rank, int dp_rank,
                                const IndexRanges& wanted);
  std::vector<float> assemble(const ParamSpec& s, const std::vector<Entry>& entries, bool pieces,
                              const IndexRanges& need);
  int preferred_tp_rank(int tp, int tp_rank) const;

  std::filesystem::path dir_;
  CheckpointMetadata meta_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> spec_index_;
  std::vector<FilePlace> places_;  // per metadata file
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::vector<std::map<std::string, std::vector<Entry>>> entries_;  // per opened file: tensor key -> pieces
  std::vector<std::string> opened_;
  bool has_optimizer_ = false;
};

// Where `rel_path` (a metadata.json file path) says a rank file belongs, for a checkpoint of
// `pp` pipeline stages: "mp_rank_TT[_PPP]/model.safetensors" or ".../optim_dpDDDD.safetensors".
ShardedCheckpointReader::FilePlace rank_file_place(const std::string& rel_path, int pp);

// The model shape a checkpoint fixes, one field per flag that sets it (Megatron's names,
// without the dashes): num-layers, hidden-size, num-attention-heads, seq-length,
// max-position-embeddings, make-vocab-size-divisible-by and vocab-size (the real vocabulary,
// which the tokenizer sets). The two checks below read this one table.
struct ModelShapeField {
  const char* flag;
  int64_t (*value)(const ModelConfig&);
  // Whether a run must agree on it to load the weights (the sequence length and the
  // vocabulary padding are not in them: the word embedding is stored without its padding).
  bool in_weights;
};
const std::vector<ModelShapeField>& model_shape_fields();

// Checks that the checkpoint holds a model of the run's shape (the fields in the weights)
// and GELU; ConfigError naming the flag: "--load: DIR is a model with --num-layers 4, this
// run has 2" ("vocabulary size" for the vocabulary; "the erf GELU, this run has the tanh
// GELU" for the activation).
void check_same_model_shape(const ModelConfig& checkpoint, const ModelConfig& run, const std::filesystem::path& dir);

// Checks shape flags given only to say what the checkpoint holds (trident-generate accepts
// those of Megatron's generation scripts), every field of model_shape_fields: each (flag,
// value) must be the checkpoint's; ConfigError "--hidden-size 128 differs from the
// checkpoint's 64 (WHERE)". A flag that is not a field is an InternalError.
void check_model_shape_flags(const std::vector<std::pair<std::string, int64_t>>& given, const ModelConfig& checkpoint,
                             const std::string& where);

// Fills `params` (one TP rank's slices, any dtype, any device) from the checkpoint, reading
// only the files that hold them: the model files, or with `from_masters` the optimizer
// files' fp32 master weights (exact where the model files hold a 16-bit copy). `wanted`, when
// given, says which of params.list() (by index) to read; the others are left as they are.
class Backend;
class ParamStore;
void load_model_parameters(ShardedCheckpointReader& ckpt, ParamStore& params, Backend& backend,
                           bool from_masters = false, const std::function<bool(size_t)>& wanted = {});

}  // namespace trident
