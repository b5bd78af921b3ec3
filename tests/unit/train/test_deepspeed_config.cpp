// Megatron-DeepSpeed's --deepspeed --deepspeed_config FILE: the settings DeepSpeed's engine
// takes from the file (precision, fp16 loss scaler, clipping, ZeRO stage) against the same run
// written in Megatron's flags (flags_every_rank_shares lists them, the scaler's window,
// hysteresis and minimum included), DeepSpeed's defaults where
// the file is silent (DynamicLossScaler's own when the fp16 section sets no scaler key), the
// batch staying Megatron's while the file's batch keys pass DeepSpeed's derivation and check,
// and a one-line error naming the flag and the key for every contradiction, unsupported
// setting, typo and unreadable file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "parse_options.h"
#include "train/options.h"

namespace trident {
namespace {

// A file under the temporary directory, named by the test and this process.
std::string write_config(const std::string& name, const std::string& json) {
  const auto path =
      std::filesystem::temp_directory_path() / ("trident_ds_" + name + "_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << json;
  return path.string();
}

// BigScience's ds_config.json, as its training scripts write it.
const char* const kBigScience = R"({
  "train_micro_batch_size_per_gpu": 2,
  "train_batch_size": 16,
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 1},
  "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 1,
           "initial_scale_power": 12},
  "steps_per_print": 2000,
  "wall_clock_breakdown": false
})";

// The ConfigError of resolving `o` at `dp` data-parallel ranks ("" when it resolves).
std::string resolve_error(TrainOptions o, int dp) {
  try {
    resolve_global_batch_size(o, dp);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DeepSpeedConfig, BigScienceConfigEqualsMegatronFlags) {
  const std::string path = write_config("bigscience", kBigScience);
  // The script's own flags agree with the file; the file alone gives the same run.
  const TrainOptions with_flags = parse({"--deepspeed", "--deepspeed_config", path, "--micro-batch-size", "2",
                                         "--global-batch-size", "16", "--fp16", "--zero-stage", "1", "--clip-grad", "1"});
  const TrainOptions file_only = parse({"--deepspeed", "--deepspeed_config", path, "--global-batch-size", "16"});
  const TrainOptions megatron = parse({"--micro-batch-size", "2", "--global-batch-size", "16", "--fp16", "--zero-stage",
                                       "1", "--initial-loss-scale", "4096", "--loss-scale-window", "500",
                                       "--hysteresis", "2", "--min-loss-scale", "1", "--clip-grad", "1.0",
                                       "--tensorboard-tags", "megatron-deepspeed"});
  EXPECT_EQ(flags_every_rank_shares(with_flags), flags_every_rank_shares(megatron));
  EXPECT_EQ(flags_every_rank_shares(file_only), flags_every_rank_shares(megatron));
  // Megatron-DeepSpeed's TensorBoard names, unless the command line names the others.
  EXPECT_EQ(file_only.tensorboard_tags, "megatron-deepspeed");
  EXPECT_EQ(parse({"--deepspeed", "--deepspeed_config", path, "--tensorboard-tags", "megatron"}).tensorboard_tags,
            "megatron");
  EXPECT_EQ(file_only.micro_batch_size, 2);
  EXPECT_EQ(file_only.model.dtype, DType::F16);
  EXPECT_EQ(file_only.zero_stage, 1);
  EXPECT_EQ(file_only.clip_grad, 1.0f);
  const LossScalerConfig ls = make_loss_scaler_config(file_only);
  EXPECT_EQ(ls.kind, LossScaleKind::Dynamic);
  EXPECT_EQ(ls.initial_scale, 4096.0);
  EXPECT_EQ(ls.growth_interval, 500);
  EXPECT_EQ(ls.hysteresis, 2);
  EXPECT_EQ(ls.min_scale, 1.0);
  EXPECT_EQ(file_only.flags_without_effect,
            std::vector<std::string>{"--deepspeed_config " + path + "'s steps_per_print, wall_clock_breakdown"});
  // 16 = 2 x 8 steps x 1 rank, = 2 x 2 x 4 ranks: DeepSpeed derives the steps; 3 ranks do not divide.
  EXPECT_EQ(resolve_error(file_only, 1), "");
  EXPECT_EQ(resolve_error(file_only, 4), "");
  EXPECT_EQ(resolve_error(file_only, 3),
            "--deepspeed_config " + path + ": \"train_batch_size\" 16 must be \"train_micro_batch_size_per_gpu\" 2 x "
            "\"gradient_accumulation_steps\" 2 x the data-parallel size 3 (DeepSpeed's check)");
}

// The batch is Megatron's: the file's train_batch_size does not replace the default global
// batch (Megatron-DeepSpeed sets DeepSpeed's to it before every iteration).
TEST(DeepSpeedConfig, TheBatchStaysMegatrons) {
  const std::string path = write_config("batch_only", R"({"train_batch_size": 32, "zero_optimization": {"stage": 1}})");
  TrainOptions o = parse({"--deepspeed", "--deepspeed_config", path, "--micro-batch-size", "8"});
  EXPECT_TRUE(o.global_batch_size_is_default);
  resolve_global_batch_size(o, 4);  // DeepSpeed: micro 32 / 4 = 8, one step
  EXPECT_EQ(o.global_batch_size, 32);
  // At 2 ranks DeepSpeed's micro batch would be 16, not the model's 8.
  EXPECT_EQ(resolve_error(parse({"--deepspeed", "--deepspeed_config", path, "--micro-batch-size", "8"}), 2),
            "--deepspeed_config " + path + ": DeepSpeed's micro batch 16 (\"train_batch_size\" / "
            "\"gradient_accumulation_steps\" / the data-parallel size) differs from --micro-batch-size 8");
  // The micro batch and the steps give DeepSpeed's train batch; the file's micro batch fills
  // --micro-batch-size.
  const std::string steps = write_config(
      "gas", R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}})");
  o = parse({"--deepspeed", "--deepspeed_config", steps, "--global-batch-size", "16"});
  EXPECT_EQ(o.micro_batch_size, 2);
  EXPECT_EQ(resolve_error(o, 2), "");
  const std::string neither = write_config("neither", R"({"gradient_accumulation_steps": 4})");
  EXPECT_EQ(resolve_error(parse({"--deepspeed", "--deepspeed_config", neither}), 1),
            "--deepspeed_config " + neither +
                ": DeepSpeed needs \"train_batch_size\" or \"train_micro_batch_size_per_gpu\"");
}

// What DeepSpeed does where the file is silent: fp32, no clipping (its default 0, whatever
// --clip-grad says, which the note names), ZeRO stage 0 (--zero-stage noted), and for fp16
// without a scaler key DynamicLossScaler's 2^32 and hysteresis 1.
TEST(DeepSpeedConfig, DeepSpeedsDefaults) {
  const std::string path = write_config(
      "defaults", R"({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
  TrainOptions o = parse({"--deepspeed", "--deepspeed_config", path, "--clip-grad", "1.0"});
  EXPECT_EQ(o.clip_grad, 0.0f);
  EXPECT_EQ(o.flags_without_effect, std::vector<std::string>{"--clip-grad (--deepspeed_config " + path +
                                                             " has no \"gradient_clipping\": DeepSpeed's default 0, "
                                                             "no clipping)"});
  EXPECT_EQ(o.initial_loss_scale, 4294967296.0);
  EXPECT_EQ(o.hysteresis, 1);
  EXPECT_EQ(o.loss_scale_window, 1000);
  EXPECT_EQ(o.min_loss_scale, 1.0);
  EXPECT_EQ(o.zero_stage, 2);
  // One scaler key: the config's defaults (2^16, hysteresis 2) for the others.
  o = parse({"--deepspeed", "--deepspeed_config",
             write_config("one_key", R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
                                          "fp16": {"enabled": true, "loss_scale_window": 100}})")});
  EXPECT_EQ(o.initial_loss_scale, 65536.0);
  EXPECT_EQ(o.hysteresis, 2);
  EXPECT_EQ(o.loss_scale_window, 100);
  // A static scale (at any stage); bf16 (gradients accumulated in fp32, as Megatron's bf16).
  EXPECT_EQ(parse({"--deepspeed", "--deepspeed_config",
                   write_config("static", R"({"train_micro_batch_size_per_gpu": 4,
                                              "fp16": {"enabled": true, "loss_scale": 128}})")})
                .loss_scale,
            128.0);
  for (const char* key : {"bf16", "bfloat16"}) {
    const TrainOptions bf16 = parse({"--deepspeed", "--deepspeed_config",
                                     write_config(key, std::string(R"({"train_micro_batch_size_per_gpu": 4, ")") + key +
                                                           R"(": {"enabled": true}})")});
    EXPECT_EQ(bf16.model.dtype, DType::BF16) << key;
    EXPECT_TRUE(bf16.accumulate_allreduce_grads_in_fp32) << key;
  }
  // --grad-reduce-in-bf16 with the config's bf16: bf16 gradients, as with --bf16.
  EXPECT_FALSE(parse({"--deepspeed", "--deepspeed_config",
                      write_config("bf16_grads", R"({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}})"),
                      "--grad-reduce-in-bf16"})
                   .accumulate_allreduce_grads_in_fp32);
  const std::string fp32 = write_config("empty", R"({"train_micro_batch_size_per_gpu": 4})");
  o = parse({"--deepspeed", "--deepspeed_config", fp32, "--zero-stage", "1"});
  EXPECT_EQ(o.model.dtype, DType::F32);
  EXPECT_EQ(o.zero_stage, 0);
  EXPECT_EQ(o.flags_without_effect, std::vector<std::string>{"--zero-stage (--deepspeed_config " + fp32 +
                                                             " has no \"zero_optimization\": DeepSpeed's stage 0)"});
  // DeepSpeed's old form "zero_optimization": true is stage 1.
  EXPECT_EQ(parse({"--deepspeed", "--deepspeed_config", write_config("old_zero", R"({"zero_optimization": true})")})
                .zero_stage,
            1);
  // The clip compares as trident keeps it (fp32): 0.1 on both sides agrees.
  EXPECT_EQ(error_of({"--deepspeed", "--deepspeed_config", write_config("clip", R"({"gradient_clipping": 0.1})"),
                      "--clip-grad", "0.1"}),
            "");
}

// fp16 with dynamic scaling at ZeRO stage 0 (no "zero_optimization", or stage 0): DeepSpeed's
// FP16_Optimizer scales, by its own rules (LossScaleKind::DeepSpeedFused) with the file's
// initial scale, window and minimum; its hysteresis has no effect (--hysteresis noted). Stage
// 1 keeps Megatron's rules with the file's hysteresis.
TEST(DeepSpeedConfig, Fp16AtStageZeroScalesAsFp16Optimizer) {
  const std::string stage0 = write_config(
      "stage0", R"({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true, "initial_scale_power": 12,
                    "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 2}})");
  TrainOptions o = parse({"--deepspeed", "--deepspeed_config", stage0, "--hysteresis", "4"});
  EXPECT_TRUE(o.deepspeed_fp16_optimizer);
  LossScalerConfig ls = make_loss_scaler_config(o);
  EXPECT_EQ(ls.kind, LossScaleKind::DeepSpeedFused);
  EXPECT_EQ(ls.initial_scale, 4096.0);
  EXPECT_EQ(ls.growth_interval, 500);
  EXPECT_EQ(ls.min_scale, 2.0);
  EXPECT_EQ(o.flags_without_effect,
            std::vector<std::string>{"--hysteresis (DeepSpeed's FP16_Optimizer, at ZeRO stage 0, has none)"});
  const std::string stage1 = write_config(
      "stage1", R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
                    "fp16": {"enabled": true, "hysteresis": 3}})");
  o = parse({"--deepspeed", "--deepspeed_config", stage1});
  EXPECT_FALSE(o.deepspeed_fp16_optimizer);
  ls = make_loss_scaler_config(o);
  EXPECT_EQ(ls.kind, LossScaleKind::Dynamic);
  EXPECT_EQ(ls.hysteresis, 3);
  // A static scale at stage 0 stays a constant one.
  EXPECT_EQ(make_loss_scaler_config(parse({"--deepspeed", "--deepspeed_config",
                                           write_config("stage0_static", R"({"fp16": {"enabled": true,
                                                                            "loss_scale": 64}})")}))
                .kind,
            LossScaleKind::Constant);
}

TEST(DeepSpeedConfig, ContradictionsAndUnsupportedSettingsAreOneLine) {
  const std::string big = write_config("bigscience2", kBigScience);
  const std::vector<std::string> ds = {"--deepspeed", "--deepspeed_config", big};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = ds;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string of = "differs from --deepspeed_config " + big + "'s ";
  EXPECT_EQ(must_fail(with({"--zero-stage", "2"})), "--zero-stage 2 " + of + "\"zero_optimization.stage\": 1");
  EXPECT_EQ(must_fail(with({"--clip-grad", "0.5"})), "--clip-grad 0.5 " + of + "\"gradient_clipping\": 1");
  EXPECT_EQ(must_fail(with({"--loss-scale-window", "1000"})),
            "--loss-scale-window 1000 " + of + "\"fp16.loss_scale_window\": 500");
  EXPECT_EQ(must_fail(with({"--bf16"})),
            "--bf16 needs --deepspeed_config " + big + "'s \"bf16\": {\"enabled\": true} (it enables fp16)");
  EXPECT_EQ(must_fail(with({"--use-distributed-optimizer"})),
            "--use-distributed-optimizer is Megatron's optimizer sharding; with --deepspeed, --deepspeed_config " + big +
                "'s \"zero_optimization\" shards");
  // --loss-scale with the file's fp16 (no --fp16 flag) is read against the file.
  EXPECT_EQ(must_fail(with({"--loss-scale", "8"})), "--loss-scale 8 " + of + "\"fp16.loss_scale\": 0");
  const std::string fp32 = write_config("fp32", "{}");
  EXPECT_EQ(must_fail({"--deepspeed", "--deepspeed_config", fp32, "--fp16"}),
            "--fp16 needs --deepspeed_config " + fp32 + "'s \"fp16\": {\"enabled\": true}");
  EXPECT_EQ(must_fail({"--deepspeed", "--deepspeed_config", fp32, "--loss-scale", "8"}),
            "--loss-scale needs --deepspeed_config " + fp32 + "'s \"fp16\": {\"enabled\": true} (DeepSpeed scales "
            "only fp16 losses)");
  EXPECT_EQ(must_fail({"--deepspeed"}), "--deepspeed needs --deepspeed_config FILE (DeepSpeed's JSON config)");
  // In a --config file, as YAML keys (underscores and all), the same as on the command line.
  const std::string yaml = write_config("yaml", "deepspeed: true\ndeepspeed_config: " + big + "\n");
  EXPECT_EQ(flags_every_rank_shares(parse({"--config", yaml})), flags_every_rank_shares(parse(ds)));
  EXPECT_EQ(parse({"--config", yaml}).zero_stage, 1);
  // Without --deepspeed Megatron-DeepSpeed never reads the file: noted, nothing applied.
  const TrainOptions unread = parse({"--deepspeed_config", big});
  EXPECT_EQ(unread.model.dtype, DType::F32);
  EXPECT_EQ(unread.flags_without_effect, std::vector<std::string>{"--deepspeed_config (without --deepspeed)"});

  const auto file_error = [&](const std::string& name, const std::string& json) {
    const std::string path = write_config(name, json);
    const std::string msg = must_fail({"--deepspeed", "--deepspeed_config", path});
    const std::string prefix = "--deepspeed_config " + path + ": ";
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    return msg.substr(prefix.size());
  };
  EXPECT_EQ(file_error("stage3", R"({"zero_optimization": {"stage": 3}})"),
            "\"zero_optimization.stage\": ZeRO stage 3 (parameters sharded) is not supported; stages 0, 1 "
            "(--zero-stage 1: optimizer state sharded) and 2 (gradients too) are");
  EXPECT_EQ(file_error("scheduler", R"({"scheduler": {"type": "WarmupLR"}})").substr(0, 50),
            "\"scheduler\": DeepSpeed's learning-rate schedulers ");
  EXPECT_EQ(file_error("typo", R"({"train_batch_sise": 16})"),
            "\"train_batch_sise\": not a DeepSpeed setting trident knows");
  EXPECT_EQ(file_error("fp16_typo", R"({"fp16": {"enabeld": true}})"), "\"fp16.enabeld\": not a DeepSpeed fp16 setting");
  EXPECT_EQ(file_error("auto", R"({"train_batch_size": "auto"})"),
            "\"train_batch_size\": \"auto\" is filled in by the Hugging Face Trainer; give the value");
  EXPECT_EQ(file_error("fraction", R"({"train_batch_size": 2.5})"), "\"train_batch_size\": expected an integer, got 2.5");
  EXPECT_EQ(file_error("zero_batch", R"({"train_batch_size": 0})"),
            "\"train_batch_size\": expected an integer in [1, 2147483647], got 0");
  EXPECT_EQ(file_error("huge_batch", R"({"train_batch_size": 4294967296})"),
            "\"train_batch_size\": expected an integer in [1, 2147483647], got 4294967296");
  EXPECT_EQ(file_error("string_bool", R"({"fp16": {"enabled": "true"}})"),
            "\"fp16.enabled\": expected true or false, got \"true\"");
  EXPECT_EQ(file_error("min_scale", R"({"fp16": {"enabled": true, "min_loss_scale": 0}})"),
            "\"fp16.min_loss_scale\": must be positive (the scale halves down to it)");
  EXPECT_EQ(file_error("both", R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
            "\"bf16.enabled\": fp16 and bf16 are both enabled");
  EXPECT_EQ(file_error("aliases", R"({"bf16": {"enabled": false}, "bfloat16": {"enabled": true}})"),
            "\"bfloat16\": give one of \"bf16\" and \"bfloat16\" (the same section)");
  EXPECT_EQ(file_error("curriculum", R"({"curriculum_learning": {"enabled": true, "max_difficulty": 1024}})"),
            "\"curriculum_learning.enabled\": DeepSpeed's curriculum learning (a growing sequence length) is not "
            "supported");
  EXPECT_EQ(file_error("not_json", "{\"fp16\": ").rfind("not JSON (", 0), 0u);
  EXPECT_EQ(file_error("array", "[1]"), "expected a JSON object of DeepSpeed's settings");
  const std::string missing = "/nonexistent/ds.json";
  EXPECT_EQ(must_fail({"--deepspeed", "--deepspeed_config", missing}).rfind("--deepspeed_config " + missing, 0), 0u);
  // A disabled feature section, the optimizer section and the implementation keys are noted.
  const TrainOptions noted = parse(
      {"--deepspeed", "--deepspeed_config",
       write_config("noted", R"({"curriculum_learning": {"enabled": false}, "zero_optimization": {"stage": 2,
         "overlap_comm": true, "offload_optimizer": {"device": "cpu"}}, "fp16": {"enabled": true, "auto_cast": false},
         "optimizer": {"type": "Adam", "params": {"lr": 0.001}}, "train_micro_batch_size_per_gpu": 4})")});
  EXPECT_EQ(noted.zero_stage, 2);
  ASSERT_EQ(noted.flags_without_effect.size(), 1u);
  // (sorted by key: the JSON reader's objects are ordered maps)
  EXPECT_NE(noted.flags_without_effect[0].find("'s curriculum_learning, fp16.auto_cast, optimizer, "
                                               "zero_optimization.offload_optimizer, zero_optimization.overlap_comm"),
            std::string::npos)
      << noted.flags_without_effect[0];
}

// Megatron-DeepSpeed's and BigScience's DeepSpeed switches are accepted and noted; the
// architecture switch among them is refused.
TEST(DeepSpeedConfig, DeepSpeedSwitches) {
  const TrainOptions o = parse({"--deepspeed-activation-checkpointing", "--partition-activations",
                                "--zero-reduce-bucket-size", "50000000", "--no-pipeline-parallel", "--deepspeed_mpi",
                                "--codecarbon-dir", "cc", "--ds-sequence-parallel-size", "1"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--ds-sequence-parallel-size", "--deepspeed-activation-checkpointing",
                                      "--partition-activations", "--zero-reduce-bucket-size", "--no-pipeline-parallel",
                                      "--deepspeed_mpi", "--codecarbon-dir"}));
  EXPECT_EQ(must_fail({"--embed-layernorm"}), "--embed-layernorm: not supported: GPT-2 has no LayerNorm after its "
                                              "embeddings");
  EXPECT_NE(must_fail({"--ds-sequence-parallel-size", "2"}).find("DeepSpeed-Ulysses"), std::string::npos);
}

}  // namespace
}  // namespace trident
