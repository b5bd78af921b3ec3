// metadata.json: round trip of every field, one-line errors naming file and field, file checks.
#include "ckpt/metadata.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "ckpt/checksum.h"
#include "ckpt_test_util.h"

namespace trident {
namespace {

using json = nlohmann::json;
using testing::expect_io_error;
using testing::ScratchDir;
using testing::slurp;
using testing::spit;

CheckpointMetadata sample() {
  CheckpointMetadata m;
  m.model.num_layers = 4;
  m.model.hidden_size = 48;
  m.model.num_attention_heads = 6;
  m.model.seq_length = 64;
  m.model.max_position_embeddings = 128;
  m.model.vocab_size = 50257;
  m.model.make_vocab_size_divisible_by = 64;
  m.model.init_method_std = 0.015f;
  m.model.hidden_dropout = 0.1f;
  m.model.attention_dropout = 0.05f;
  m.model.dtype = DType::BF16;
  m.iteration = 1234;
  m.consumed_samples = 9876543210LL;
  m.layout = {2, 4, 8, 1, 1, {}};
  m.trainer_state = {{"rng", {{"seed", 1234}, {"offset", 18446744073709551615ull}}},
                     {"loss_scaler", {{"scale", 65536.0}, {"hysteresis", 2}, {"clean_steps", 17}}},
                     {"scheduler", {{"num_steps", 158000}}},
                     {"data", {{"shuffle_seed", 1234}, {"epoch", 0}}}};
  m.files = {{"mp_rank_00_000/model.safetensors", 1000, "0123456789abcdef"},
             {"mp_rank_01_003/optim.safetensors", 0, "fedcba9876543210"}};
  return m;
}

TEST(Metadata, RoundTripEveryField) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  const CheckpointMetadata m = sample();
  write_metadata(path, m);
  const CheckpointMetadata r = read_metadata(path);
  EXPECT_EQ(r.format_version, 1);
  EXPECT_EQ(r.model.num_layers, 4);
  EXPECT_EQ(r.model.hidden_size, 48);
  EXPECT_EQ(r.model.num_attention_heads, 6);
  EXPECT_EQ(r.model.seq_length, 64);
  EXPECT_EQ(r.model.max_position_embeddings, 128);
  EXPECT_EQ(r.model.vocab_size, 50257);
  EXPECT_EQ(r.model.make_vocab_size_divisible_by, 64);
  EXPECT_EQ(r.model.init_method_std, 0.015f);
  EXPECT_EQ(r.model.embedding_init_method_std, 0.0f);  // unset: not written
  EXPECT_EQ(r.model.hidden_dropout, 0.1f);
  EXPECT_EQ(r.model.attention_dropout, 0.05f);
  EXPECT_EQ(r.model.dtype, DType::BF16);
  EXPECT_EQ(r.iteration, 1234);
  EXPECT_EQ(r.consumed_samples, 9876543210LL);
  EXPECT_EQ(r.layout, (ParallelLayout{2, 4, 8, 1, 1, {}}));
  EXPECT_EQ(r.trainer_state, m.trainer_state);
  EXPECT_EQ(r.trainer_state["rng"]["offset"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(r.files, m.files);
  // Plain JSON a person (or Python) can read.
  const json j = json::parse(slurp(path));
  EXPECT_EQ(j["format"], "trident-checkpoint");
  EXPECT_EQ(j["model"]["dtype"], "bf16");
  EXPECT_EQ(j["layout"]["zero_stage"], 1);
  EXPECT_EQ(j["files"][0]["xxh3"], "0123456789abcdef");
  EXPECT_FALSE(j["layout"].contains("virtual_pipeline_chunks"));  // older readers still read plain layouts
}

// --embedding-init-method-std is written only when set (older readers know no such field).
TEST(Metadata, EmbeddingInitStdRoundTrips) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  CheckpointMetadata m = sample();
  write_metadata(path, m);
  EXPECT_FALSE(json::parse(slurp(path))["model"].contains("embedding_init_method_std"));
  m.model.embedding_init_method_std = 0.5f;
  write_metadata(path, m);
  EXPECT_EQ(json::parse(slurp(path))["model"]["embedding_init_method_std"], 0.5);
  EXPECT_EQ(read_metadata(path).model.embedding_init_method_std, 0.5f);
}

// The GELU: "erf" round-trips; a tanh model writes no field (older readers read it as before)
// and a metadata.json without one (older checkpoints) reads as tanh; "tanh" written by hand
// reads too.
TEST(Metadata, GeluRoundTripsAndDefaultsToTanh) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  CheckpointMetadata m = sample();
  write_metadata(path, m);
  json j = json::parse(slurp(path));
  EXPECT_FALSE(j["model"].contains("gelu"));
  EXPECT_EQ(read_metadata(path).model.gelu, Gelu::Tanh);
  m.model.gelu = Gelu::Erf;
  write_metadata(path, m);
  EXPECT_EQ(json::parse(slurp(path))["model"]["gelu"], "erf");
  EXPECT_EQ(read_metadata(path).model.gelu, Gelu::Erf);
  j["model"]["gelu"] = "tanh";
  spit(path, j.dump());
  EXPECT_EQ(read_metadata(path).model.gelu, Gelu::Tanh);
}

TEST(Metadata, InterleavedLayoutRoundTrips) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  CheckpointMetadata m = sample();
  m.model.num_layers = 8;
  m.layout = ParallelLayout{1, 2, 1, 0, 2, {}};
  write_metadata(path, m);
  EXPECT_EQ(json::parse(slurp(path))["layout"]["virtual_pipeline_chunks"], 2);
  EXPECT_EQ(read_metadata(path).layout, m.layout);
  m.layout.virtual_pipeline_chunks = 3;  // 2 stages x 3 chunks do not divide 8 layers
  write_metadata(path, m);
  expect_io_error([&] { read_metadata(path); }, {path, "layout.virtual_pipeline_chunks", "num_layers (8)"});
}

TEST(Metadata, UnevenPipelineRoundTrips) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  CheckpointMetadata m = sample();
  m.model.num_layers = 6;
  m.layout = ParallelLayout{1, 2, 1, 0, 2, UnevenPipeline{0, 0, true, true, {}}};
  write_metadata(path, m);
  const json layout = json::parse(slurp(path))["layout"];
  EXPECT_EQ(layout["account_for_embedding_in_pipeline_split"], true);  // Megatron's names
  EXPECT_EQ(layout["account_for_loss_in_pipeline_split"], true);
  EXPECT_FALSE(layout.contains("decoder_first_pipeline_num_layers"));
  EXPECT_EQ(read_metadata(path).layout, m.layout);
  EXPECT_EQ(layout_text(m.layout), "tp 1 x pp 2 x dp 1, zero 0, 2 model chunks a stage, the embedding counted as a "
                                   "layer, the loss counted as a layer");
  m.layout = ParallelLayout{1, 3, 1, 0, 1, UnevenPipeline{2, 1, false, false, {}}};
  write_metadata(path, m);
  EXPECT_EQ(read_metadata(path).layout, m.layout);
  // One split spelled two ways is one layout; another split, or another dp, is not.
  ModelConfig two = m.model;
  two.num_layers = 2;
  EXPECT_TRUE(same_layout(ParallelLayout{1, 2, 1, 0, 1, UnevenPipeline{1, 0, false, false, {}}},
                          ParallelLayout{1, 2, 1, 0, 1, {}}, two));
  EXPECT_FALSE(same_layout(m.layout, ParallelLayout{1, 3, 1, 0, 1, {}}, m.model));  // 2, 2, 2 against 2, 3, 1
  EXPECT_FALSE(same_layout(m.layout, ParallelLayout{1, 3, 2, 0, 1, m.layout.uneven}, m.model));
  EXPECT_EQ(layout_text(m.layout), "tp 1 x pp 3 x dp 1, zero 0, 2 layers in the first stage, 1 layer in the last stage");
  // A first stage of 2 and a last of 5 take more than the 6 layers.
  m.layout.uneven.last_stage_layers = 5;
  write_metadata(path, m);
  expect_io_error([&] { read_metadata(path); }, {path, "layout.pp", "split of model.num_layers (6)"});
  json j = metadata_to_json(sample());
  j["layout"]["account_for_loss_in_pipeline_split"] = 1;
  std::ofstream(path) << j.dump();
  expect_io_error([&] { read_metadata(path); },
                  {path, "layout.account_for_loss_in_pipeline_split", "expected true or false"});
}

TEST(Metadata, PipelineLayoutRoundTrips) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  CheckpointMetadata m = sample();
  m.model.num_layers = 2;
  // Five stages for two layers: more than a stage a layer (the bound without a layout).
  m.layout = ParallelLayout{1, 5, 1, 0, 1, UnevenPipeline{0, 0, false, false, "Et||||tL"}};
  write_metadata(path, m);
  EXPECT_EQ(json::parse(slurp(path))["layout"]["pipeline_model_parallel_layout"], "Et||||tL");  // Megatron's name
  EXPECT_EQ(read_metadata(path).layout, m.layout);
  EXPECT_EQ(layout_text(m.layout), "tp 1 x pp 5 x dp 1, zero 0, layout \"Et||||tL\"");
  // The same layers spelt by the even split are the same layout.
  EXPECT_TRUE(same_layout(ParallelLayout{1, 2, 1, 0, 1, UnevenPipeline{0, 0, false, false, "Et|tL"}},
                          ParallelLayout{1, 2, 1, 0, 1, {}}, m.model));
  // A layout that does not hold the model's layers, or of other chunks than the layout's.
  m.layout = ParallelLayout{1, 2, 1, 0, 1, UnevenPipeline{0, 0, false, false, "Ettt|tL"}};
  write_metadata(path, m);
  expect_io_error([&] { read_metadata(path); }, {path, "layout.pp", "holds 4 transformer layers (t)"});
  m.layout = ParallelLayout{1, 2, 1, 0, 1, UnevenPipeline{0, 0, false, false, "E|t|t|L"}};
  write_metadata(path, m);
  expect_io_error([&] { read_metadata(path); }, {path, "makes 2 model chunks a stage, not 1"});
}

struct Bad {
  const char* label;
  std::function<void(json&)> edit;
  std::vector<std::string> expect;
};

TEST(Metadata, ErrorsNameFileAndField) {
  ScratchDir d;
  const std::string path = d / kMetadataFileName;
  const json good = metadata_to_json(sample());
  const std::vector<Bad> cases = {
      {"missing iteration", [](json& j) { j.erase("iteration"); }, {"field 'iteration'", "missing"}},
      {"string hidden", [](json& j) { j["model"]["hidden_size"] = "48"; }, {"field 'model.hidden_size'", "integer"}},
      {"negative samples", [](json& j) { j["consumed_samples"] = -1; }, {"field 'consumed_samples'", "out of range"}},
      {"zero stage", [](json& j) { j["layout"]["zero_stage"] = 5; }, {"field 'layout.zero_stage'"}},
      {"tp vs heads", [](json& j) { j["layout"]["tp"] = 4; }, {"field 'layout.tp'", "num_attention_heads"}},
      // Sizes whose products overflowed int (a SIGFPE from pp x chunks = 2^32 = 0) or int64.
      {"pp past the layers", [](json& j) { j["layout"]["pp"] = 65536; }, {"field 'layout.pp'", "out of range"}},
      {"chunks past the layers",
       [](json& j) { j["layout"]["virtual_pipeline_chunks"] = 65536; },
       {"field 'layout.virtual_pipeline_chunks'", "out of range"}},
      {"dp past int", [](json& j) { j["layout"]["dp"] = 2147483647; }, {"field 'layout.dp'", "out of range"}},
      {"huge hidden", [](json& j) { j["model"]["hidden_size"] = 1073741824; }, {"field 'model'", "--hidden-size"}},
      {"huge vocab",
       [](json& j) { j["model"]["vocab_size"] = 9223372036854775807LL; },
       {"field 'model'", "vocabulary size", "int32"}},
      {"checksum", [](json& j) { j["files"][1]["xxh3"] = "XYZ"; }, {"field 'files[1].xxh3'"}},
      {"file path", [](json& j) { j["files"][0]["path"] = "../x"; }, {"field 'files[0].path'"}},
      {"version", [](json& j) { j["format_version"] = 99; }, {"field 'format_version'", "newer"}},
      {"dtype", [](json& j) { j["model"]["dtype"] = "fp8"; }, {"field 'model.dtype'", "fp8"}},
      {"gelu", [](json& j) { j["model"]["gelu"] = "gelu_new"; }, {"field 'model.gelu'", "unknown GELU 'gelu_new'"}},
      {"gelu kind", [](json& j) { j["model"]["gelu"] = 1; }, {"field 'model.gelu'", "expected a string"}},
      {"unknown", [](json& j) { j["extra"] = 1; }, {"field 'extra'", "unknown"}},
      {"trainer state", [](json& j) { j["trainer_state"] = 3; }, {"field 'trainer_state'"}},
      // trainer_state's fields that trident reads (a hand edit, a garbled conversion).
      {"steps as text",
       [](json& j) { j["trainer_state"]["optimizer_steps"] = "2"; },
       {"field 'trainer_state.optimizer_steps'", "expected an integer"}},
      {"huge steps",
       [](json& j) { j["trainer_state"]["optimizer_steps"] = 9223372036854775807LL; },
       {"field 'trainer_state.optimizer_steps'", "out of range"}},
      {"negative validation samples",
       [](json& j) { j["trainer_state"]["consumed_valid_samples"] = -1; },
       {"field 'trainer_state.consumed_valid_samples'", "out of range"}},
      {"null seed", [](json& j) { j["trainer_state"]["dropout_seed"] = nullptr; }, {"field 'trainer_state.dropout_seed'"}},
      {"skip range backwards",
       [](json& j) { j["trainer_state"]["applied_skip_ranges"] = {{3, 5}, {9, 8}}; },
       {"field 'trainer_state.applied_skip_ranges'", "1 <= first <= last", "[[3,5],[9,8]]"}},
      {"skip range as text",
       [](json& j) { j["trainer_state"]["applied_skip_ranges"] = "3-5"; },
       {"field 'trainer_state.applied_skip_ranges'", "expected [[first, last], ...]"}},
      {"skip range of three",
       [](json& j) { j["trainer_state"]["applied_skip_ranges"] = {{3, 5, 7}}; },
       {"field 'trainer_state.applied_skip_ranges'"}},
      {"negative skipped range samples",
       [](json& j) { j["trainer_state"]["skipped_range_samples"] = -4; },
       {"field 'trainer_state.skipped_range_samples'", "out of range"}},
      {"scheduler style",
       [](json& j) { j["trainer_state"]["opt_param_scheduler"] = {{"lr_decay_style", 5}}; },
       {"field 'trainer_state.opt_param_scheduler.lr_decay_style'", "expected a string"}},
      {"negative rate",
       [](json& j) { j["trainer_state"]["opt_param_scheduler"] = {{"max_lr", -1e-3}}; },
       {"field 'trainer_state.opt_param_scheduler.max_lr'", "below 0"}},
      {"zero loss scale",
       [](json& j) { j["trainer_state"]["loss_scaler"]["scale"] = 0; },
       {"field 'trainer_state.loss_scaler.scale'", "not positive"}},
      {"heads", [](json& j) { j["model"]["num_attention_heads"] = 5; }, {"field 'model'", "num-attention-heads"}},
      {"format", [](json& j) { j["format"] = "megatron"; }, {"field 'format'"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    json j = good;
    c.edit(j);
    spit(path, j.dump());
    std::vector<std::string> parts = c.expect;
    parts.push_back(path);
    try {
      read_metadata(path);
      ADD_FAILURE() << "accepted";
    } catch (const IoError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
  spit(path, "{\"format\": ");
  expect_io_error([&] { read_metadata(path); }, {path, "bad JSON"});
  expect_io_error([&] { read_metadata(d / "none.json"); }, {"none.json", "cannot open"});
}

TEST(Metadata, VerifyFiles) {
  ScratchDir d;
  std::filesystem::create_directories(d / "mp_rank_00");
  spit(d / "mp_rank_00/model.safetensors", std::string(5000, 'a'));
  spit(d / "extra.bin", "hello");
  CheckpointMetadata m = sample();
  m.files = {make_file_record(d.path(), "mp_rank_00/model.safetensors"), make_file_record(d.path(), "extra.bin")};
  EXPECT_EQ(m.files[1].size, 5u);
  EXPECT_EQ(m.files[1].xxh3, checksum_bytes("hello", 5));
  write_metadata(d / kMetadataFileName, m);
  const CheckpointMetadata r = read_metadata(d / kMetadataFileName);
  EXPECT_NO_THROW(verify_checkpoint_files(d.path(), r));
  std::string bad(5000, 'a');
  bad[4000] = 'b';
  spit(d / "mp_rank_00/model.safetensors", bad);
  expect_io_error([&] { verify_checkpoint_files(d.path(), r); }, {"mp_rank_00/model.safetensors", "checksum mismatch"});
  spit(d / "mp_rank_00/model.safetensors", std::string(4999, 'a'));
  expect_io_error([&] { verify_checkpoint_files(d.path(), r); }, {"mp_rank_00/model.safetensors", "truncated"});
}

}  // namespace
}  // namespace trident
