// The training state of a Megatron export (megatron_export_state.h), written through a torch
// zip file and read back: where Adam's step count goes for each Adam, an empty state before the
// first step, DeepSpeed's fused loss scaler converted to Megatron's, --decoupled-lr's group, and a
// token-based decay refused. (tests/e2e/megatron_resume.sh compares whole exports with Megatron's files.)
#include "ckpt/megatron_export_state.h"

#include <gtest/gtest.h>

#include "ckpt/megatron_gpt2.h"
#include "ckpt/pickle_reader.h"
#include "ckpt/torch_file.h"
#include "ckpt_test_util.h"
#include "core/error.h"

namespace trident::megatron {
namespace {

using json = nlohmann::json;
using pickle::Kind;
using testing::ScratchDir;

// A state of two parameters (a weight and a LayerNorm weight) after `steps` steps.
MegatronTrainingState state_after(int64_t steps, const json& loss_scaler) {
  const ModelConfig cfg = testing::small_config();
  MegatronTrainingState st;
  for (const char* name : {"wpe", "h.0.ln_1.weight"}) {
    const std::vector<int64_t> shape =
        std::string(name) == "wpe" ? std::vector<int64_t>{cfg.max_position_embeddings, cfg.hidden_size}
                                   : std::vector<int64_t>{cfg.hidden_size};
    const size_t n = static_cast<size_t>(numel_of(shape));
    st.master[name] = HostTensor{shape, std::vector<float>(n, 0.5f)};
    st.exp_avg[name] = HostTensor{shape, std::vector<float>(n, 0.25f)};
    st.exp_avg_sq[name] = HostTensor{shape, std::vector<float>(n, 0.125f)};
  }
  st.trainer_state = {{"optimizer_steps", steps},
                      {"opt_param_scheduler", {{"max_lr", 1e-3}, {"min_lr", 1e-4}, {"start_wd", 0.01}}}};
  if (!loss_scaler.is_null()) st.trainer_state["loss_scaler"] = loss_scaler;
  return st;
}

// The 'optimizer' value written for `st` (fp16) and read back.
struct Written {
  ScratchDir dir;
  std::unique_ptr<TorchFile> file;
  const pickle::Value& root() const { return *file->root().get("optimizer"); }
};

std::unique_ptr<Written> write(const MegatronTrainingState& st, MegatronAdam adam) {
  auto out = std::make_unique<Written>();
  pickle::Writer w;
  RankFile file;
  w.begin_dict();
  w.str("optimizer");
  write_optimizer_state(w, file, {"wpe", "h.0.ln_1.weight"}, st, testing::small_config(), 1, 0, DType::F16, adam);
  w.end();
  const std::string path = out->dir / "model_optim_rng.pt";
  write_torch_file(path, w.finish(), file.storages());
  out->file = std::make_unique<TorchFile>(path);
  return out;
}

TEST(MegatronExportState, StepCountWhereTheAdamKeepsIt) {
  for (const MegatronAdam adam : {MegatronAdam::kFused, MegatronAdam::kTorch}) {
    const auto out = write(state_after(3, nullptr), adam);
    const pickle::Value& inner = *out->root().get("optimizer");
    const pickle::Value& groups = *inner.get("param_groups");
    ASSERT_EQ(groups.items.size(), 2u);
    const pickle::Value* state0 = nullptr;
    for (const auto& [k, v] : inner.get("state")->entries)
      if (k->kind == Kind::Int && k->integer == 0) state0 = v.get();
    ASSERT_TRUE(state0);
    if (adam == MegatronAdam::kFused) {
      EXPECT_EQ(groups.items[0]->get("step")->integer, 3);
      EXPECT_FALSE(state0->get("step"));  // Transformer Engine's FusedAdam refuses it
    } else {
      EXPECT_FALSE(groups.items[0]->get("step"));
      EXPECT_EQ(out->file->read_f32(*TorchFile::tensor(*state0->get("step")), "step"), std::vector<float>{3});
    }
    // The weight (wpe) in the decayed group, the LayerNorm in the other; Megatron's keys.
    EXPECT_EQ(groups.items[0]->get("params")->items[0]->integer, 0);
    EXPECT_EQ(groups.items[1]->get("params")->items[0]->integer, 1);
    EXPECT_EQ(groups.items[1]->get("wd_mult")->real, 0.0);
    EXPECT_TRUE(groups.items[0]->get("default_config")->boolean);
    const pickle::Value& masters = *out->root().get("fp32_from_fp16_params");
    EXPECT_EQ(out->file->read_f32(*TorchFile::tensor(*masters.items[1]->items[0]), "master")[0], 0.5f);
  }
}

TEST(MegatronExportState, NoStateBeforeTheFirstStep) {
  const auto out = write(state_after(0, nullptr), MegatronAdam::kFused);
  EXPECT_TRUE(out->root().get("optimizer")->get("state")->entries.empty());
  EXPECT_FALSE(out->root().get("grad_scaler"));  // no dynamic scaler saved
}

TEST(MegatronExportState, LossScalers) {
  // Megatron's own: as saved.
  auto out = write(state_after(3, {{"scale", 1024.0}, {"growth_tracker", 7}, {"hysteresis_tracker", -1}}),
                   MegatronAdam::kFused);
  const pickle::Value* s = out->root().get("grad_scaler");
  ASSERT_TRUE(s);
  EXPECT_EQ(out->file->read_f32(*TorchFile::tensor(*s->get("scale")), "scale"), std::vector<float>{1024});
  EXPECT_EQ(s->get("growth_tracker")->integer, 7);
  EXPECT_EQ(s->get("hysteresis_tracker")->integer, -1);
  // DeepSpeed's fused scaler, 2500 clean steps at a window of 1000: it grew at 1000 and 2000;
  // Megatron's grows when its tracker meets the window, 500 steps on, and halves at the next
  // overflow.
  out = write(state_after(3, {{"scale", 1024.0}, {"growth_tracker", 2500}, {"hysteresis_tracker", 0},
                              {"style", "deepspeed_fused"}, {"window", 1000}}),
              MegatronAdam::kFused);
  s = out->root().get("grad_scaler");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->get("growth_tracker")->integer, 500);
  EXPECT_EQ(s->get("hysteresis_tracker")->integer, 1);
}

TEST(MegatronExportState, RefusesATokenBasedDecay) {
  EXPECT_THROW(check_exportable_state({{"opt_param_scheduler", {{"max_lr", 1e-3}, {"lr_decay_tokens", 1000}}}}, true),
               ConfigError);
  EXPECT_THROW(check_exportable_state(json::object(), true), ConfigError);
  EXPECT_NO_THROW(
      check_exportable_state({{"opt_param_scheduler", {{"max_lr", 1e-3}, {"lr_decay_tokens", nullptr}}}}, true));
}

// --decoupled-lr puts the word embedding (and a last stage's tied head) in a param group of its
// own at its own rates, ordered as Megatron-core 0.12 to 0.15 build them on each rank (torch's
// load pairs the groups by position): where each group's first parameter lies, then the groups
// only other ranks hold, empty, in rank 0's order (embedding, weights, rest).
TEST(MegatronExportState, DecoupledLearningRateIsAGroupOfItsOwn) {
  const ModelConfig cfg = testing::small_config();
  MegatronTrainingState st = state_after(3, nullptr);
  const std::vector<int64_t> wte_shape = {cfg.vocab_size, cfg.hidden_size};
  const size_t n = static_cast<size_t>(numel_of(wte_shape));
  st.master["wte"] = HostTensor{wte_shape, std::vector<float>(n, 0.75f)};
  st.exp_avg["wte"] = HostTensor{wte_shape, std::vector<float>(n, 0.25f)};
  st.exp_avg_sq["wte"] = HostTensor{wte_shape, std::vector<float>(n, 0.125f)};
  st.trainer_state["opt_param_scheduler"]["decoupled_lr"] = 4e-3;
  st.trainer_state["opt_param_scheduler"]["decoupled_min_lr"] = 2e-4;
  struct Case {
    std::vector<std::string> params;
    // The groups' positions: decayed, decoupled, the rest; and each group's indices.
    size_t decayed, decoupled, rest;
    std::vector<int64_t> decayed_ids, decoupled_ids, rest_ids;
    size_t decoupled_masters;
  };
  const Case cases[] = {
      {{"wte", "wpe", "h.0.ln_1.weight"}, 1, 0, 2, {1}, {0}, {2}, 1},  // a first stage
      {{"h.0.ln_1.weight", "wpe"}, 1, 2, 0, {1}, {}, {0}, 0},          // a stage without the embedding
      {{"wpe", "h.0.ln_1.weight", "wte"}, 0, 2, 1, {0}, {2}, {1}, 1},  // the tied head last
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.params.front() + " first");
    ScratchDir dir;
    pickle::Writer w;
    RankFile file;
    w.begin_dict();
    w.str("optimizer");
    write_optimizer_state(w, file, c.params, st, cfg, 1, 0, DType::F16, MegatronAdam::kFused);
    w.end();
    const std::string path = dir / "model_optim_rng.pt";
    write_torch_file(path, w.finish(), file.storages());
    const TorchFile f(path);
    const pickle::Value& groups = *f.root().get("optimizer")->get("optimizer")->get("param_groups");
    ASSERT_EQ(groups.items.size(), 3u);
    const pickle::Value &decayed = *groups.items[c.decayed], &decoupled = *groups.items[c.decoupled],
                        &rest = *groups.items[c.rest];
    EXPECT_TRUE(decoupled.get("is_decoupled_lr")->boolean);
    EXPECT_FALSE(decoupled.get("default_config")->boolean);
    EXPECT_EQ(decoupled.get("max_lr")->real, 4e-3);
    EXPECT_EQ(decoupled.get("min_lr")->real, 2e-4);
    EXPECT_EQ(decoupled.get("lr")->real, 4e-3);
    EXPECT_EQ(decoupled.get("wd_mult")->real, 1.0);
    EXPECT_EQ(decoupled.get("weight_decay")->real, 0.01);
    EXPECT_EQ(decayed.get("wd_mult")->real, 1.0);
    EXPECT_EQ(rest.get("wd_mult")->real, 0.0);
    for (const pickle::Value* g : {&decayed, &rest}) {
      EXPECT_FALSE(g->get("is_decoupled_lr")->boolean);
      EXPECT_TRUE(g->get("default_config")->boolean);
      EXPECT_EQ(g->get("max_lr")->real, 1e-3);
      EXPECT_EQ(g->get("min_lr")->real, 1e-4);
    }
    const auto ids = [](const pickle::Value& g) {
      std::vector<int64_t> out;
      for (const auto& i : g.get("params")->items) out.push_back(i->integer);
      return out;
    };
    EXPECT_EQ(ids(decayed), c.decayed_ids);
    EXPECT_EQ(ids(decoupled), c.decoupled_ids);
    EXPECT_EQ(ids(rest), c.rest_ids);
    const pickle::Value& masters = *f.root().get("optimizer")->get("fp32_from_fp16_params");
    ASSERT_EQ(masters.items.size(), 3u);
    ASSERT_EQ(masters.items[c.decoupled]->items.size(), c.decoupled_masters);
    if (c.decoupled_masters == 1) {
      EXPECT_EQ(f.read_f32(*TorchFile::tensor(*masters.items[c.decoupled]->items[0]), "master")[0], 0.75f);
    }
  }
}

// A schedule that records no --decoupled-min-lr floors the embedding's rate at --min-lr, as
// Megatron's default does.
TEST(MegatronExportState, DecoupledFloorDefaultsToTheMinimumRate) {
  MegatronTrainingState st = state_after(3, nullptr);
  st.trainer_state["opt_param_scheduler"]["decoupled_lr"] = 4e-3;
  st.trainer_state["opt_param_scheduler"]["decoupled_min_lr"] = nullptr;
  const auto out = write(st, MegatronAdam::kFused);  // wpe, then a LayerNorm: the embedding's group last
  const pickle::Value& groups = *out->root().get("optimizer")->get("param_groups");
  ASSERT_EQ(groups.items.size(), 3u);
  EXPECT_TRUE(groups.items[2]->get("is_decoupled_lr")->boolean);
  EXPECT_EQ(groups.items[2]->get("max_lr")->real, 4e-3);
  EXPECT_EQ(groups.items[2]->get("min_lr")->real, 1e-4);
  EXPECT_TRUE(groups.items[2]->get("params")->items.empty());  // no word embedding in this file
}

// Megatron's legacy model trains its word embedding at --lr: a --decoupled-lr run's optimizer
// state exports to Megatron-core's model only.
TEST(MegatronExportState, DecoupledLearningRateNeedsMegatronCoresModel) {
  const json ts = {{"opt_param_scheduler", {{"max_lr", 1e-3}, {"decoupled_lr", 4e-3}}}};
  try {
    check_exportable_state(ts, false);
    ADD_FAILURE() << "a decoupled learning rate exported to the legacy model";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--with-optimizer: the run trained the word embedding at its own learning "
                                          "rate (--decoupled-lr), which only Megatron-core's model does",
                                          0),
              0u)
        << e.what();
  }
  EXPECT_NO_THROW(check_exportable_state(ts, true));
  EXPECT_NO_THROW(check_exportable_state({{"opt_param_scheduler", {{"max_lr", 1e-3}, {"decoupled_lr", nullptr}}}}, false));
}

// --embedding-init-method-std moves the embeddings into Megatron's no-decay group (another
// group order): the optimizer state is refused, the weights alone still export.
TEST(MegatronExportState, RefusesTheOptimizerOfEmbeddingsWithoutWeightDecay) {
  ModelConfig cfg = testing::small_config();
  cfg.embedding_init_method_std = 1.0f;
  const MegatronTrainingState st = state_after(1, json());
  MegatronExportOptions o;
  o.tokenizer_type = "NullTokenizer";  // small_config: not GPT-2's vocabulary
  o.training = &st;
  try {
    check_megatron_export(cfg, o);
    ADD_FAILURE() << "exported";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--with-optimizer: the run's embeddings take no weight decay"),
              std::string::npos)
        << e.what();
  }
  o.training = nullptr;
  EXPECT_NO_THROW(check_megatron_export(cfg, o));
}

}  // namespace
}  // namespace trident::megatron
