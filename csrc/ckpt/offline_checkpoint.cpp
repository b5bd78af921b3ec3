#include "ckpt/offline_checkpoint.h"

#include <filesystem>
#include <map>
#include <system_error>
#include <vector>

#include "ckpt/canonical_slices.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "model/param_spec.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

bool stage_holds(const ParamSpec& s, int stage, const PipelineSplit& split) {
  const LayerRange r = pipeline_chunk_layers(split, stage).front();
  return stage_holds(s, r.begin, r.end, stage == 0, stage == split.stages - 1);
}

}  // namespace

fs::path write_offline_checkpoint(const fs::path& root, CheckpointMetadata meta, const OfflineLayout& L,
                                  bool with_optimizer, const CanonicalTensorSource& source) {
  const ModelConfig& cfg = meta.model;
  if (L.tp < 1 || L.pp < 1) throw ConfigError("checkpoint layout: tp and pp must be positive");
  const PipelineSplit split{cfg.num_layers, L.pp, 1, L.uneven};
  if (const std::string why = pipeline_split_error(split); !why.empty())
    throw ConfigError("checkpoint layout: pp " + std::to_string(L.pp) + ": " + why);
  cfg.validate(L.tp);
  const std::vector<ParamSpec> specs = gpt2_param_specs(cfg, L.tp);
  const StDType model_dtype = to_st_dtype(cfg.dtype);

  OutputWriteGuard guard;
  guard.created = missing_directories(root);
  TempIterationDir temp_dir(root, meta.iteration, make_save_token());
  guard.temp = temp_dir.path();
  const fs::path temp = guard.temp;
  meta.layout = ParallelLayout{L.tp, L.pp, 1, 0, 1, L.uneven};
  meta.files.clear();
  // A conversion starts a history of its own in `root` (metadata.h, PreviousCheckpoint).
  if (!meta.trainer_state.is_object()) meta.trainer_state = nlohmann::json::object();
  meta.trainer_state[kPreviousCheckpointKey] = nullptr;
  for (int stage = 0; stage < L.pp; ++stage) {
    for (int tp_rank = 0; tp_rank < L.tp; ++tp_rank) {
      const std::string rank_dir = rank_dir_name(tp_rank, stage, L.pp);
      std::error_code ec;
      fs::create_directories(temp / rank_dir, ec);
      if (ec) throw_write_failure((temp / rank_dir).string() + ": cannot create directory: " + ec.message(), ec.value());
      const auto file_meta = rank_file_metadata(L.tp, tp_rank, stage, 0);
      std::vector<std::vector<char>> model_bytes, optim_bytes;
      std::vector<StTensorRef> model_refs, optim_refs;
      model_bytes.reserve(specs.size());
      optim_bytes.reserve(3 * specs.size());
      for (const ParamSpec& s : specs) {
        if (!stage_holds(s, stage, split)) continue;
        const std::vector<int64_t> local = shape_vec(local_shape(s, L.tp));
        model_bytes.push_back(encode_as(extract_local_stored(s, L.tp, tp_rank, source(s.name, nullptr)), cfg.dtype));
        model_refs.push_back(StTensorRef{s.name, model_dtype, local, model_bytes.back().data()});
        if (!with_optimizer) continue;
        const int64_t n = local_shape(s, L.tp).numel();
        for (const char* state : kOptimizerStates) {
          optim_bytes.push_back(encode_as(extract_local_stored(s, L.tp, tp_rank, source(s.name, state)), DType::F32));
          optim_refs.push_back(StTensorRef{optimizer_piece_key(s.name, state, 0), StDType::F32, {n},
                                           optim_bytes.back().data()});
        }
      }
      const std::string model_rel = rank_dir + "/" + kModelFileName;
      const WrittenFile wm = write_safetensors((temp / model_rel).string(), model_refs, file_meta);
      meta.files.push_back(FileRecord{model_rel, wm.size, wm.xxh3});
      if (with_optimizer) {
        const std::string optim_rel = rank_dir + "/" + optimizer_file_name(0);
        const WrittenFile wo = write_safetensors((temp / optim_rel).string(), optim_refs, file_meta);
        meta.files.push_back(FileRecord{optim_rel, wo.size, wo.xxh3});
      }
    }
  }
  write_metadata((temp / kMetadataFileName).string(), meta);
  temp_dir.commit();
  guard.released = true;
  return iteration_dir(root, meta.iteration);
}

fs::path resolve_checkpoint_dir(const fs::path& load, std::optional<int64_t> iteration,
                                const std::string& iteration_flag) {
  check_load_is_directory(load);
  std::error_code ec;
  if (fs::exists(load / kMetadataFileName, ec)) {
    if (iteration)
      throw ConfigError(iteration_flag + ": --load " + load.string() +
                        " is one checkpoint folder already; give its parent");
    return load;
  }
  if (iteration) {
    if (*iteration < 0) throw ConfigError(iteration_flag + " must not be negative");
    const fs::path dir = iteration_dir(load, *iteration);
    if (!fs::is_directory(dir, ec))
      throw ConfigError(iteration_flag + ": no checkpoint of iteration " + std::to_string(*iteration) + " (" +
                        dir.string() + " not found)");
    return dir;
  }
  return iteration_dir(load, latest_iteration(load));
}

}  // namespace trident
