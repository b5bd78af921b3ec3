// ShardedCheckpointReader opens a rank file only when it reads a tensor from it: which files
// each rank of a layout opens (its own at the writer's layout, those holding its slices at
// another), that it still reads the right numbers, and that a corrupt file is reported by
// the ranks that need it and by no other.
#include "ckpt/sharded_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ckpt/canonical_slices.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/index_ranges.h"
#include "ckpt/offline_checkpoint.h"
#include "ckpt_test_util.h"
#include "kernels/backends.h"
#include "model/param_store.h"
#include "parallel/pipeline_split.h"

namespace trident {
namespace {

namespace fs = std::filesystem;
using testing::expect_io_error;
using testing::ScratchDir;
using testing::slurp;
using testing::small_config;
using testing::spit;
using Files = std::vector<std::string>;

// Stored canonical values of a parameter (state nullptr) or of its optimizer state: distinct
// for every tensor and element, exact in fp32.
std::vector<float> source_tensor(const std::string& name, const char* state) {
  static const std::vector<ParamSpec> specs = gpt2_param_specs(small_config(), 1);
  const auto s = std::find_if(specs.begin(), specs.end(), [&](const ParamSpec& p) { return p.name == name; });
  const float tag = static_cast<float>(std::hash<std::string>{}(name + "/" + (state ? state : "")) % 97);
  std::vector<float> v(static_cast<size_t>(stored_shape(*s).numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = tag + 0.5f * static_cast<float>(i % 4096);
  return v;
}

// A checkpoint of small_config() (2 layers) written at tp x pp, with optimizer state.
fs::path write_checkpoint(const fs::path& root, int tp, int pp) {
  CheckpointMetadata m;
  m.model = small_config();
  m.iteration = 5;
  return write_offline_checkpoint(root, m, OfflineLayout{tp, pp, {}}, true, source_tensor);
}

ParamSpec spec_at(int tp, const std::string& name) {
  for (const ParamSpec& s : gpt2_param_specs(small_config(), tp))
    if (s.name == name) return s;
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

Files sorted(Files f) {
  std::sort(f.begin(), f.end());
  return f;
}

std::string model_file(const std::string& rank_dir) { return rank_dir + "/" + kModelFileName; }

// Loads the parameters of rank (tp_rank, pp_rank) of a tp x pp run from `dir` as the
// trainer does, checks them against the source, and returns the files the reader opened.
Files load_as(const fs::path& dir, int tp, int tp_rank, int pp, int pp_rank) {
  auto backend = make_backend("cpu");
  const ModelConfig cfg = small_config();
  const LayerRange r = pipeline_chunk_layers(plain_split(cfg.num_layers, pp), pp_rank).front();
  const auto on_stage = [&](const ParamSpec& s) {
    return stage_holds(s, r.begin, r.end, pp_rank == 0, pp_rank == pp - 1);
  };
  ParamStore params(*backend, gpt2_param_specs(cfg, tp), tp, tp_rank, DType::F32, DType::F32, on_stage);
  ShardedCheckpointReader ckpt(dir);
  load_model_parameters(ckpt, params, *backend);
  for (const LocalParam& p : params.list()) {
    std::vector<float> got(static_cast<size_t>(p.numel()));
    backend->copy_to_host(got.data(), params.param(p));
    EXPECT_EQ(got, extract_local_stored(p.spec, tp, tp_rank, source_tensor(p.spec.name, nullptr)))
        << p.spec.name << " at tp " << tp << " rank " << tp_rank;
  }
  return sorted(ckpt.opened_files());
}

TEST(IndexRanges, SetOperations) {
  EXPECT_EQ(normalized({{5, 7}, {0, 2}, {2, 3}, {6, 9}, {4, 4}}), (IndexRanges{{0, 3}, {5, 9}}));
  EXPECT_EQ(subtract({{0, 10}, {20, 30}}, {{2, 4}, {8, 22}, {25, 26}}),
            (IndexRanges{{0, 2}, {4, 8}, {22, 25}, {26, 30}}));
  EXPECT_EQ(subtract({{0, 10}}, {{0, 10}}), IndexRanges{});
  EXPECT_TRUE(intersects({{0, 3}, {10, 12}}, {{11, 20}}));
  EXPECT_FALSE(intersects({{0, 3}, {10, 12}}, {{3, 10}, {12, 14}}));
  // A row-parallel [4, 8] weight at tp 2: rank 1 holds columns 4..7 of every row.
  ParamSpec s;
  s.name = "w";
  s.shape = Shape{4, 8};
  s.shard = ShardRule::SplitCols;
  EXPECT_EQ(canonical_ranges(s, 2, 1, 0, 16, 32), (IndexRanges{{4, 8}, {12, 16}, {20, 24}, {28, 32}}));
  EXPECT_EQ(canonical_ranges(s, 2, 1, 2, 6, 32), (IndexRanges{{6, 8}, {12, 14}}));
  EXPECT_EQ(canonical_ranges(s, 2, 1, 0, 16, 14), (IndexRanges{{4, 8}, {12, 14}}));  // past the stored end: padding
}

TEST(ShardedCheckpoint, EachRankOpensOnlyItsOwnFilesAtTheWritersLayout) {
  ScratchDir d;
  const fs::path dir = write_checkpoint(d / "ck", 2, 2);
  for (int pp_rank = 0; pp_rank < 2; ++pp_rank)
    for (int tp_rank = 0; tp_rank < 2; ++tp_rank)
      EXPECT_EQ(load_as(dir, 2, tp_rank, 2, pp_rank), Files{model_file(rank_dir_name(tp_rank, pp_rank, 2))});
  // The optimizer state of a rank's slices comes from its own optimizer file.
  ShardedCheckpointReader ckpt(dir);
  EXPECT_TRUE(ckpt.has_optimizer_state());
  const ParamSpec fc = spec_at(2, "h.0.mlp.fc.weight");  // split rows
  const int64_t n = local_shape(fc, 2).numel();
  EXPECT_EQ(ckpt.optimizer_slice(fc, "exp_avg", 2, 1, 0, {{0, n}}),
            extract_local_stored(fc, 2, 1, source_tensor(fc.name, "exp_avg")));
  EXPECT_EQ(ckpt.opened_files(), Files{rank_dir_name(1, 0, 2) + "/" + optimizer_file_name(0)});
  // A whole tensor needs every TP rank's file of the stage that holds it.
  EXPECT_EQ(ckpt.model_tensor(fc.name), source_tensor(fc.name, nullptr));
  EXPECT_EQ(sorted(ckpt.opened_files()),
            sorted({rank_dir_name(1, 0, 2) + "/" + optimizer_file_name(0), model_file(rank_dir_name(0, 0, 2)),
                    model_file(rank_dir_name(1, 0, 2))}));
}

TEST(ShardedCheckpoint, OtherLayoutsOpenOnlyTheFilesHoldingTheirSlices) {
  ScratchDir d;
  const fs::path dir = write_checkpoint(d / "ck", 2, 2);
  const std::string t0s0 = model_file("mp_rank_00_000"), t0s1 = model_file("mp_rank_00_001"),
                    t1s0 = model_file("mp_rank_01_000"), t1s1 = model_file("mp_rank_01_001");
  EXPECT_EQ(load_as(dir, 1, 0, 1, 0), (Files{t0s0, t0s1, t1s0, t1s1}));  // consolidation reads all
  EXPECT_EQ(load_as(dir, 1, 0, 2, 1), (Files{t0s1, t1s1}));              // one stage, whole tensors
  EXPECT_EQ(load_as(dir, 2, 1, 1, 0), (Files{t1s0, t1s1}));              // one TP slice, both stages
  // tp 4: a quarter of each split tensor lies within one writer's half, except that the
  // word embedding's vocabulary is padded differently (304 rows at tp 2, 320 at tp 4), so
  // rank 1's rows 80-159 reach into the writer's rank 1 (rows 152-303).
  EXPECT_EQ(load_as(dir, 4, 0, 1, 0), (Files{t0s0, t0s1}));
  EXPECT_EQ(load_as(dir, 4, 3, 1, 0), (Files{t1s0, t1s1}));
  EXPECT_EQ(load_as(dir, 4, 1, 1, 0), (Files{t0s0, t0s1, t1s0}));
}

TEST(ShardedCheckpoint, CorruptFileFailsOnlyTheRanksThatReadIt) {
  ScratchDir d;
  const fs::path dir = write_checkpoint(d / "ck", 2, 2);
  const std::string bad = (dir / "mp_rank_01_001" / kModelFileName).string();
  std::string bytes = slurp(bad);
  bytes[bytes.size() / 2] ^= 0x10;
  spit(bad, bytes);
  EXPECT_EQ(load_as(dir, 2, 0, 2, 0), Files{model_file("mp_rank_00_000")});
  EXPECT_EQ(load_as(dir, 2, 1, 2, 0), Files{model_file("mp_rank_01_000")});
  EXPECT_EQ(load_as(dir, 2, 0, 2, 1), Files{model_file("mp_rank_00_001")});
  EXPECT_EQ(load_as(dir, 1, 0, 2, 0), (Files{model_file("mp_rank_00_000"), model_file("mp_rank_01_000")}));
  expect_io_error([&] { load_as(dir, 2, 1, 2, 1); }, {bad, "checksum mismatch"});
  expect_io_error([&] { load_as(dir, 1, 0, 2, 1); }, {bad, "checksum mismatch"});
  expect_io_error([&] { load_as(dir, 1, 0, 1, 0); }, {bad, "checksum mismatch"});
  // The metadata is still checked when the reader is made.
  spit((dir / kMetadataFileName).string(), "{\"format\": \"trident-checkpoint\"");
  expect_io_error([&] { ShardedCheckpointReader r(dir); }, {(dir / kMetadataFileName).string()});
}

// A metadata.json whose model disagrees with the files (edited, or of another checkpoint) is
// a bad input naming the tensor, not an allocation of the metadata's size.
TEST(ShardedCheckpoint, PiecesThatDoNotFitTheMetadatasModelAreNamed) {
  ScratchDir d;
  const fs::path dir = write_checkpoint(d / "ck", 1, 1);
  const std::string meta = (dir / kMetadataFileName).string();
  const std::string original = slurp(meta);
  CheckpointMetadata m = read_metadata(meta);
  m.model.hidden_size *= 2;
  write_metadata(meta, m);
  // A run of the files' shape says so (the run's check); a reader sizing from the metadata
  // (trident-convert, trident-eval) names the file's tensor instead of allocating.
  expect_io_error([&] { load_as(dir, 1, 0, 1, 0); }, {"parameter 'wpe' has shape [12, 32], the run's has [12, 16]"});
  expect_io_error([&] { ShardedCheckpointReader(dir).model_tensor("wpe"); },
                  {kModelFileName, "tensor 'wte' has shape [304, 16], but metadata.json's model at tp 1 makes it [304, 32]"});
  // Fewer layers than the files hold: the pieces of the others would go unread.
  spit(meta, original);
  m = read_metadata(meta);
  m.model.num_layers -= 1;
  write_metadata(meta, m);
  expect_io_error([&] { ShardedCheckpointReader(dir).model_tensor("wpe"); },
                  {kModelFileName, "tensor 'h." + std::to_string(m.model.num_layers) + ".",
                   "belongs to no parameter of metadata.json's model"});
  spit(meta, original);
  EXPECT_EQ(ShardedCheckpointReader(dir).model_tensor("wpe"), source_tensor("wpe", nullptr));
}

// A tp 1 checkpoint with ZeRO over dp 2 (written by hand: the offline writer has dp 1): each
// DP rank's file holds one half of each state of two parameters.
fs::path write_zero_checkpoint(const fs::path& dir, const std::vector<std::string>& names) {
  const std::vector<ParamSpec> specs = gpt2_param_specs(small_config(), 1);
  CheckpointMetadata m;
  m.model = small_config();
  m.layout = ParallelLayout{1, 1, 2, 1, 1, {}};
  fs::create_directories(dir / "mp_rank_00");
  for (int dp = 0; dp < 2; ++dp) {
    std::vector<std::vector<float>> data;
    std::vector<StTensorRef> refs;
    data.reserve(names.size() * 3);
    for (const std::string& name : names) {
      for (const char* state : kOptimizerStates) {
        const std::vector<float> all = source_tensor(name, state);
        const int64_t half = static_cast<int64_t>(all.size()) / 2, begin = dp * half;
        data.emplace_back(all.begin() + begin, dp == 0 ? all.begin() + half : all.end());
        refs.push_back({optimizer_piece_key(name, state, begin), StDType::F32,
                        {static_cast<int64_t>(data.back().size())}, data.back().data()});
      }
    }
    const std::string rel = "mp_rank_00/" + optimizer_file_name(dp);
    write_safetensors((dir / rel).string(), refs, rank_file_metadata(1, 0, 0, dp));
    m.files.push_back(make_file_record(dir, rel));
  }
  write_metadata((dir / kMetadataFileName).string(), m);
  return dir;
}

TEST(ShardedCheckpoint, ZeroRankReadsItsPiecesFromItsOwnFile) {
  ScratchDir d;
  const fs::path dir = write_zero_checkpoint(d / "iter_0000000", {"wpe", "h.0.mlp.fc.weight"});  // metadata iteration 0
  const ParamSpec fc = spec_at(1, "h.0.mlp.fc.weight");
  const std::vector<float> all = source_tensor(fc.name, "exp_avg");
  const int64_t n = static_cast<int64_t>(all.size());
  std::vector<float> second_half(all.size(), 0.0f);
  std::copy(all.begin() + n / 2, all.end(), second_half.begin() + n / 2);
  {
    ShardedCheckpointReader ckpt(dir);
    EXPECT_EQ(ckpt.optimizer_slice(fc, "exp_avg", 1, 0, 1, {{n / 2, n}}), second_half);
    EXPECT_EQ(ckpt.opened_files(), Files{"mp_rank_00/optim_dp0001.safetensors"});
    EXPECT_EQ(ckpt.optimizer_slice(fc, "master", 1, 0, 1, {}), std::vector<float>(all.size(), 0.0f));
    EXPECT_EQ(ckpt.opened_files().size(), 1u);  // nothing wanted, nothing more opened
    EXPECT_EQ(ckpt.optimizer_tensor(fc.name, "exp_avg"), all);
    EXPECT_EQ(ckpt.opened_files().size(), 2u);
    const ParamSpec ln = spec_at(1, "h.0.ln_1.weight");  // in no file
    expect_io_error([&] { ckpt.optimizer_slice(ln, "exp_avg", 1, 0, 1, {{0, 16}}); },
                    {"no optimizer state 'exp_avg' of '" + ln.name + "' in any file"});
  }
  // Corrupt DP rank 0's file: DP rank 1 does not read it; DP rank 0 fails naming it.
  const std::string bad = (dir / "mp_rank_00/optim_dp0000.safetensors").string();
  std::string bytes = slurp(bad);
  bytes[bytes.size() - 8] ^= 0x01;
  spit(bad, bytes);
  ShardedCheckpointReader ckpt(dir);
  EXPECT_EQ(ckpt.optimizer_slice(fc, "exp_avg", 1, 0, 1, {{n / 2, n}}), second_half);
  expect_io_error([&] { ckpt.optimizer_slice(fc, "exp_avg", 1, 0, 0, {{0, n / 2}}); }, {bad, "checksum mismatch"});
}

TEST(ShardedCheckpoint, WithoutOptimizerFilesThereIsNoOptimizerState) {
  ScratchDir d;
  CheckpointMetadata m;
  m.model = small_config();
  const fs::path dir = write_offline_checkpoint(d / "ck", m, OfflineLayout{1, 1, {}}, false, source_tensor);
  ShardedCheckpointReader ckpt(dir);
  EXPECT_FALSE(ckpt.has_optimizer_state());
  EXPECT_TRUE(ckpt.opened_files().empty());
}

// One table of shape fields serves both checks: a run loading the checkpoint
// (check_same_model_shape: the fields in the weights, "--load: DIR is a model with ...") and
// flags that only say what the checkpoint holds (check_model_shape_flags, trident-generate:
// every field, "--FLAG N differs from the checkpoint's M (WHERE)").
TEST(ShardedCheckpoint, ModelShapeChecksShareOneTableOfFields) {
  const ModelConfig ckpt = small_config();
  std::vector<std::string> flags, in_weights;
  for (const ModelShapeField& f : model_shape_fields()) {
    flags.push_back(f.flag);
    if (f.in_weights) in_weights.push_back(f.flag);
  }
  EXPECT_EQ(flags, (std::vector<std::string>{"num-layers", "hidden-size", "num-attention-heads", "seq-length",
                                             "max-position-embeddings", "make-vocab-size-divisible-by",
                                             "vocab-size"}));
  EXPECT_EQ(in_weights, (std::vector<std::string>{"num-layers", "hidden-size", "num-attention-heads",
                                                  "max-position-embeddings", "vocab-size"}));
  check_same_model_shape(ckpt, ckpt, "DIR");
  for (const ModelShapeField& f : model_shape_fields()) {
    const int64_t held = f.value(ckpt);
    // The run: the checkpoint's model with this one field doubled.
    ModelConfig run = ckpt;
    const std::string flag = f.flag;
    if (flag == "num-layers") run.num_layers *= 2;
    if (flag == "hidden-size") run.hidden_size *= 2;
    if (flag == "num-attention-heads") run.num_attention_heads *= 2;
    if (flag == "seq-length") run.seq_length *= 2;
    if (flag == "max-position-embeddings") run.max_position_embeddings *= 2;
    if (flag == "make-vocab-size-divisible-by") run.make_vocab_size_divisible_by *= 2;
    if (flag == "vocab-size") run.vocab_size *= 2;
    ASSERT_EQ(f.value(run), 2 * held) << flag;
    if (f.in_weights) {
      const std::string what = flag == "vocab-size" ? "vocabulary size" : "--" + flag;
      try {
        check_same_model_shape(ckpt, run, "DIR");
        ADD_FAILURE() << flag;
      } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), "--load: DIR is a model with " + what + " " + std::to_string(held) +
                                             ", this run has " + std::to_string(2 * held));
      }
    } else {
      check_same_model_shape(ckpt, run, "DIR");  // not in the weights: a run may change it
    }
    check_model_shape_flags({{flag, held}}, ckpt, "WHERE");
    try {
      check_model_shape_flags({{flag, held}, {flag, 2 * held}}, ckpt, "WHERE");
      ADD_FAILURE() << flag;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "--" + flag + " " + std::to_string(2 * held) + " differs from the checkpoint's " +
                                           std::to_string(held) + " (WHERE)");
    }
  }
  EXPECT_THROW(check_model_shape_flags({{"fp16", 1}}, ckpt, "WHERE"), InternalError);
}

// The GELU is not a shape, but weights trained through one form must load with it.
TEST(ShardedCheckpoint, ModelShapeCheckRefusesTheOtherGelu) {
  ModelConfig ckpt = small_config(), run = small_config();
  ckpt.gelu = Gelu::Erf;
  try {
    check_same_model_shape(ckpt, run, "DIR");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--load: DIR is a model with the erf GELU, this run has the tanh GELU (the erf "
                                     "GELU is Megatron's --no-bias-gelu-fusion, without --openai-gelu in the legacy "
                                     "model)");
  }
  run.gelu = Gelu::Erf;
  check_same_model_shape(ckpt, run, "DIR");
}

}  // namespace
}  // namespace trident
