// trident-train's options: Megatron's flags (mixed precision, sample- and iteration-based
// schedules, evaluation, TensorBoard, checkpoints), their YAML keys, and one error per
// bad value, each a single line naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/checkpoint_args.h"
#include "train/local_checkpoint.h"
#include "train/local_replicas.h"
#include "train/options.h"
#include "parse_options.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

std::string write_yaml(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("trident_options_" + name + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

TEST(Options, DefaultsFollowMegatron) {
  const TrainOptions o = parse({});
  EXPECT_EQ(o.model.dtype, DType::F32);
  EXPECT_FALSE(o.accumulate_allreduce_grads_in_fp32);
  EXPECT_EQ(o.loss_scale, 0.0);
  EXPECT_EQ(o.initial_loss_scale, 4294967296.0);
  EXPECT_EQ(o.min_loss_scale, 1.0);
  EXPECT_EQ(o.loss_scale_window, 1000);
  EXPECT_EQ(o.hysteresis, 2);
  EXPECT_EQ(o.eval_interval, 1000);
  EXPECT_EQ(o.eval_iters, 100);
  EXPECT_EQ(o.tensorboard_dir, "");
  EXPECT_EQ(o.tensorboard_log_interval, 1);
  EXPECT_EQ(o.tensorboard_queue_size, 1000);
  EXPECT_EQ(o.peak_tflops, 0.0);
  EXPECT_EQ(o.max_nan_iterations, 10);
  EXPECT_EQ(o.save, "");
  EXPECT_EQ(o.load, "");
  EXPECT_EQ(o.save_interval, 0);
  EXPECT_EQ(o.keep_last, 0);
  EXPECT_FALSE(o.no_load_optim);
  EXPECT_FALSE(o.no_load_rng);
  EXPECT_FALSE(o.finetune);
  // Megatron-LM's --hidden-dropout and --attention-dropout defaults (0.1), and the flags win.
  EXPECT_FLOAT_EQ(o.model.hidden_dropout, 0.1f);
  EXPECT_FLOAT_EQ(o.model.attention_dropout, 0.1f);
  const TrainOptions no_dropout = parse({"--hidden-dropout", "0", "--attention-dropout", "0.25"});
  EXPECT_EQ(no_dropout.model.hidden_dropout, 0.0f);
  EXPECT_FLOAT_EQ(no_dropout.model.attention_dropout, 0.25f);
  // Megatron reads --use-mp-args-from-checkpoint-args only with --use-checkpoint-args.
  EXPECT_EQ(parse({"--use-mp-args-from-checkpoint-args"}).flags_without_effect,
            (std::vector<std::string>{"--use-mp-args-from-checkpoint-args (without --use-checkpoint-args)"}));
  EXPECT_TRUE(parse({"--load", "/ck", "--use-checkpoint-args", "--use-mp-args-from-checkpoint-args"})
                  .use_mp_args_from_checkpoint_args);
  // Megatron's None: the embeddings take --init-method-std.
  EXPECT_EQ(o.model.embedding_init_method_std, 0.0f);
  EXPECT_FLOAT_EQ(parse({"--embedding-init-method-std", "1.0"}).model.embedding_init_method_std, 1.0f);
  EXPECT_EQ(error_of({"--embedding-init-method-std", "0"}), "--embedding-init-method-std: expected a positive std");
  // Iteration-based, 100 iterations of micro batch 4.
  EXPECT_FALSE(o.sample_based);
  EXPECT_EQ(o.train_iters, 100);
  EXPECT_EQ(o.global_batch_size, 4);
  EXPECT_EQ(o.train_samples, 400u);
  EXPECT_EQ(o.decay_samples, 400u);
  EXPECT_EQ(o.warmup_samples, 0.0);
}

TEST(Options, MixedPrecisionFlags) {
  TrainOptions o = parse({"--bf16"});  // fp32 gradients with bf16, as Megatron-LM
  EXPECT_EQ(o.model.dtype, DType::BF16);
  EXPECT_TRUE(o.accumulate_allreduce_grads_in_fp32);
  // Megatron-core's --grad-reduce-in-bf16: bf16 gradients, whatever the other flag says; no
  // effect without --bf16.
  EXPECT_FALSE(parse({"--bf16", "--grad-reduce-in-bf16"}).accumulate_allreduce_grads_in_fp32);
  EXPECT_FALSE(parse({"--grad-reduce-in-bf16", "--bf16", "--accumulate-allreduce-grads-in-fp32"})
                   .accumulate_allreduce_grads_in_fp32);
  EXPECT_TRUE(parse({"--fp16", "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32"})
                  .accumulate_allreduce_grads_in_fp32);
  EXPECT_EQ(parse({"--fp16", "--grad-reduce-in-bf16"}).model.dtype, DType::F16);
  o = parse({"--fp16"});
  EXPECT_EQ(o.model.dtype, DType::F16);
  EXPECT_FALSE(o.accumulate_allreduce_grads_in_fp32);
  LossScalerConfig c = make_loss_scaler_config(o);
  EXPECT_EQ(c.kind, LossScaleKind::Dynamic);
  EXPECT_EQ(c.initial_scale, 4294967296.0);
  EXPECT_EQ(c.min_scale, 1.0);
  EXPECT_EQ(c.growth_interval, 1000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.growth_factor, 2.0);
  EXPECT_EQ(c.backoff_factor, 0.5);

  o = parse({"--fp16", "--initial-loss-scale", "65536", "--min-loss-scale", "0.25", "--loss-scale-window", "50",
             "--hysteresis", "3", "--accumulate-allreduce-grads-in-fp32"});
  EXPECT_TRUE(o.accumulate_allreduce_grads_in_fp32);
  c = make_loss_scaler_config(o);
  EXPECT_EQ(c.kind, LossScaleKind::Dynamic);
  EXPECT_EQ(c.initial_scale, 65536.0);
  EXPECT_EQ(c.min_scale, 0.25);
  EXPECT_EQ(c.growth_interval, 50);
  EXPECT_EQ(c.hysteresis, 3);

  o = parse({"--fp16", "--loss-scale", "128"});
  c = make_loss_scaler_config(o);
  EXPECT_EQ(c.kind, LossScaleKind::Constant);
  EXPECT_EQ(c.constant_scale, 128.0);

  o = parse({"--bf16"});
  EXPECT_EQ(o.model.dtype, DType::BF16);
  EXPECT_EQ(make_loss_scaler_config(o).kind, LossScaleKind::None);  // Megatron: no scaler for bf16
  o = parse({"--bf16", "--loss-scale", "8"});
  c = make_loss_scaler_config(o);
  EXPECT_EQ(c.kind, LossScaleKind::Constant);
  EXPECT_EQ(c.constant_scale, 8.0);

  EXPECT_EQ(make_loss_scaler_config(parse({})).kind, LossScaleKind::None);
}

TEST(Options, EvaluationTensorBoardAndHealthFlags) {
  const TrainOptions o = parse({"--eval-interval", "250", "--eval-iters", "0", "--tensorboard-dir", "/tmp/tb",
                                "--tensorboard-log-interval", "5", "--tensorboard-queue-size", "7", "--peak-tflops", "989.5",
                                "--max-nan-iterations", "0"});
  EXPECT_EQ(o.eval_interval, 250);
  EXPECT_EQ(o.eval_iters, 0);
  EXPECT_EQ(o.tensorboard_dir, "/tmp/tb");
  EXPECT_EQ(o.tensorboard_log_interval, 5);
  EXPECT_EQ(o.tensorboard_queue_size, 7);
  EXPECT_EQ(o.peak_tflops, 989.5);
  EXPECT_EQ(o.max_nan_iterations, 0);
  EXPECT_EQ(o.tensorboard_tags, "megatron");
  EXPECT_EQ(parse({"--tensorboard-tags", "megatron-deepspeed"}).tensorboard_tags, "megatron-deepspeed");
  EXPECT_EQ(error_of({"--tensorboard-tags", "deepspeed"}),
            "--tensorboard-tags deepspeed: expected megatron or megatron-deepspeed");
}

// Megatron's --load-main-params-from-ckpt: only with --no-load-optim (its assertion); trident's
// masters always come from the weights loaded, so it changes nothing and is said to.
TEST(Options, LoadMainParamsFromCkptNeedsNoLoadOptim) {
  EXPECT_EQ(must_fail({"--load-main-params-from-ckpt"}),
            "--load-main-params-from-ckpt must be used with --no-load-optim");
  EXPECT_EQ(parse({"--no-load-optim", "--load-main-params-from-ckpt"}).flags_without_effect,
            std::vector<std::string>{"--load-main-params-from-ckpt"});
}

// Megatron's --disable-bf16-reduced-precision-matmul: the CUDA GEMMs' bf16 split-K reduction in
// fp32, with --bf16 only (Megatron sets PyTorch's switch only then); --no-tf32 beside it.
TEST(Options, BackendOptionsFromTheFlags) {
  const BackendOptions plain = backend_options(parse({}));
  EXPECT_TRUE(plain.allow_tf32);
  EXPECT_FALSE(plain.bf16_reduction_in_fp32);
  EXPECT_FALSE(backend_options(parse({"--no-tf32"})).allow_tf32);
  EXPECT_TRUE(backend_options(parse({"--bf16", "--disable-bf16-reduced-precision-matmul"})).bf16_reduction_in_fp32);
  const TrainOptions fp16 = parse({"--fp16", "--disable-bf16-reduced-precision-matmul"});
  EXPECT_FALSE(backend_options(fp16).bf16_reduction_in_fp32);
  EXPECT_EQ(fp16.flags_without_effect,
            std::vector<std::string>{"--disable-bf16-reduced-precision-matmul (without --bf16)"});
}

// Megatron's --log-memory-interval: positive, and a multiple of --log-interval (its assertion).
TEST(Options, LogMemoryInterval) {
  EXPECT_EQ(parse({}).log_memory_interval, 0);
  EXPECT_EQ(parse({"--log-interval", "10", "--log-memory-interval", "200"}).log_memory_interval, 200);
  EXPECT_EQ(must_fail({"--log-interval", "10", "--log-memory-interval", "25"}),
            "--log-memory-interval (25) must be a multiple of --log-interval (10)");
  EXPECT_EQ(must_fail({"--log-memory-interval", "0"}), "--log-memory-interval must be positive");
}

// Megatron's --exit-signal: the number of the signal named (Python's signal.Signals names).
TEST(Options, ExitSignalNamesOneMoreStopSignal) {
  EXPECT_EQ(parse({}).exit_signal, 0);
  EXPECT_EQ(parse({"--exit-signal", "SIGUSR1"}).exit_signal, SIGUSR1);
  EXPECT_EQ(parse({"--exit-signal", "SIGTERM"}).exit_signal, SIGTERM);
  EXPECT_EQ(parse({"--exit-signal", "SIGXCPU"}).exit_signal, SIGXCPU);
  for (const char* bad : {"USR1", "SIGKILL", "SIGSEGV", "SIGALRM", "10", "sigusr1"})
    EXPECT_EQ(error_of({"--exit-signal", bad}),
              std::string("--exit-signal ") + bad +
                  ": expected one of SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGXCPU, SIGPWR");
}

// Megatron's --start-eval-at-iter: the validations it sizes the split for (its rule, written
// out: train_iters // eval_interval + 1, less start // eval_interval; at least the final one)
// and those run.
TEST(Options, StartEvalAtIter) {
  const TrainOptions plain = parse({"--train-iters", "100", "--eval-interval", "10"});
  EXPECT_EQ(sized_validations(plain), 11);
  EXPECT_TRUE(validates_after(plain, 10));
  EXPECT_FALSE(validates_after(plain, 15));
  for (const auto& [start, sized] : std::vector<std::pair<int, int>>{{25, 9}, {20, 9}, {0, 11}, {1000, 1}}) {
    const TrainOptions o =
        parse({"--train-iters", "100", "--eval-interval", "10", "--start-eval-at-iter", std::to_string(start)});
    EXPECT_EQ(sized_validations(o), sized) << start;
    for (int64_t it = 10; it <= 100; it += 10) EXPECT_EQ(validates_after(o, it), it >= start) << start << " " << it;
  }
  EXPECT_EQ(error_of({"--start-eval-at-iter", "-1"}), "--start-eval-at-iter must not be negative");
}

// Megatron's evaluation batch sizes: only the training's (the global batch once resolved).
TEST(Options, EvaluationBatchSizesAreTheTrainingOnes) {
  TrainOptions same = parse({"--micro-batch-size", "2", "--eval-micro-batch-size", "2", "--eval-global-batch-size", "8"});
  EXPECT_NO_THROW(resolve_global_batch_size(same, 4));  // 2 x 4 ranks
  TrainOptions other = parse({"--micro-batch-size", "2", "--eval-global-batch-size", "16"});
  try {
    resolve_global_batch_size(other, 4);
    ADD_FAILURE() << "--eval-global-batch-size 16 taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--eval-global-batch-size 16: trident evaluates with the training's batches "
                           "(--global-batch-size 8)");
  }
  TrainOptions mbs = parse({"--micro-batch-size", "2", "--eval-micro-batch-size", "1"});
  EXPECT_THROW(resolve_global_batch_size(mbs, 1), ConfigError);
}

TEST(Options, UnevenPipelineFlags) {
  const TrainOptions ends = parse({"--num-layers", "8", "--pipeline-model-parallel-size", "3",
                                   "--decoder-first-pipeline-num-layers", "2", "--decoder-last-pipeline-num-layers", "2"});
  EXPECT_EQ(pipeline_split_text(ends.pipeline_split()), "stages of 2, 4 and 2 layers");
  // Megatron counts the embedding and the loss in the layers of a virtual stage.
  const TrainOptions counted = parse({"--num-layers", "6", "--pipeline-model-parallel-size", "2",
                                      "--num-layers-per-virtual-pipeline-stage", "2",
                                      "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"});
  EXPECT_EQ(counted.virtual_pipeline_chunks(), 2);
  EXPECT_EQ(pipeline_split_text(counted.pipeline_split()), "stages of [1, 2] and [2, 1] layers");
  // A stage of no transformer layer: the embedding and the loss take the ends' places.
  EXPECT_EQ(pipeline_split_text(parse({"--num-layers", "2", "--pipeline-model-parallel-size", "4",
                                       "--account-for-embedding-in-pipeline-split",
                                       "--account-for-loss-in-pipeline-split"})
                                    .pipeline_split()),
            "stages of 0, 1, 1 and 0 layers");
  EXPECT_EQ(error_of({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                      "0"}),
            "--decoder-first-pipeline-num-layers must be positive");
  EXPECT_EQ(error_of({"--num-layers", "8", "--pipeline-model-parallel-size", "4", "--decoder-last-pipeline-num-layers",
                      "3"}),
            "pipeline split: --num-layers (8) less the last stage's 3 leaves 5 layers for 3 other stages: they must "
            "share them equally, a layer at least each");
  EXPECT_EQ(error_of({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                      "1", "--decoder-last-pipeline-num-layers", "1"}),
            "pipeline split: with no stage between the first and the last, the first and last stages' 2 layers must "
            "be --num-layers (4)");
  EXPECT_EQ(error_of({"--num-layers", "4", "--pipeline-model-parallel-size", "3", "--decoder-first-pipeline-num-layers",
                      "5"}),
            "pipeline split: the first stage's 5 layers exceed --num-layers (4)");
  EXPECT_EQ(error_of({"--num-layers", "8", "--decoder-last-pipeline-num-layers", "8"}),
            "pipeline split: --decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size above 1");
  EXPECT_EQ(error_of({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--decoder-last-pipeline-num-layers",
                      "4", "--account-for-loss-in-pipeline-split"}),
            "pipeline split: --decoder-first/last-pipeline-num-layers and --account-for-embedding/loss-in-pipeline-"
            "split are alternatives: give one kind");
  EXPECT_EQ(error_of({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--account-for-loss-in-pipeline-split"}),
            "pipeline split: --num-layers (8) and the loss, counted as layers (9 in all), must be a multiple of "
            "--pipeline-model-parallel-size (2)");
  EXPECT_EQ(error_of({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                      "3", "--num-virtual-stages-per-pipeline-rank", "2"}),
            "pipeline split: the first stage's 3 layers must be a multiple of the 2 model chunks a stage");
  EXPECT_EQ(error_of({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                      "4", "--num-layers-per-virtual-pipeline-stage", "2"}),
            "--decoder-first/last-pipeline-num-layers with an interleaved schedule take "
            "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage");
  EXPECT_EQ(error_of({"--num-layers", "6", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage",
                      "3", "--account-for-loss-in-pipeline-split", "--account-for-embedding-in-pipeline-split"}),
            "--num-layers (6, 8 with the embedding and the loss) must be a multiple of --pipeline-model-parallel-size (2) x "
            "--num-layers-per-virtual-pipeline-stage (3)");
}

TEST(Options, PipelineLayoutFlag) {
  // The layout gives the chunks a stage (4 virtual stages at pp2: 2 chunks) and each one's layers.
  const TrainOptions o = parse({"--num-layers", "5", "--pipeline-model-parallel-size", "2",
                                "--pipeline-model-parallel-layout", "E|t*2|t|ttL"});
  EXPECT_EQ(o.virtual_pipeline_chunks(), 2);
  EXPECT_EQ(pipeline_split_text(o.pipeline_split()), "stages of [0, 1] and [2, 2] layers");
  // More stages than layers, one of them empty.
  EXPECT_EQ(pipeline_split_text(parse({"--num-layers", "2", "--pipeline-model-parallel-size", "3",
                                       "--pipeline-model-parallel-layout", "Et||tL"})
                                    .pipeline_split()),
            "stages of 1, 0 and 1 layers");
  EXPECT_EQ(error_of({"--pipeline-model-parallel-layout", ""}), "--pipeline-model-parallel-layout is empty");
  EXPECT_EQ(error_of({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout",
                      "Ett|ttL", "--num-virtual-stages-per-pipeline-rank", "2"}),
            "--pipeline-model-parallel-layout gives the model chunks a stage itself: "
            "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank go without it");
  EXPECT_EQ(error_of({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout",
                      "Ett|ttL", "--decoder-first-pipeline-num-layers", "2"}),
            "pipeline split: --pipeline-model-parallel-layout cannot be given with "
            "--decoder-first/last-pipeline-num-layers or --account-for-embedding/loss-in-pipeline-split");
  EXPECT_EQ(error_of({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout",
                      "Ett|tL"}),
            "pipeline split: --pipeline-model-parallel-layout \"Ett|tL\": it holds 3 transformer layers (t), "
            "--num-layers is 4");
  EXPECT_EQ(error_of({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout",
                      "Ett|t|tL"}),
            "pipeline split: --pipeline-model-parallel-layout \"Ett|t|tL\": its 3 stages must be a multiple of "
            "--pipeline-model-parallel-size (2)");
}

TEST(Options, NonPersistentCheckpointFlags) {
  const TrainOptions o = parse({"--save", "ck", "--non-persistent-save-interval", "50", "--non-persistent-ckpt-type",
                                "global"});
  EXPECT_EQ(o.non_persistent_save_interval, 50);
  EXPECT_EQ(o.non_persistent_dir(o.save), "ck/non_persistent");  // Megatron's subfolder
  EXPECT_EQ(parse({"--non-persistent-ckpt-type", "global", "--non-persistent-global-ckpt-dir", "/fast/np"})
                .non_persistent_dir("ck"),
            "/fast/np");
  EXPECT_EQ(error_of({"--save", "ck", "--non-persistent-save-interval", "50"}),
            "--non-persistent-save-interval needs --non-persistent-ckpt-type global or local (without it --load "
            "would not look for them)");
  EXPECT_EQ(error_of({"--non-persistent-save-interval", "50", "--non-persistent-ckpt-type", "global"}),
            "--non-persistent-save-interval needs --save");
  EXPECT_EQ(error_of({"--non-persistent-ckpt-type", "in_memory"}).rfind("--non-persistent-ckpt-type in_memory: not "
                                                                        "supported (nor by Megatron-LM)", 0),
            0u);
  EXPECT_EQ(error_of({"--non-persistent-ckpt-type", "disk"}),
            "--non-persistent-ckpt-type disk: expected global or local");
  EXPECT_EQ(error_of({"--non-persistent-global-ckpt-dir", "/fast/np"}),
            "--non-persistent-global-ckpt-dir needs --non-persistent-ckpt-type global");
  // Node-local ones (Megatron's flags and default algorithm).
  const TrainOptions local = parse({"--save", "ck", "--non-persistent-save-interval", "50",
                                    "--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme/ck"});
  EXPECT_TRUE(local.local_checkpoints());
  EXPECT_EQ(local.non_persistent_local_ckpt_algo, "fully_parallel");
  EXPECT_EQ(local_checkpoint_root(local, 12), fs::path("/nvme/ck/12"));
  EXPECT_EQ(parse({"--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme/ck",
                   "--non-persistent-local-ckpt-algo", "atomic"})
                .non_persistent_local_ckpt_algo,
            "atomic");
  EXPECT_EQ(error_of({"--non-persistent-ckpt-type", "local"}),
            "--non-persistent-ckpt-type local needs --non-persistent-local-ckpt-dir");
  EXPECT_EQ(error_of({"--non-persistent-local-ckpt-dir", "/nvme/ck"}),
            "--non-persistent-local-ckpt-dir needs --non-persistent-ckpt-type local");
  EXPECT_EQ(error_of({"--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme/ck",
                      "--non-persistent-local-ckpt-algo", "fast"}),
            "--non-persistent-local-ckpt-algo fast: expected fully_parallel or atomic");
  // The other type's folder has no effect, as in Megatron; so have --replication-jump and
  // -factor without --replication.
  EXPECT_EQ(parse({"--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme/ck",
                   "--non-persistent-global-ckpt-dir", "/fast/np"})
                .flags_without_effect,
            (std::vector<std::string>{"--non-persistent-global-ckpt-dir"}));
  EXPECT_EQ(parse({"--non-persistent-ckpt-type", "global", "--non-persistent-local-ckpt-dir", "/nvme/ck"})
                .flags_without_effect,
            (std::vector<std::string>{"--non-persistent-local-ckpt-dir"}));
  EXPECT_EQ(parse({"--replication-jump", "8", "--replication-factor", "2"}).flags_without_effect,
            (std::vector<std::string>{"--replication-jump", "--replication-factor"}));
  const TrainOptions copies = parse({"--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme",
                                     "--replication", "--replication-jump", "8"});
  EXPECT_TRUE(copies.replication);
  EXPECT_EQ(copies.replication_jump, 8);
  EXPECT_EQ(copies.replication_factor, 2);  // Megatron's default
  EXPECT_EQ(error_of({"--replication", "--replication-jump", "8"}),
            "--replication needs --non-persistent-ckpt-type local (it copies the local checkpoints)");
  EXPECT_EQ(error_of({"--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme",
                      "--replication"}),
            "--replication needs --replication-jump (the ranks of a node, so that copies lie on others)");
  EXPECT_EQ(error_of({"--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", "/nvme",
                      "--replication", "--replication-jump", "8", "--replication-factor", "0"}),
            "--replication-factor must be positive");
}

// Megatron's cliques (nvidia-resiliency-ext's parse_group_sequence): for each b < jump the
// ranks b, b + jump, ... cut into groups of `factor`; worked out by hand.
TEST(LocalCheckpoint, ReplicationCliques) {
  EXPECT_EQ(replication_clique(0, 32, 8, 2), (std::vector<int>{0, 8}));
  EXPECT_EQ(replication_clique(8, 32, 8, 2), (std::vector<int>{0, 8}));
  EXPECT_EQ(replication_clique(17, 32, 8, 2), (std::vector<int>{17, 25}));
  EXPECT_EQ(replication_clique(3, 4, 2, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(replication_clique(5, 12, 2, 3), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(replication_clique(7, 12, 2, 3), (std::vector<int>{7, 9, 11}));
  try {
    replication_clique(0, 12, 8, 2);
    ADD_FAILURE() << "12 ranks in cliques of 2 ranks 8 apart";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--replication-jump 8 x --replication-factor 2 must divide the world size 12");
  }
}

// fully_parallel's split of a stage's parameters over the data-parallel ranks: the largest
// first, each to the least loaded rank (the lowest on a tie); worked out by hand.
TEST(LocalCheckpoint, FullyParallelOwnersBalanceTheElements) {
  EXPECT_EQ(fully_parallel_owners({5, 4, 3, 3, 3}, 2), (std::vector<int>{0, 1, 1, 0, 1}));  // loads 8 and 10
  EXPECT_EQ(fully_parallel_owners({1, 8, 1, 1}, 3), (std::vector<int>{1, 0, 2, 1}));
  EXPECT_EQ(fully_parallel_owners({7, 7, 7}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(fully_parallel_owners({2, 2}, 4), (std::vector<int>{0, 1}));  // ranks 2 and 3 write none
}

TEST(Options, ProfileFlagsFollowMegatron) {
  TrainOptions o = parse({"--profile"});
  EXPECT_TRUE(o.profile);
  EXPECT_EQ(o.profile_step_start, 10);  // Megatron's defaults
  EXPECT_EQ(o.profile_step_end, 12);
  EXPECT_EQ(o.profile_rank_ids, (std::set<int>{0}));
  o = parse({"--profile", "--profile-step-start", "0", "--profile-step-end", "3", "--profile-ranks", "2", "0", "2"});
  EXPECT_EQ(o.profile_step_start, 0);
  EXPECT_EQ(o.profile_step_end, 3);
  EXPECT_EQ(o.profile_rank_ids, (std::set<int>{0, 2}));
  EXPECT_FALSE(parse({}).profile);
}

TEST(Options, CheckpointFlagsParse) {
  const TrainOptions o = parse({"--save", "/ckpt/out", "--load", "/ckpt/in", "--save-interval", "500", "--keep-last",
                                "3", "--no-load-optim", "--no-load-rng", "--finetune"});
  EXPECT_EQ(o.save, "/ckpt/out");
  EXPECT_EQ(o.load, "/ckpt/in");
  EXPECT_EQ(o.save_interval, 500);
  EXPECT_EQ(o.keep_last, 3);
  EXPECT_TRUE(o.no_load_optim);
  EXPECT_TRUE(o.no_load_rng);
  EXPECT_TRUE(o.finetune);
  EXPECT_FALSE(o.no_save_optim || o.no_save_rng || o.exit_on_missing_checkpoint || o.use_checkpoint_args);
  EXPECT_EQ(o.ckpt_step, -1);
  const TrainOptions m = parse({"--load", "/ckpt/in", "--no-save-optim", "--no-save-rng", "--ckpt-step", "0",
                                "--exit-on-missing-checkpoint", "--use-checkpoint-args"});
  EXPECT_TRUE(m.no_save_optim && m.no_save_rng && m.exit_on_missing_checkpoint && m.use_checkpoint_args);
  EXPECT_EQ(m.ckpt_step, 0);  // iteration 0 (Megatron's `if args.ckpt_step` would ignore a 0)
  EXPECT_EQ(error_of({"--load", "x", "--ckpt-step", "-1"}), "--ckpt-step must not be negative");
  for (const char* flag : {"--ckpt-step=3", "--exit-on-missing-checkpoint", "--use-checkpoint-args"})
    EXPECT_EQ(error_of({flag}), std::string(flag).substr(0, std::string(flag).find('=')) + " needs --load");
}

// Megatron's load_args_from_checkpoint: the shape flags given (command line or --config)
// keep their values, the others take the checkpoint's; the dropout is always the
// checkpoint's. The shape is checked once complete, and not before: the default 12 heads
// would not split over 8 tensor-parallel ranks, the checkpoint's 16 do.
TEST(Options, UseCheckpointArgsTakesTheShapeFlagsNotGiven) {
  ModelConfig ckpt;
  ckpt.num_layers = 4;
  ckpt.hidden_size = 128;
  ckpt.num_attention_heads = 16;
  ckpt.seq_length = 32;
  ckpt.max_position_embeddings = 96;
  ckpt.vocab_size = 1000;
  ckpt.make_vocab_size_divisible_by = 64;
  ckpt.hidden_dropout = 0.25f;
  ckpt.attention_dropout = 0.0f;
  const std::string yaml = write_yaml("checkpoint_args", "seq-length: 48\n");
  TrainOptions o = parse({"--load", "x", "--use-checkpoint-args", "--config", yaml, "--num-layers", "6",
                          "--hidden-dropout", "0.05", "--tensor-model-parallel-size", "8"});
  EXPECT_EQ(take_checkpoint_args(o, &ckpt),
            "--hidden-size 128, --num-attention-heads 16, --max-position-embeddings 96, "
            "--make-vocab-size-divisible-by 64, --vocab-size 1000, --hidden-dropout 0.25, --attention-dropout 0");
  EXPECT_EQ(o.model.num_layers, 6);   // given on the command line
  EXPECT_EQ(o.model.seq_length, 48);  // given in the config file
  EXPECT_EQ(o.model.hidden_size, 128);
  EXPECT_EQ(o.model.num_attention_heads, 16);
  EXPECT_EQ(o.model.max_position_embeddings, 96);
  EXPECT_EQ(o.model.vocab_size, 1000);
  EXPECT_EQ(o.model.make_vocab_size_divisible_by, 64);
  EXPECT_EQ(o.model.hidden_dropout, 0.25f);  // forced, as Megatron
  EXPECT_EQ(o.model.attention_dropout, 0.0f);

  // A shape that does not fit the layout names what was taken; without a checkpoint the
  // flags' own shape is checked then.
  o = parse({"--load", "x", "--use-checkpoint-args", "--tensor-model-parallel-size", "32"});
  try {
    take_checkpoint_args(o, &ckpt);
    ADD_FAILURE() << "16 heads over 32 ranks";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--num-attention-heads (16) must be divisible by --tensor-model-parallel-size (32) "
              "(--use-checkpoint-args took --num-layers 4, --hidden-size 128, --num-attention-heads 16, "
              "--seq-length 32, --max-position-embeddings 96, --make-vocab-size-divisible-by 64, "
              "--vocab-size 1000, --hidden-dropout 0.25, --attention-dropout 0)");
  }
  o = parse({"--load", "x", "--use-checkpoint-args", "--tensor-model-parallel-size", "8"});
  EXPECT_THROW(take_checkpoint_args(o, nullptr), ConfigError);
  EXPECT_EQ(error_of({"--tensor-model-parallel-size", "8"}),
            "--num-attention-heads (12) must be divisible by --tensor-model-parallel-size (8)");

  // The GELU: the checkpoint's unless a flag that chooses it was given.
  ckpt.gelu = Gelu::Erf;
  o = parse({"--load", "x", "--use-checkpoint-args"});
  EXPECT_NE(take_checkpoint_args(o, &ckpt).find(", the erf GELU"), std::string::npos);
  EXPECT_EQ(o.model.gelu, Gelu::Erf);
  o = parse({"--load", "x", "--use-checkpoint-args", "--openai-gelu"});
  take_checkpoint_args(o, &ckpt);
  EXPECT_EQ(o.model.gelu, Gelu::Tanh);
}

// Megatron's GELU: the fused bias-GELU's tanh approximation; without the fusion the exact
// (erf) one, but for the legacy model with --openai-gelu (also from a config file).
TEST(Options, NoBiasGeluFusionIsTheErfGelu) {
  EXPECT_EQ(parse({}).model.gelu, Gelu::Tanh);
  EXPECT_EQ(parse({"--openai-gelu"}).model.gelu, Gelu::Tanh);
  EXPECT_EQ(parse({"--no-bias-gelu-fusion"}).model.gelu, Gelu::Erf);
  EXPECT_EQ(parse({"--no-bias-gelu-fusion", "--openai-gelu"}).model.gelu, Gelu::Erf);  // Megatron-core's
  EXPECT_EQ(parse({"--no-bias-gelu-fusion", "--use-mcore-models", "--openai-gelu"}).model.gelu, Gelu::Erf);
  EXPECT_EQ(parse({"--no-bias-gelu-fusion", "--openai-gelu", "--use-legacy-models"}).model.gelu, Gelu::Tanh);
  // Megatron-DeepSpeed has the legacy model only; Transformer Engine's GELU is the tanh one.
  const std::string ds = write_yaml("gelu_ds.json", "{}\n");
  EXPECT_EQ(parse({"--no-bias-gelu-fusion", "--openai-gelu", "--deepspeed", "--deepspeed_config", ds}).model.gelu,
            Gelu::Tanh);
  EXPECT_EQ(parse({"--no-bias-gelu-fusion", "--use-te-activation-func"}).model.gelu, Gelu::Tanh);
  // --use-legacy-models is then no flag without effect.
  EXPECT_TRUE(parse({"--no-bias-gelu-fusion", "--openai-gelu", "--use-legacy-models"}).flags_without_effect.empty());
  const std::string yaml = write_yaml("erf_gelu", "no-bias-gelu-fusion: true\n");
  EXPECT_EQ(parse({"--config", yaml}).model.gelu, Gelu::Erf);
  // No longer among the flags without effect.
  EXPECT_TRUE(parse({"--no-bias-gelu-fusion", "--openai-gelu"}).flags_without_effect.empty());
}

// Megatron-LM's spelling (with its underscores, and all in dashes as its newer releases
// take it) and Megatron-DeepSpeed's; YAML keys with either; giving override and
// use-checkpoint together is Megatron's "both override and use-checkpoint are set".
TEST(Options, SchedulerOnLoadFlagsTakeEverySpelling) {
  TrainOptions o = parse({});
  EXPECT_FALSE(o.override_opt_param_scheduler);
  EXPECT_FALSE(o.use_checkpoint_opt_param_scheduler);
  for (const char* flag : {"--override-opt_param-scheduler", "--override-opt-param-scheduler", "--override-lr-scheduler"}) {
    o = parse({flag});
    EXPECT_TRUE(o.override_opt_param_scheduler) << flag;
    EXPECT_FALSE(o.use_checkpoint_opt_param_scheduler) << flag;
  }
  for (const char* flag : {"--use-checkpoint-opt_param-scheduler", "--use-checkpoint-opt-param-scheduler",
                           "--use-checkpoint-lr-scheduler"}) {
    o = parse({flag});
    EXPECT_TRUE(o.use_checkpoint_opt_param_scheduler) << flag;
    EXPECT_FALSE(o.override_opt_param_scheduler) << flag;
  }
  for (const char* key : {"override_opt_param_scheduler", "override-opt_param-scheduler", "override_lr_scheduler"}) {
    const std::string yaml = write_yaml("sched_override", std::string(key) + ": true\n");
    o = parse({"--config", yaml});
    EXPECT_TRUE(o.override_opt_param_scheduler) << key;
    // The command line's other choice replaces the file's.
    o = parse({"--config", yaml, "--use-checkpoint-lr-scheduler"});
    EXPECT_FALSE(o.override_opt_param_scheduler) << key;
    EXPECT_TRUE(o.use_checkpoint_opt_param_scheduler) << key;
    std::filesystem::remove(yaml);
  }
  const std::string both = error_of({"--override-opt_param-scheduler", "--use-checkpoint-lr-scheduler"});
  EXPECT_EQ(both, "--override-opt_param-scheduler and --use-checkpoint-lr-scheduler are mutually exclusive");
  EXPECT_EQ(error_of({"--override-lr-scheduler", "--use-checkpoint-opt_param-scheduler"}),
            "--override-lr-scheduler and --use-checkpoint-opt_param-scheduler are mutually exclusive");
  const std::string yaml = write_yaml("sched_both", "override_opt_param_scheduler: true\nuse_checkpoint_opt_param_scheduler: true\n");
  const std::string msg = error_of({"--config", yaml});
  EXPECT_NE(msg.find("--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are mutually exclusive (from " +
                     yaml + ":1, --use-checkpoint-opt_param-scheduler from " + yaml + ":2)"),
            std::string::npos)
      << msg;
  std::filesystem::remove(yaml);
  EXPECT_NE(error_of({"--override-opt_param-scheduler=1"}).find("takes no value"), std::string::npos);
}

TEST(Options, IterationBasedScheduleResolvesToSamples) {
  const TrainOptions o = parse({"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "100",
                                "--lr-warmup-iters", "10", "--lr-decay-iters", "80"});
  EXPECT_FALSE(o.sample_based);
  EXPECT_EQ(o.train_iters, 100);
  EXPECT_EQ(o.train_samples, 800u);
  EXPECT_EQ(o.warmup_samples, 80.0);
  EXPECT_EQ(o.decay_samples, 640u);
  const TrainOptions d = parse({"--global-batch-size", "8", "--train-iters", "30", "--lr-warmup-iters", "3"});
  EXPECT_EQ(d.decay_samples, 240u);  // decay defaults to train-iters
}

TEST(Options, SampleBasedScheduleResolvesIterations) {
  const TrainOptions o = parse({"--micro-batch-size", "2", "--global-batch-size", "8", "--train-samples", "805",
                                "--lr-warmup-samples", "80", "--lr-decay-samples", "640"});
  EXPECT_TRUE(o.sample_based);
  EXPECT_EQ(o.train_samples, 805u);
  EXPECT_EQ(o.train_iters, 100);  // floor(805 / 8), as Megatron's update_train_iters
  EXPECT_EQ(o.warmup_samples, 80.0);
  EXPECT_EQ(o.decay_samples, 640u);
  const TrainOptions d = parse({"--global-batch-size", "8", "--train-samples", "800"});
  EXPECT_EQ(d.decay_samples, 800u);  // decay defaults to train-samples
  EXPECT_EQ(d.warmup_samples, 0.0);
}

TEST(Options, WarmupFractionWorksWithBothStyles) {
  TrainOptions o = parse({"--global-batch-size", "8", "--micro-batch-size", "8", "--train-iters", "100",
                          "--lr-decay-iters", "80", "--lr-warmup-fraction", "0.125"});
  EXPECT_EQ(o.decay_samples, 640u);
  EXPECT_EQ(o.warmup_samples, 80.0);
  o = parse({"--global-batch-size", "8", "--micro-batch-size", "8", "--train-samples", "800", "--lr-decay-samples",
             "100", "--lr-warmup-fraction", "0.125"});
  EXPECT_EQ(o.decay_samples, 100u);
  EXPECT_EQ(o.warmup_samples, 12.5);  // Megatron keeps fraction x decay unrounded
}

TEST(Options, ResolveScheduleIsIdempotentAndServesHandFilledOptions) {
  TrainOptions o;
  o.global_batch_size = 4;
  o.train_iters = 50;
  o.lr_warmup_iters = 5;
  resolve_schedule(o);
  resolve_schedule(o);
  EXPECT_EQ(o.train_samples, 200u);
  EXPECT_EQ(o.warmup_samples, 20.0);
  EXPECT_EQ(o.decay_samples, 200u);
  TrainOptions s = parse({"--global-batch-size", "4", "--micro-batch-size", "4", "--train-samples", "41"});
  resolve_schedule(s);
  EXPECT_EQ(s.train_iters, 10);
  EXPECT_EQ(s.train_samples, 41u);
  const LrSchedule sched = make_lr_schedule(parse({"--global-batch-size", "4", "--micro-batch-size", "4",
                                                   "--train-iters", "10", "--lr-warmup-iters", "2", "--lr", "0.5",
                                                   "--min-lr", "0.1", "--lr-decay-style", "cosine"}));
  EXPECT_EQ(sched.max_lr, 0.5);
  EXPECT_EQ(sched.min_lr, 0.1);
  EXPECT_EQ(sched.warmup_samples, 8.0);
  EXPECT_EQ(sched.decay_samples, 40.0);
  EXPECT_EQ(sched.style, LrDecayStyle::Cosine);
}

TEST(Options, YamlKeysSetTheNewFlags) {
  const std::string path = write_yaml("new_keys",
                                      "bf16: true\n"
                                      "accumulate_allreduce_grads_in_fp32: true\n"
                                      "loss-scale: 4096\n"
                                      "train-samples: 1000\n"
                                      "global-batch-size: 10\n"
                                      "micro-batch-size: 5\n"
                                      "lr-warmup-samples: 100\n"
                                      "lr-decay-samples: 900\n"
                                      "eval-interval: 20\n"
                                      "eval-iters: 7\n"
                                      "tensorboard-dir: runs/a\n"
                                      "tensorboard-log-interval: 2\n"
                                      "peak-tflops: 312\n"
                                      "max-nan-iterations: 4\n"
                                      "save: ck\n"
                                      "load: ck0\n"
                                      "save-interval: 10\n"
                                      "keep-last: 2\n"
                                      "no-load-optim: true\n"
                                      "no_load_rng: false\n"
                                      "finetune: true\n");
  TrainOptions o = parse({"--config", path});
  EXPECT_EQ(o.model.dtype, DType::BF16);
  EXPECT_TRUE(o.accumulate_allreduce_grads_in_fp32);
  EXPECT_EQ(o.loss_scale, 4096.0);
  EXPECT_TRUE(o.sample_based);
  EXPECT_EQ(o.train_iters, 100);
  EXPECT_EQ(o.warmup_samples, 100.0);
  EXPECT_EQ(o.decay_samples, 900u);
  EXPECT_EQ(o.eval_interval, 20);
  EXPECT_EQ(o.eval_iters, 7);
  EXPECT_EQ(o.tensorboard_dir, "runs/a");
  EXPECT_EQ(o.tensorboard_log_interval, 2);
  EXPECT_EQ(o.peak_tflops, 312.0);
  EXPECT_EQ(o.max_nan_iterations, 4);
  EXPECT_EQ(o.save, "ck");
  EXPECT_EQ(o.load, "ck0");
  EXPECT_EQ(o.save_interval, 10);
  EXPECT_EQ(o.keep_last, 2);
  EXPECT_TRUE(o.no_load_optim);
  EXPECT_FALSE(o.no_load_rng);
  EXPECT_TRUE(o.finetune);
  // The command line wins over the file.
  o = parse({"--config", path, "--eval-iters", "9", "--tensorboard-dir", "runs/b"});
  EXPECT_EQ(o.eval_iters, 9);
  EXPECT_EQ(o.tensorboard_dir, "runs/b");
  std::filesystem::remove(path);
}

const std::string kTinyConfig = std::string(TRIDENT_SOURCE_DIR) + "/configs/gpt2-tiny.yaml";

// Line `key` is on in `path` (1-based), to check messages against the real file.
int line_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.rfind(key + ":", 0) == 0) return n;
  ADD_FAILURE() << key << " not in " << path;
  return -1;
}

TEST(Options, CommandLineAlternativeReplacesTheConfigsChoice) {
  // gpt2-tiny.yaml sets lr-warmup-iters (and global batch 8): the command line's other
  // warm-up flag replaces it rather than contradicting it.
  TrainOptions o = parse({"--config", kTinyConfig, "--train-samples", "160", "--lr-warmup-samples", "16"});
  EXPECT_TRUE(o.sample_based);
  EXPECT_EQ(o.train_iters, 20);
  EXPECT_EQ(o.warmup_samples, 16.0);
  EXPECT_EQ(o.lr_warmup_iters, 0);
  o = parse({"--config", kTinyConfig, "--train-iters", "20", "--lr-warmup-fraction", "0.1"});
  EXPECT_FALSE(o.sample_based);
  EXPECT_DOUBLE_EQ(o.warmup_samples, 16.0);  // 0.1 x 20 iterations x 8
  o = parse({"--config", kTinyConfig, "--lr-warmup-iters", "3"});
  EXPECT_EQ(o.warmup_samples, 24.0);

  const std::string yaml = write_yaml("alternatives",
                                      "train-samples: 800\n"
                                      "lr-decay-samples: 400\n"
                                      "bf16: true\n"
                                      "checkpoint-activations: true\n"
                                      "checkpoint-num-layers: 2\n");
  o = parse({"--config", yaml, "--train-iters", "10", "--lr-decay-iters", "5", "--fp16",
             "--recompute-granularity", "selective", "--recompute-num-layers", "3"});
  EXPECT_FALSE(o.sample_based);
  EXPECT_EQ(o.train_iters, 10);
  EXPECT_EQ(o.model.dtype, DType::F16);
  EXPECT_EQ(o.recompute_granularity, "selective");
  EXPECT_EQ(o.recompute_method, "");
  EXPECT_EQ(o.recompute_num_layers, 3);  // the file's alias no longer overrides the command line
  // Without a command-line flag of the group, the file's choice stands.
  o = parse({"--config", yaml, "--global-batch-size", "8"});
  EXPECT_TRUE(o.sample_based);
  EXPECT_EQ(o.model.dtype, DType::BF16);
  EXPECT_EQ(o.recompute_granularity, "full");
  EXPECT_EQ(o.recompute_num_layers, 2);
  std::filesystem::remove(yaml);
}

TEST(Options, DataPathsTakeWordListsAndReplaceEachOther) {
  const std::vector<std::string> vocab = {"--vocab-file", "v.json", "--merge-file", "m.txt"};
  auto with_vocab = [&](std::vector<std::string> args) {
    args.insert(args.end(), vocab.begin(), vocab.end());
    return args;
  };
  TrainOptions o = parse(with_vocab({"--train-data-path", "A", "B", "--valid-data-path=C", "--test-data-path", "0.5",
                                     "D", "0.5", "E"}));
  EXPECT_TRUE(o.data_path.empty());
  EXPECT_EQ(o.train_data_path, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(o.valid_data_path, (std::vector<std::string>{"C"}));
  EXPECT_EQ(o.test_data_path, (std::vector<std::string>{"0.5", "D", "0.5", "E"}));
  EXPECT_TRUE(o.has_data());

  // The file's --data-path gives way to the command line's per-split paths and the other
  // way round; per-split paths from both sources combine.
  const std::string yaml = write_yaml("data_paths",
                                      "data-path: [0.3, A, 0.7, B]\n"
                                      "valid-data-path: V\n");
  EXPECT_NE(error_of(with_vocab({"--config", yaml})).find("alternatives"), std::string::npos);
  o = parse(with_vocab({"--config", yaml, "--train-data-path", "T"}));
  EXPECT_TRUE(o.data_path.empty());
  EXPECT_EQ(o.train_data_path, (std::vector<std::string>{"T"}));
  EXPECT_EQ(o.valid_data_path, (std::vector<std::string>{"V"}));
  const std::string yaml2 = write_yaml("data_paths2", "train-data-path: [T1, T2]\n");
  o = parse(with_vocab({"--config", yaml2, "--data-path", "P"}));
  EXPECT_EQ(o.data_path, (std::vector<std::string>{"P"}));
  EXPECT_TRUE(o.train_data_path.empty());
  // A plain string of words splits at whitespace, as the shell splits a launcher's $DATA_PATH;
  // a quoted one is one word (a path with a space).
  const std::string yaml3 = write_yaml("data_paths3", "data-path: 0.3 A  0.7 B\nrampup-batch-size: 4 4 64\n");
  o = parse(with_vocab({"--config", yaml3, "--train-samples", "1000", "--global-batch-size", "16"}));
  EXPECT_EQ(o.data_path, (std::vector<std::string>{"0.3", "A", "0.7", "B"}));
  EXPECT_EQ(o.rampup_batch_size, (std::vector<std::string>{"4", "4", "64"}));
  const std::string yaml4 = write_yaml("data_paths4", "data-path: \"/data/my corpus/text_document\"\n");
  EXPECT_EQ(parse(with_vocab({"--config", yaml4})).data_path, (std::vector<std::string>{"/data/my corpus/text_document"}));

  EXPECT_NE(error_of(with_vocab({"--data-path", "A", "--train-data-path", "B"})).find("alternatives"),
            std::string::npos);
  // Per-split paths without a training one parse: trident-eval reads them (trident-train's
  // error comes from make_train_data, tests/e2e/data_paths.sh).
  EXPECT_EQ(parse(with_vocab({"--valid-data-path", "V"})).valid_data_path, (std::vector<std::string>{"V"}));
  EXPECT_NE(error_of(with_vocab({"--data-path", "A", "--data-path", "B"})).find("--data-path given twice"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data-path", "A"}).find("--vocab-file"), std::string::npos);
  EXPECT_NE(error_of(with_vocab({"--test-data-path", "--train-data-path", "A"})).find("--test-data-path: expected"),
            std::string::npos);
  std::filesystem::remove(yaml);
  std::filesystem::remove(yaml2);
}

TEST(Options, DistributedOptimizerOnTheCommandLineReplacesTheConfigsZeroStage) {
  const std::string yaml = write_yaml("zero_stage", "zero-stage: 0\n");
  EXPECT_EQ(parse({"--config", yaml, "--use-distributed-optimizer"}).zero_stage, 1);
  EXPECT_EQ(parse({"--config", yaml}).zero_stage, 0);
  EXPECT_NE(error_of({"--zero-stage", "0", "--use-distributed-optimizer"}).find("contradicts"), std::string::npos);
  std::filesystem::remove(yaml);
}

// Megatron's overlap flags: the gradient reductions overlap unless told not to; the
// parameter gather overlaps on request, only where ZeRO gathers parameters.
TEST(Options, OverlapFlags) {
  EXPECT_TRUE(parse({}).overlap_grad_reduce);
  EXPECT_TRUE(parse({"--overlap-grad-reduce"}).overlap_grad_reduce);
  EXPECT_FALSE(parse({"--no-overlap-grad-reduce"}).overlap_grad_reduce);
  EXPECT_NE(error_of({"--overlap-grad-reduce", "--no-overlap-grad-reduce"}).find("contradict"), std::string::npos);
  EXPECT_FALSE(parse({}).overlap_param_gather);
  EXPECT_TRUE(parse({"--use-distributed-optimizer", "--overlap-param-gather"}).overlap_param_gather);
  EXPECT_TRUE(parse({"--zero-stage", "2", "--overlap-param-gather"}).overlap_param_gather);
  EXPECT_NE(error_of({"--overlap-param-gather"}).find("--overlap-param-gather"), std::string::npos);
  // Megatron refuses the parameter gather overlapped with the reductions not.
  EXPECT_NE(error_of({"--zero-stage", "1", "--overlap-param-gather", "--no-overlap-grad-reduce"})
                .find("--no-overlap-grad-reduce"),
            std::string::npos);
}

TEST(Options, DistributedTimeoutMinutes) {
  EXPECT_EQ(parse({}).distributed_timeout_minutes, 10.0);  // Megatron's default
  EXPECT_EQ(parse({"--distributed-timeout-minutes", "0.5"}).distributed_timeout_minutes, 0.5);
  EXPECT_EQ(parse({"--distributed-timeout-minutes", "0"}).distributed_timeout_minutes, 0.0);
  EXPECT_NE(error_of({"--distributed-timeout-minutes", "-1"}).find("--distributed-timeout-minutes"),
            std::string::npos);
}

TEST(Options, ContradictionsWithinOneSourceStayErrors) {
  EXPECT_NE(must_fail({"--config", kTinyConfig, "--train-iters", "10", "--train-samples", "100"}).find(
                "mutually exclusive"),
            std::string::npos);
  EXPECT_NE(must_fail({"--config", kTinyConfig, "--fp16", "--bf16"}).find("--fp16 and --bf16"), std::string::npos);
  const std::string yaml = write_yaml("both", "micro-batch-size: 4\ntrain-iters: 10\ntrain-samples: 100\n");
  const std::string msg = must_fail({"--config", yaml});
  EXPECT_NE(msg.find("mutually exclusive"), std::string::npos) << msg;
  EXPECT_NE(msg.find(yaml + ":3"), std::string::npos) << msg;  // --train-samples
  EXPECT_NE(msg.find("--train-iters from " + yaml + ":2"), std::string::npos) << msg;
  std::filesystem::remove(yaml);
  // A command-line choice in one group that the file contradicts in another: an error that
  // says where the file's flag is.
  const std::string cross = must_fail({"--config", kTinyConfig, "--train-samples", "160"});
  EXPECT_NE(cross.find("--lr-warmup-iters is iteration-based"), std::string::npos) << cross;
  EXPECT_NE(cross.find("from " + kTinyConfig + ":" + std::to_string(line_of(kTinyConfig, "lr-warmup-iters"))),
            std::string::npos)
      << cross;
}

TEST(Options, DuplicateConfigKeyNamesBothLines) {
  const std::string yaml = write_yaml("duplicate", "num-layers: 2\nhidden-size: 64\nnum_layers: 4\n");
  const std::string msg = must_fail({"--config", yaml});
  EXPECT_EQ(msg, "--config: " + yaml + ":3: duplicate key 'num-layers' (first set at line 1)");
  std::filesystem::remove(yaml);
}

// One --config: a second one (either spelling) is an error naming both files, not a silent
// last-one-wins.
TEST(Options, ConfigGivenTwiceNamesBothFiles) {
  const std::string a = write_yaml("first", "num-layers: 2\n");
  const std::string b = write_yaml("second", "num-layers: 4\n");
  const std::string expected = "--config given twice (" + a + " and " + b + "): give one file";
  EXPECT_EQ(must_fail({"--config", a, "--config", b}), expected);
  EXPECT_EQ(must_fail({"--config=" + a, "--lr", "0.1", "--config", b}), expected);
  EXPECT_EQ(must_fail({"--config", a, "--config=" + b}), expected);
  EXPECT_EQ(parse({"--config", b}).model.num_layers, 4);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(Options, ConfigValueErrorsNameFileAndLine) {
  const std::string yaml = write_yaml("bad_values",
                                      "num-layers: 2\n"
                                      "lr: 1.0e-3x\n");
  EXPECT_EQ(must_fail({"--config", yaml}), "--lr: cannot parse '1.0e-3x' as a number (from " + yaml + ":2)");
  // The command line's value replaces the file's: nothing to report.
  EXPECT_EQ(parse({"--config", yaml, "--lr", "0.5"}).lr, 0.5);
  std::filesystem::remove(yaml);

  const std::string ranges = write_yaml("bad_ranges", "eval-interval: 0\nmicro-batch-size: 4\n");
  EXPECT_EQ(must_fail({"--config", ranges}), "--eval-interval must be positive (from " + ranges + ":1)");
  EXPECT_EQ(must_fail({"--config", ranges, "--eval-interval", "5", "--global-batch-size", "6"}),
            "--global-batch-size (6) must be a multiple of --micro-batch-size (4) (--micro-batch-size from " + ranges +
                ":2)");
  // A value from the command line has no file to name.
  EXPECT_EQ(must_fail({"--config", ranges, "--eval-interval", "x"}), "--eval-interval: cannot parse 'x' as a number");
  std::filesystem::remove(ranges);
  // A list where one value belongs: one line naming the file, line and key.
  const std::string list = write_yaml("list_value", "num-layers: 2\nsplit: [98, 2]\n");
  EXPECT_EQ(must_fail({"--config", list}), "--config: " + list + ":2: key 'split' expects a single value, not a list");
  std::filesystem::remove(list);
  // A second YAML document would be ignored by a reader of the first: refused, naming it.
  const std::string two = write_yaml("two_documents", "num-layers: 2\n---\nlr: 0.5\n");
  EXPECT_EQ(must_fail({"--config", two}), "--config: " + two + ":3: a second YAML document; put every key in one mapping");
  std::filesystem::remove(two);
  const std::string lr = write_yaml("negative_lr", "lr: -1\n");
  EXPECT_EQ(must_fail({"--config", lr}), "--lr must be a finite number >= 0, got -1 (from " + lr + ":1)");
  std::filesystem::remove(lr);
  const std::string empty = write_yaml("empty_words", "num-layers: 2\ndata-path: []\n");
  EXPECT_EQ(must_fail({"--config", empty}), "--config: " + empty + ":2: key 'data-path' has no words");
  std::filesystem::remove(empty);
  // A key that is not a name, and a folder for a file.
  const std::string complex = write_yaml("complex_key", "num-layers: 2\n? [a, b]\n: 1\n");
  EXPECT_EQ(must_fail({"--config", complex}), "--config: " + complex + ":2: a key must be a flag's name");
  std::filesystem::remove(complex);
  const std::string folder = std::filesystem::path(complex).parent_path().string();
  EXPECT_EQ(must_fail({"--config", folder}), "--config: " + folder + " is a directory");
}

// Megatron's default global batch is micro batch x data-parallel size, known only once the
// layout is: parsing keeps one rank's, resolve_global_batch_size multiplies and re-resolves.
TEST(Options, DefaultGlobalBatchFollowsDataParallelism) {
  TrainOptions o = parse({"--micro-batch-size", "2", "--train-iters", "10", "--lr-warmup-iters", "2"});
  EXPECT_TRUE(o.global_batch_size_is_default);
  EXPECT_EQ(o.global_batch_size, 2);
  resolve_global_batch_size(o, 4);
  EXPECT_EQ(o.global_batch_size, 8);
  EXPECT_EQ(o.train_samples, 80u);
  EXPECT_EQ(o.warmup_samples, 16.0);
  EXPECT_EQ(o.decay_samples, 80u);
  resolve_global_batch_size(o, 4);  // idempotent
  EXPECT_EQ(o.global_batch_size, 8);
  // Sample-based: the iterations follow the larger batch.
  o = parse({"--micro-batch-size", "2", "--train-samples", "100"});
  resolve_global_batch_size(o, 2);
  EXPECT_EQ(o.global_batch_size, 4);
  EXPECT_EQ(o.train_iters, 25);
  // A given --global-batch-size stays.
  o = parse({"--micro-batch-size", "2", "--global-batch-size", "6"});
  EXPECT_FALSE(o.global_batch_size_is_default);
  resolve_global_batch_size(o, 3);
  EXPECT_EQ(o.global_batch_size, 6);
  const std::string yaml = write_yaml("gbs", "global-batch-size: 16\n");
  o = parse({"--config", yaml, "--micro-batch-size", "2"});
  resolve_global_batch_size(o, 4);
  EXPECT_EQ(o.global_batch_size, 16);
  std::filesystem::remove(yaml);
}

// A warm-up that outlasts the decay names what the user controls: without --lr-decay-iters
// the decay ends with the run, so --train-iters (here its default, which the user never
// gave) is too short.
TEST(Options, WarmupLongerThanTheRunNamesTheFlagsToSet) {
  const std::string yaml = write_yaml("long_warmup", "micro-batch-size: 4\nlr-warmup-iters: 700\n");
  EXPECT_EQ(must_fail({"--config", yaml}),
            "--train-iters (100, the default) must exceed --lr-warmup-iters (700): the learning-rate decay ends with "
            "the run unless --lr-decay-iters says otherwise; set --train-iters or --lr-decay-iters "
            "(--lr-warmup-iters from " + yaml + ":2)");
  EXPECT_EQ(must_fail({"--config", yaml, "--train-iters", "500"}),
            "--train-iters (500) must exceed --lr-warmup-iters (700): the learning-rate decay ends with the run "
            "unless --lr-decay-iters says otherwise; set --train-iters or --lr-decay-iters (--lr-warmup-iters from " +
                yaml + ":2)");
  EXPECT_EQ(must_fail({"--config", yaml, "--train-iters", "5000", "--lr-decay-iters", "600"}),
            "--lr-decay-iters (600) must exceed --lr-warmup-iters (700) (--lr-warmup-iters from " + yaml + ":2)");
  EXPECT_EQ(parse({"--config", yaml, "--train-iters", "5000"}).decay_samples, 5000u * 4);
  EXPECT_EQ(parse({"--config", yaml, "--lr-decay-iters", "701"}).decay_samples, 701u * 4);
  std::filesystem::remove(yaml);
  EXPECT_EQ(must_fail({"--train-samples", "100", "--lr-warmup-samples", "100"}),
            "--train-samples (100) must exceed --lr-warmup-samples (100): the learning-rate decay ends with the run "
            "unless --lr-decay-samples says otherwise; set --train-samples or --lr-decay-samples");
  EXPECT_EQ(must_fail({"--train-samples", "1000", "--lr-warmup-samples", "100", "--lr-decay-samples", "50"}),
            "--lr-decay-samples (50) must exceed --lr-warmup-samples (100)");
}

// Every shipped config trains as it is: its warm-up ends before its run does.
TEST(Options, ShippedConfigsParseAsTheyAre) {
  int configs = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(TRIDENT_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    ++configs;
    EXPECT_EQ(error_of({"--config", e.path().string()}), "") << e.path();
    const TrainOptions o = parse({"--config", e.path().string()});
    EXPECT_LT(o.warmup_samples, static_cast<double>(o.decay_samples)) << e.path();
  }
  EXPECT_GE(configs, 5);
}

// --mock-data asks for synthetic tokens; a real data source and it are alternatives (the
// command line's replaces the config file's).
TEST(Options, MockDataIsAnAlternativeToTheDataPaths) {
  EXPECT_FALSE(parse({}).mock_data);
  EXPECT_TRUE(parse({"--mock-data"}).mock_data);
  const std::vector<std::string> vocab = {"--vocab-file", "v.json", "--merge-file", "m.txt"};
  std::vector<std::string> both = {"--mock-data", "--data-path", "A"};
  both.insert(both.end(), vocab.begin(), vocab.end());
  EXPECT_EQ(must_fail(both), "--mock-data and --data-path/--train-data-path/--valid-data-path/--test-data-path are "
                             "alternatives: give one");
  const std::string yaml = write_yaml("mock", "data-path: A\nvocab-file: v.json\n");
  TrainOptions o = parse({"--config", yaml, "--mock-data"});
  EXPECT_TRUE(o.mock_data);
  EXPECT_FALSE(o.has_data());
  const std::string mock_yaml = write_yaml("mock2", "mock-data: true\nvocab-file: v.json\n");
  o = parse({"--config", mock_yaml, "--train-data-path", "T"});
  EXPECT_FALSE(o.mock_data);
  EXPECT_EQ(o.train_data_path, (std::vector<std::string>{"T"}));
  std::filesystem::remove(yaml);
  std::filesystem::remove(mock_yaml);
}

// --data-args-path and --per-split-data-args-path (Megatron-core's): the files' words become
// the data paths (errors then name the file); each stands for its words, so giving both is
// an error; the command line's replaces a config file's data-path.
TEST(Options, DataArgsFilesAreTheirWords) {
  const std::vector<std::string> vocab = {"--vocab-file", "v.json", "--merge-file", "m.txt"};
  auto with_vocab = [&](std::vector<std::string> a) {
    a.insert(a.end(), vocab.begin(), vocab.end());
    return a;
  };
  const std::string words = write_yaml("data_args", "0.3 A\n 0.7\tB\n");  // any file: not read as YAML
  TrainOptions o = parse(with_vocab({"--data-args-path", words}));
  EXPECT_EQ(o.data_path, (std::vector<std::string>{"0.3", "A", "0.7", "B"}));
  EXPECT_EQ(o.data_path_flag, "--data-args-path " + words);
  const std::string json = write_yaml("per_split", R"({"train": "0.5 A 0.5 B", "valid": ["V"], "test": null})");
  o = parse(with_vocab({"--per-split-data-args-path", json}));
  EXPECT_EQ(o.train_data_path, (std::vector<std::string>{"0.5", "A", "0.5", "B"}));
  EXPECT_EQ(o.valid_data_path, (std::vector<std::string>{"V"}));
  EXPECT_TRUE(o.test_data_path.empty());
  EXPECT_EQ(o.split_data_path_flags[1], "--per-split-data-args-path " + json + " (valid)");
  EXPECT_NE(must_fail(with_vocab({"--data-args-path", words, "--data-path", "A"})).find("give one of them"),
            std::string::npos);
  EXPECT_NE(must_fail(with_vocab({"--data-args-path", words, "--per-split-data-args-path", json})).find("alone"),
            std::string::npos);
  EXPECT_EQ(must_fail(with_vocab({"--data-args-path", "/nonexistent/words"})),
            "--data-args-path /nonexistent/words: cannot open: No such file or directory");
  const std::string missing = write_yaml("per_split_missing", R"({"train": "A", "valid": "V"})");
  EXPECT_EQ(must_fail(with_vocab({"--per-split-data-args-path", missing})),
            "--per-split-data-args-path " + missing + ": no \"test\" (Megatron's file has train, valid and test)");
  const std::string config = write_yaml("data_path_config", "data-path: C\nvocab-file: v.json\n");
  o = parse({"--config", config, "--data-args-path", words});
  EXPECT_EQ(o.data_path, (std::vector<std::string>{"0.3", "A", "0.7", "B"}));
  for (const std::string& f : {words, json, missing, config}) std::filesystem::remove(f);
}

// --eod-mask-loss, --reset-position-ids and --reset-attention-mask need documents (the
// tokenizer's end-of-document id comes with the data).
TEST(Options, DocumentFlagsNeedData) {
  EXPECT_FALSE(parse({}).eod_mask_loss);
  EXPECT_FALSE(parse({}).reset_position_ids);
  EXPECT_FALSE(parse({}).reset_attention_mask);
  const TrainOptions o = parse({"--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask", "--data-path",
                                "A", "--vocab-file", "v.json", "--merge-file", "m.txt"});
  EXPECT_TRUE(o.eod_mask_loss && o.reset_position_ids && o.reset_attention_mask);
  for (const std::string flag : {"eod-mask-loss", "reset-position-ids", "reset-attention-mask"}) {
    EXPECT_EQ(must_fail({"--" + flag}), "--" + flag +
                                            " works on the documents of --data-path (ended by its tokenizer's "
                                            "<|endoftext|>); synthetic data has no documents");
    EXPECT_EQ(must_fail({"--" + flag, "--mock-data"}), must_fail({"--" + flag}));
  }
}

// Megatron flags that scripts pass: --exit-signal-handler (trident always saves on SIGTERM
// and SIGINT), --use-distributed-optimizer (ZeRO 1 unless a stage is given),
// --lr-warmup-init, --exit-duration-in-mins (--rampup-batch-size: test_batch_schedule.cpp).
TEST(Options, MegatronRunFlags) {
  EXPECT_EQ(error_of({"--exit-signal-handler"}), "");
  EXPECT_EQ(parse({}).zero_stage, 0);
  EXPECT_EQ(parse({"--use-distributed-optimizer"}).zero_stage, 1);
  EXPECT_EQ(parse({"--use-distributed-optimizer", "--zero-stage", "2"}).zero_stage, 2);
  EXPECT_EQ(must_fail({"--use-distributed-optimizer", "--zero-stage", "0"}),
            "--use-distributed-optimizer shards the optimizer state: --zero-stage 0 contradicts it");
  TrainOptions o = parse({"--lr", "1e-3", "--lr-warmup-init", "1e-4"});
  EXPECT_EQ(o.lr_warmup_init, 1e-4);
  EXPECT_EQ(make_lr_schedule(o).init_lr, 1e-4);
  EXPECT_EQ(parse({}).lr_warmup_init, 0.0);
  EXPECT_EQ(must_fail({"--lr", "1e-3", "--lr-warmup-init", "2e-3"}),
            "--lr-warmup-init must be in [0, --lr], got 0.002");
  EXPECT_EQ(must_fail({"--lr-warmup-init", "-1e-4"}), "--lr-warmup-init must be in [0, --lr], got -0.0001");
  EXPECT_EQ(parse({"--exit-duration-in-mins", "230"}).exit_duration_in_mins, 230.0);
  EXPECT_EQ(parse({"--exit-duration-in-mins", "0.5"}).exit_duration_in_mins, 0.5);
  EXPECT_EQ(parse({}).exit_duration_in_mins, 0.0);
  EXPECT_EQ(must_fail({"--exit-duration-in-mins", "-1"}), "--exit-duration-in-mins must not be negative");
}

// What Megatron's and Megatron-DeepSpeed's scripts pass that changes nothing here is
// accepted and listed for the note; numbers with Python's digit underscores; a warm-up of
// the other form given as an explicit 0 (Megatron asserts == 0); batch-size scalars.
TEST(Options, MegatronScriptsRunUnchanged) {
  TrainOptions o = parse({"--DDP-impl", "local", "--distributed-backend", "nccl", "--data-impl", "mmap",
                          "--no-masked-softmax-fusion", "--num-workers", "2"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--DDP-impl", "--distributed-backend", "--data-impl", "--num-workers",
                                      "--no-masked-softmax-fusion"}));
  EXPECT_TRUE(parse({}).flags_without_effect.empty());
  // Megatron-LM's newest: implementation switches, settings read only with what trident refuses,
  // its --no-/--disable- second names, and what GPT-2 does one way.
  EXPECT_EQ(parse({"--delay-wgrad-compute", "--rotary-base", "10000", "--fp8-margin", "0", "--rerun-mode", "disabled",
                   "--expert-model-parallel-size", "1", "--no-tp-comm-overlap-ag"})
                .flags_without_effect,
            (std::vector<std::string>{"--expert-model-parallel-size", "--rerun-mode", "--disable-tp-comm-overlap-ag",
                                      "--delay-wgrad-compute", "--rotary-base", "--fp8-margin"}));
  EXPECT_FALSE(parse({"--disable-log-loss-scale-to-tensorboard"}).log_loss_scale_to_tensorboard);
  EXPECT_EQ(must_fail({"--fp8-format", "hybrid"}),
            "--fp8-format: not supported: trident's GEMMs compute in bf16, fp16 or fp32 (no FP8)");
  EXPECT_EQ(must_fail({"--rerun-mode", "validate_results"}),
            "--rerun-mode validate_results: not supported: trident does not re-run an iteration to tell a transient "
            "fault from a real NaN or Inf: such a step is skipped (--max-nan-iterations) (--rerun-mode disabled)");
  EXPECT_EQ(parse({"--train-samples", "300_000", "--global-batch-size", "1_6"}).train_samples, 300000u);
  EXPECT_EQ(parse({"--lr", "6_0e-5"}).lr, 6e-4);
  EXPECT_EQ(must_fail({"--train-iters", "1__0"}), "--train-iters: cannot parse '1__0' as a number");
  EXPECT_EQ(must_fail({"--train-iters", "_10"}), "--train-iters: cannot parse '_10' as a number");
  // A number past the flag's type is out of range, not unreadable.
  EXPECT_EQ(must_fail({"--seq-length", "99999999999"}), "--seq-length: '99999999999' is out of range (-2147483648 to 2147483647)");
  EXPECT_EQ(must_fail({"--train-samples", "99999999999999999999"}),
            "--train-samples: '99999999999999999999' is out of range (0 to 18446744073709551615)");
  // Python's int() and float() ignore whitespace around the number, on either side.
  EXPECT_EQ(parse({"--micro-batch-size", " 5"}).micro_batch_size, 5);
  EXPECT_EQ(parse({"--micro-batch-size", "5 "}).micro_batch_size, 5);
  EXPECT_EQ(parse({"--train-samples", "\t1_000\n"}).train_samples, 1000u);
  EXPECT_EQ(parse({"--lr", " 1e-3 "}).lr, 1e-3);
  EXPECT_EQ(must_fail({"--train-iters", "1 0"}), "--train-iters: cannot parse '1 0' as a number");
  EXPECT_EQ(must_fail({"--train-iters", " "}), "--train-iters: cannot parse ' ' as a number");
  EXPECT_EQ(error_of({"--train-samples", "1000", "--lr-warmup-iters", "0"}), "");
  EXPECT_EQ(error_of({"--train-iters", "100", "--lr-warmup-samples", "0"}), "");
  EXPECT_EQ(error_of({"--lr-warmup-fraction", "0.1", "--lr-warmup-iters", "0"}), "");
  EXPECT_EQ(must_fail({"--no-such-flag", "1", "--lr", "1e-4", "--other-unknown"}),
            "unknown flags --no-such-flag, --other-unknown (see --help)");
  EXPECT_FALSE(parse({}).log_batch_size_to_tensorboard);
  EXPECT_TRUE(parse({"--log-batch-size-to-tensorboard"}).log_batch_size_to_tensorboard);
  EXPECT_TRUE(parse({"--log-params-norm"}).log_params_norm);
  EXPECT_FALSE(parse({}).log_num_zeros_in_grad);
  EXPECT_TRUE(parse({"--log-num-zeros-in-grad"}).log_num_zeros_in_grad);
  // Switches of newer Megatron scripts; the model widths GPT-2 fixes, when they agree with it.
  o = parse({"--log-throughput", "--timing-log-level", "2", "--attention-softmax-in-fp32",
             "--no-query-key-layer-scaling", "--hidden-size", "64", "--num-attention-heads", "4",
             "--ffn-hidden-size", "256", "--kv-channels", "16"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--attention-softmax-in-fp32", "--no-query-key-layer-scaling"}));
  EXPECT_TRUE(o.log_throughput);     // Megatron's throughput field (log_line.h)
  EXPECT_EQ(o.timing_log_level, 2);  // Megatron's timers (timers.h)
  EXPECT_EQ(o.timing_log_option, "minmax");
  EXPECT_TRUE(parse({"--log-timers-to-tensorboard"}).log_timers_to_tensorboard);
  EXPECT_EQ(must_fail({"--timing-log-level", "3"}), "--timing-log-level must be 0, 1 or 2, got 3");
  EXPECT_EQ(must_fail({"--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "128"}),
            "--ffn-hidden-size (128) must be 4 x --hidden-size 64 (256): GPT-2's MLP");
  EXPECT_EQ(must_fail({"--hidden-size", "64", "--num-attention-heads", "4", "--kv-channels", "32"}),
            "--kv-channels (32) must be --hidden-size / --num-attention-heads (16): GPT-2's head width");
  EXPECT_EQ(must_fail({"--untie-embeddings-and-output-weights"}),
            "--untie-embeddings-and-output-weights: not supported: GPT-2's LM head is its word embedding");
}

// Newer Megatron-LM and Megatron-DeepSpeed scripts: implementation switches are accepted and
// named in the note; architecture flags are accepted when they name GPT-2's choice (numbers
// compared as numbers) and refused in one line otherwise; TensorBoard's two opt-outs work.
TEST(Options, NewerMegatronFlags) {
  TrainOptions o = parse({"--use-mcore-models", "--transformer-impl", "local", "--no-persist-layer-norm",
                          "--overlap-grad-reduce", "--ddp-bucket-size", "40000000", "--manual-gc",
                          "--position-embedding-type", "learned_absolute", "--normalization", "LayerNorm",
                          "--norm-epsilon", "0.00001", "--optimizer", "adam", "--dataloader-type", "single",
                          "--context-parallel-size", "1", "--openai-gelu", "--use-cpu-initialization",
                          "--local_rank", "3", "--no-log-loss-scale-to-tensorboard"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--position-embedding-type", "--normalization", "--norm-epsilon", "--optimizer",
                                      "--dataloader-type", "--context-parallel-size",
                                      "--use-cpu-initialization", "--no-persist-layer-norm", "--use-mcore-models",
                                      "--transformer-impl", "--manual-gc", "--ddp-bucket-size", "--local_rank"}));
  EXPECT_FALSE(o.log_loss_scale_to_tensorboard);
  EXPECT_TRUE(o.log_learning_rate_to_tensorboard);
  EXPECT_FALSE(parse({"--no-log-learnig-rate-to-tensorboard"}).log_learning_rate_to_tensorboard);
  EXPECT_EQ(must_fail({"--position-embedding-type", "rope"}),
            "--position-embedding-type rope: not supported: GPT-2's positions are learned absolute embeddings "
            "(--position-embedding-type learned_absolute)");
  EXPECT_EQ(must_fail({"--norm-epsilon", "1e-6"}),
            "--norm-epsilon 1e-6: not supported: GPT-2's LayerNorm epsilon is 1e-5 (--norm-epsilon 1e-5)");
  EXPECT_EQ(must_fail({"--swiglu"}), "--swiglu: not supported: GPT-2's MLP is GELU");
  EXPECT_EQ(must_fail({"--optimizer", "sgd"}),
            "--optimizer sgd: not supported: trident trains with AdamW (Megatron's adam) (--optimizer adam)");
  EXPECT_EQ(must_fail({"--context-parallel-size", "2"}),
            "--context-parallel-size 2: not supported: no context parallelism: a sequence stays on its "
            "tensor-parallel ranks (--context-parallel-size 1)");
  EXPECT_EQ(must_fail({"--wandb-project", "gpt2"}),
            "--wandb-project: not supported: Weights & Biases is not supported; --tensorboard-dir writes "
            "Megatron's scalars");
  for (const char* refused : {"--use-rotary-position-embeddings", "--disable-bias-linear", "--group-query-attention",
                              "--qk-layernorm", "--fp32-residual-connection",
                              "--apply-residual-connection-post-layernorm", "--init-method-xavier-uniform",
                              "--data-parallel-random-init", "--standalone-embedding-stage", "--apply-layernorm-1p"})
    EXPECT_NE(must_fail({refused}).find(std::string(refused) + ": not supported: "), std::string::npos) << refused;
}

// Megatron-LM's 2025 scripts: checkpoint-format, fusion, logging and resilience switches are
// noted; what would change the numbers or the sharding trident does is refused in one line;
// the replica check's interval must be positive; --log-progress writes into --save.
TEST(Options, Megatron2025Flags) {
  const TrainOptions o =
      parse({"--ckpt-format", "torch_dist", "--dist-ckpt-strictness", "log_all", "--cross-entropy-loss-fusion",
             "--cross-entropy-fusion-impl", "te", "--overlap-p2p-communication", "--deterministic-mode",
             "--logging-level", "20", "--log-progress", "--log-straggler", "--straggler-minmax-count", "16",
             "--enable-ft-package", "--calc-ft-timeouts", "--init-model-with-meta-device", "--recompute-modules",
             "core_attn", "--check-weight-hash-across-dp-replicas-interval", "100"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--ckpt-format", "--dist-ckpt-strictness", "--cross-entropy-loss-fusion",
                                      "--cross-entropy-fusion-impl", "--overlap-p2p-communication",
                                      "--deterministic-mode", "--logging-level", "--log-straggler",
                                      "--straggler-minmax-count", "--enable-ft-package", "--calc-ft-timeouts",
                                      "--init-model-with-meta-device", "--recompute-modules",
                                      "--log-progress (without --save)"}));
  EXPECT_TRUE(parse({"--log-progress", "--save", "ckpt"}).log_progress);
  EXPECT_TRUE(parse({"--log-progress", "--save", "ckpt"}).flags_without_effect.empty());
  EXPECT_EQ(must_fail({"--ckpt-format", "safetensors"}),
            "--ckpt-format safetensors: not one of Megatron's formats (torch, torch_dist, zarr, torch_dcp, "
            "fsdp_dtensor)");
  EXPECT_EQ(o.check_weight_hash_interval, 100);
  EXPECT_EQ(parse({}).check_weight_hash_interval, 0);
  EXPECT_EQ(must_fail({"--check-weight-hash-across-dp-replicas-interval", "0"}),
            "--check-weight-hash-across-dp-replicas-interval must be positive");
  EXPECT_NE(must_fail({"--use-torch-fsdp2"}).find("--use-torch-fsdp2: not supported: trident shards the optimizer"),
            std::string::npos);
  // The interleaved schedule's groups: the pipeline size, Megatron's default, and nothing else.
  EXPECT_EQ(parse({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank",
                   "2", "--microbatch-group-size-per-virtual-pipeline-stage", "2"})
                .flags_without_effect,
            (std::vector<std::string>{"--microbatch-group-size-per-virtual-pipeline-stage"}));
  EXPECT_EQ(must_fail({"--num-layers", "4", "--pipeline-model-parallel-size", "2",
                       "--microbatch-group-size-per-virtual-pipeline-stage", "4"}),
            "--microbatch-group-size-per-virtual-pipeline-stage 4: not supported: trident's interleaved schedule runs "
            "a chunk's micro-batches in groups of --pipeline-model-parallel-size (2), Megatron's default");
  // Megatron's list of modules: core_attn alone is what trident does.
  EXPECT_EQ(parse({"--recompute-modules", "core_attn", "core_attn"}).recompute_modules,
            (std::vector<std::string>{"core_attn", "core_attn"}));
  EXPECT_EQ(must_fail({"--recompute-modules", "core_attn", "mlp"}),
            "--recompute-modules core_attn mlp: not supported: trident recomputes the attention's core (the fused "
            "attention) always, and whole layers with --recompute-granularity full (--recompute-modules core_attn)");
}

// Megatron's list-valued switches without effect take their words (the flags after them still
// parse; none at all too, as nargs='*') and are noted; so is the re-run tracker's file.
TEST(Options, ListValuedFlagsWithoutEffect) {
  const TrainOptions o = parse({"--cuda-graph-scope", "attn", "mlp", "--cp-comm-type", "p2p", "a2a",
                                "--result-rejected-tracker-filename", "rejected.txt", "--high-priority-stream-groups",
                                "--micro-batch-size", "3"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--result-rejected-tracker-filename", "--cp-comm-type", "--cuda-graph-scope",
                                      "--high-priority-stream-groups"}));
  EXPECT_EQ(o.words_without_effect.at("cuda-graph-scope"), (std::vector<std::string>{"attn", "mlp"}));
  EXPECT_EQ(o.micro_batch_size, 3);
  // In a config file an empty list or no value at all is as good.
  const std::string yaml = write_yaml("empty_lists", "cuda_graph_scope: []\noffload-modules:\nmicro-batch-size: 3\n");
  EXPECT_EQ(parse({"--config", yaml}).flags_without_effect,
            (std::vector<std::string>{"--cuda-graph-scope", "--offload-modules"}));
}

// Megatron-DeepSpeed's spellings of GPT-2's settings (lowercase layernorm, 1 expert as dense,
// --layernorm-epsilon, the partition by transformer layers) are accepted and noted; other
// values, and in-process restarts, are refused in one line. Newer Megatron's plumbing and
// service switches are noted.
TEST(Options, MegatronDeepSpeedSpellingsAndNewerSwitches) {
  EXPECT_EQ(parse({"--normalization", "layernorm", "--num-experts", "1", "--layernorm-epsilon", "1e-5",
                   "--partition-method", "type:transformer"})
                .flags_without_effect,
            (std::vector<std::string>{"--normalization", "--layernorm-epsilon", "--partition-method",
                                      "--num-experts"}));
  EXPECT_EQ(must_fail({"--num-experts", "8"}),
            "--num-experts 8: not supported: GPT-2 is dense (no mixture of experts; Megatron-DeepSpeed's 1 expert is "
            "dense) (--num-experts 1)");
  EXPECT_EQ(must_fail({"--layernorm-epsilon", "1e-6"}),
            "--layernorm-epsilon 1e-6: not supported: GPT-2's LayerNorm epsilon is 1e-5 (--layernorm-epsilon 1e-5)");
  EXPECT_EQ(must_fail({"--normalization", "RMSNorm"}),
            "--normalization RMSNorm: not supported: GPT-2 normalises with LayerNorm (--normalization LayerNorm)");
  EXPECT_NE(must_fail({"--partition-method", "parameters"}).find("--partition-method parameters: not supported"),
            std::string::npos);
  EXPECT_NE(must_fail({"--inprocess-restart"}).find("--inprocess-restart: not supported: trident does not restart"),
            std::string::npos);
  EXPECT_EQ(parse({"--inprocess-active-world-size", "4", "--flight-recorder-dump-path", "/tmp/fr", "--nvtx-ranges",
                   "--mlp-chunks-for-training", "2"})
                .flags_without_effect,
            (std::vector<std::string>{"--mlp-chunks-for-training", "--nvtx-ranges", "--flight-recorder-dump-path",
                                      "--inprocess-active-world-size"}));
}

// BigScience's and Megatron-DeepSpeed's flags for GPT-2's settings (BigScience's "absolute"
// positions), switches that change nothing here (noted), and their other models' and losses'
// settings, refused in one line with the reason.
TEST(Options, BigScienceAndDeepSpeedSettings) {
  const TrainOptions o = parse({"--position-embedding-type", "absolute", "--log-path", "logs", "--return-data-index",
                                "--tiktoken-special-tokens", "<a>", "<b>", "--mlp-type", "standard",
                                "--vocab-extra-ids", "0", "--micro-batch-size", "3"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--position-embedding-type", "--mlp-type", "--vocab-extra-ids", "--return-data-index",
                                      "--log-path", "--tiktoken-special-tokens"}));
  EXPECT_EQ(o.micro_batch_size, 3);
  EXPECT_EQ(must_fail({"--position-embedding-type", "alibi"}),
            "--position-embedding-type alibi: not supported: GPT-2's positions are learned absolute embeddings "
            "(--position-embedding-type learned_absolute)");
  EXPECT_EQ(must_fail({"--glu-activation", "swiglu"}), "--glu-activation: not supported: GPT-2's MLP is GELU");
  EXPECT_EQ(must_fail({"--loss-on-targets-only"}),
            "--loss-on-targets-only: not supported: every target of a sample is trained on (no prefix-LM loss mask; "
            "--eod-mask-loss leaves out the token after each end of document)");
  EXPECT_EQ(must_fail({"--pad-vocab-size-to", "50304"}),
            "--pad-vocab-size-to: not supported: the padding comes from --make-vocab-size-divisible-by (x "
            "--tensor-model-parallel-size)");
  EXPECT_EQ(must_fail({"--reset-iteration"}),
            "--reset-iteration: not supported: a load resumes at the checkpoint's iteration; --finetune starts from "
            "iteration 0 with the weights alone");
  EXPECT_EQ(must_fail({"--vocab-extra-ids", "100"}),
            "--vocab-extra-ids 100: not supported: GPT-2's BPE vocabulary has no sentinel tokens (--vocab-extra-ids 0)");
  EXPECT_NE(must_fail({"--yaml-cfg", "run.yaml"}).find("give trident's flags in a --config YAML file"),
            std::string::npos);
}

// Megatron-LM 2025's implementation switches, second names and settings trident has one way of.
TEST(Options, Megatron2025FlagsMore) {
  const TrainOptions o =
      parse({"--no-create-attention-mask-in-dataloader", "--num-query-groups", "8", "--use-dist-ckpt",
             "--ddp-num-buckets", "4", "--overlap-param-gather-with-optimizer-step", "--cuda-graph-impl", "local",
             "--no-one-logger", "--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.5", "--mmap-warmup",
             "--main-grads-dtype", "fp32", "--softmax-type", "vanilla"});
  EXPECT_EQ(o.flags_without_effect,
            (std::vector<std::string>{"--main-grads-dtype", "--softmax-type",  // settings first
                                      "--no-create-attention-mask-in-dataloader", "--num-query-groups",
                                      "--use-dist-ckpt", "--ddp-num-buckets",
                                      "--overlap-param-gather-with-optimizer-step", "--cuda-graph-impl",
                                      "--no-one-logger", "--optimizer-cpu-offload", "--optimizer-offload-fraction",
                                      "--mmap-warmup"}));
  EXPECT_EQ(must_fail({"--exp-avg-dtype", "bf16"}),
            "--exp-avg-dtype bf16: not supported: Adam's moments are fp32 (--exp-avg-dtype fp32)");
  EXPECT_EQ(must_fail({"--wandb-entity", "me"}),
            "--wandb-entity: not supported: Weights & Biases is not supported; --tensorboard-dir writes Megatron's "
            "scalars");
  EXPECT_NE(must_fail({"--use-precision-aware-optimizer"}).find("not supported: the optimizer keeps fp32"),
            std::string::npos);
  // Second names: Megatron-LM's --persistent-save-interval and --encoder-*, Megatron-DeepSpeed's
  // --kill-switch-file.
  const TrainOptions a = parse({"--encoder-num-layers", "3", "--encoder-seq-length", "16", "--max-position-embeddings",
                                "16", "--persistent-save-interval", "7", "--kill-switch-file", "stop"});
  EXPECT_EQ(a.model.num_layers, 3);
  EXPECT_EQ(a.model.seq_length, 16);
  EXPECT_EQ(a.save_interval, 7);
  EXPECT_EQ(a.kill_switch_path, "stop");
  // Megatron's --save-retain-interval: a positive multiple of --save-interval.
  EXPECT_EQ(parse({"--save-interval", "5", "--save-retain-interval", "20"}).save_retain_interval, 20);
  EXPECT_EQ(must_fail({"--save", "ckpt", "--save-interval", "5", "--save-retain-interval", "12"}),
            "--save-retain-interval 12: must be a positive multiple of --save-interval (5)");
  EXPECT_EQ(must_fail({"--save", "ckpt", "--save-retain-interval", "10"}),
            "--save-retain-interval 10: must be a positive multiple of --save-interval (0)");
  EXPECT_EQ(parse({"--save-retain-interval", "10"}).save_retain_interval, 10);  // checked with --save, as Megatron
  EXPECT_EQ(must_fail({"--save-interval", "5", "--save-retain-interval", "20", "--keep-last", "2"}),
            "--save-retain-interval and --keep-last choose the checkpoints kept in two ways: give one");
  // Both names of one setting: refused, as Megatron's validate_args and DeepSpeed refuse them
  // (--save-interval's argparse alias excepted).
  EXPECT_EQ(must_fail({"--num-layers", "4", "--encoder-num-layers", "3"}),
            "--num-layers and --encoder-num-layers are one setting under two names: give one");
  EXPECT_EQ(parse({"--save-interval", "5", "--persistent-save-interval", "6"}).save_interval, 6);
  EXPECT_EQ(must_fail({"--kill-switch-path", "a", "--kill-switch-file", "b"}),
            "--kill-switch-path and --kill-switch-file are one setting under two names: give one");
  EXPECT_EQ(parse({"--num_layers", "4", "--num-layers", "4"}).model.num_layers, 4);  // one name, two spellings
  EXPECT_EQ(parse({"--deepscale", "--mtp-num-layers", "0"}).flags_without_effect,
            (std::vector<std::string>{"--mtp-num-layers", "--deepscale"}));
  EXPECT_EQ(parse({"--pretrained-checkpoint", "base"}).pretrained_checkpoint, "base");
  EXPECT_EQ(must_fail({"--pretrained-checkpoint="}), "--pretrained-checkpoint: expected a directory");
  EXPECT_EQ(must_fail({"--mock-data", "--full-validation"}),
            "--full-validation reads the validation data to its end: give --data-path or --valid-data-path "
            "(synthetic tokens have no end)");
  // Megatron's --iterations-to-skip: 1-based iterations, each once.
  EXPECT_EQ(parse({"--iterations-to-skip", "5", "3", "5"}).iterations_to_skip, (std::set<int64_t>{3, 5}));
  EXPECT_EQ(must_fail({"--iterations-to-skip", "0"}), "--iterations-to-skip: 0 is not an iteration (they count from 1)");
  // Megatron-core's --mid-level-dataset-surplus.
  EXPECT_FALSE(parse({}).mid_level_dataset_surplus.has_value());
  EXPECT_EQ(parse({"--mid-level-dataset-surplus", "0.01"}).mid_level_dataset_surplus, 0.01);
  EXPECT_NE(must_fail({"--mid-level-dataset-surplus", "-0.1"}).find("mid-level-dataset-surplus"), std::string::npos);
}

struct BadCase {
  std::vector<std::string> args;
  std::string flag;  // must appear in the one-line message
};

// Megatron's removed flags are refused with its advice; its NaN-check switches are noted.
TEST(Options, OldAndRemovedMegatronFlags) {
  EXPECT_EQ(must_fail({"--batch-size", "8"}),
            "--batch-size: not supported: Megatron's old flag, no longer valid: use --micro-batch-size");
  EXPECT_EQ(must_fail({"--model-parallel-size", "2"}),
            "--model-parallel-size: not supported: Megatron's old flag, no longer valid: use "
            "--tensor-model-parallel-size");
  EXPECT_NE(must_fail({"--warmup", "0.01"}).find("use --lr-warmup-fraction"), std::string::npos);
  EXPECT_EQ(parse({"--decoupled-lr", "1e-4"}).decoupled_lr, 1e-4);  // supported since 2026-12-07
  EXPECT_EQ(parse({"--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad"}).flags_without_effect,
            (std::vector<std::string>{"--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad"}));
}

// Megatron-DeepSpeed's token counts: read as given (0 included for the warm-up), the decay
// in tokens overriding the one in iterations or samples (noted), and refused with WSD, beside
// a warm-up of another form, or with nothing to decay; --skip-train is a switch.
TEST(Options, TokenScheduleFlags) {
  TrainOptions o = parse({"--lr-warmup-tokens", "375_000_000", "--lr-decay-tokens", "300000000000", "--train-tokens",
                          "300000000000", "--lr-decay-style", "cosine", "--train-iters", "1000"});
  EXPECT_EQ(o.lr_warmup_tokens, 375000000u);
  EXPECT_EQ(o.lr_decay_tokens, 300000000000u);
  EXPECT_EQ(o.train_tokens, 300000000000u);
  EXPECT_TRUE(o.counts_tokens());
  EXPECT_TRUE(o.flags_without_effect.empty());
  const LrSchedule s = make_lr_schedule(o);
  EXPECT_EQ(s.warmup_tokens, 375000000u);
  EXPECT_EQ(s.decay_tokens, 300000000000u);
  EXPECT_FALSE(parse({}).counts_tokens());
  EXPECT_FALSE(make_lr_schedule(parse({})).counts_tokens());
  EXPECT_EQ(parse({"--lr-warmup-tokens", "0"}).lr_warmup_tokens, 0u);
  // The decay in iterations or samples stays (Megatron-DeepSpeed checks and saves it too).
  o = parse({"--lr-decay-tokens", "900", "--lr-decay-iters", "50", "--lr-warmup-fraction", "0.1"});
  EXPECT_TRUE(o.flags_without_effect.empty());
  EXPECT_EQ(o.warmup_samples, 0.1 * 50 * o.global_batch_size);
  // A warm-up in iterations or as a fraction under a decay in tokens is Megatron-DeepSpeed's too.
  EXPECT_EQ(parse({"--lr-warmup-iters", "10", "--lr-decay-tokens", "900"}).lr_warmup_iters, 10);
  EXPECT_EQ(error_of({"--lr-warmup-fraction", "0.1", "--lr-decay-tokens", "900"}), "");
  EXPECT_TRUE(parse({"--skip-train"}).skip_train);
  EXPECT_FALSE(parse({}).skip_train);

  EXPECT_EQ(must_fail({"--lr-decay-tokens", "0"}), "--lr-decay-tokens must be positive");
  EXPECT_EQ(must_fail({"--train-tokens", "0"}), "--train-tokens must be positive");
  EXPECT_EQ(must_fail({"--train-tokens", "5000"}),
            "--train-tokens needs --train-iters or --train-samples (the run ends at whichever comes first)");
  EXPECT_EQ(error_of({"--train-tokens", "5000", "--train-samples", "800"}), "");
  EXPECT_EQ(must_fail({"--train-tokens", "-5"}), "--train-tokens: cannot parse '-5' as a non-negative integer");
  EXPECT_EQ(must_fail({"--lr-decay-tokens", "900", "--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "5"}),
            "--lr-decay-tokens: --lr-decay-style WSD counts in iterations or samples (Megatron-DeepSpeed's token "
            "counts go with constant, linear, cosine and inverse-square-root)");
  EXPECT_EQ(must_fail({"--lr-warmup-tokens", "100", "--lr-warmup-iters", "5"}),
            "--lr-warmup-tokens and --lr-warmup-iters are mutually exclusive");
  EXPECT_EQ(must_fail({"--train-samples", "800", "--lr-warmup-tokens", "100", "--lr-warmup-samples", "5"}),
            "--lr-warmup-tokens and --lr-warmup-samples are mutually exclusive");
  EXPECT_EQ(must_fail({"--lr-warmup-tokens", "100", "--lr-warmup-fraction", "0.1"}),
            "--lr-warmup-tokens and --lr-warmup-fraction are mutually exclusive");
  EXPECT_EQ(error_of({"--lr-warmup-tokens", "100", "--lr-warmup-iters", "0"}), "");  // an explicit 0 is no warm-up
  EXPECT_EQ(must_fail({"--lr-warmup-tokens", "900", "--lr-decay-tokens", "900"}),
            "--lr-decay-tokens (900) must exceed --lr-warmup-tokens (900)");
  EXPECT_EQ(error_of({"--lr-warmup-tokens", "900", "--lr-decay-tokens", "900", "--lr-decay-style", "constant"}), "");
}

TEST(Options, EveryBadValueNamesItsFlag) {
  const std::string bad_bool_yaml = write_yaml("bad_bool", "fp16: maybe\n");
  const std::vector<BadCase> cases = {
      {{"--fp16", "--bf16"}, "--bf16"},
      {{"--fp16", "--bf16"}, "--fp16"},
      {{"--fp16=1"}, "--fp16"},
      {{"--loss-scale", "8"}, "--loss-scale"},  // fp32 has no loss scaling
      {{"--fp16", "--loss-scale", "-1"}, "--loss-scale"},
      {{"--fp16", "--loss-scale", "big"}, "--loss-scale"},
      {{"--fp16", "--initial-loss-scale", "0"}, "--initial-loss-scale"},
      {{"--fp16", "--min-loss-scale", "0"}, "--min-loss-scale"},
      {{"--fp16", "--min-loss-scale", "1024", "--initial-loss-scale", "512"}, "--min-loss-scale"},
      {{"--fp16", "--loss-scale-window", "0"}, "--loss-scale-window"},
      {{"--fp16", "--loss-scale-window", "1.5"}, "--loss-scale-window"},
      {{"--fp16", "--hysteresis", "0"}, "--hysteresis"},
      {{"--train-iters", "10", "--train-samples", "100"}, "--train-samples"},
      {{"--train-samples", "100", "--lr-warmup-iters", "2"}, "--lr-warmup-iters"},
      {{"--train-samples", "100", "--lr-decay-iters", "2"}, "--lr-decay-iters"},
      {{"--train-iters", "10", "--lr-warmup-samples", "2"}, "--lr-warmup-samples"},
      {{"--lr-decay-samples", "20"}, "--lr-decay-samples"},
      {{"--train-samples", "-5"}, "--train-samples"},
      {{"--train-samples", "2", "--global-batch-size", "4"}, "--train-samples"},
      {{"--train-samples", "100", "--lr-warmup-samples", "10", "--lr-warmup-fraction", "0.1"}, "--lr-warmup-fraction"},
      {{"--lr-warmup-iters", "1", "--lr-warmup-fraction", "0.1"}, "--lr-warmup-fraction"},
      {{"--lr-warmup-fraction", "1.5"}, "--lr-warmup-fraction"},
      {{"--lr-warmup-fraction", "-0.1"}, "--lr-warmup-fraction"},
      {{"--lr-warmup-fraction", "1", "--lr-decay-style", "cosine"}, "--lr-warmup-fraction"},
      {{"--train-iters", "10", "--lr-warmup-iters", "10"}, "--lr-decay-iters"},
      {{"--train-samples", "100", "--lr-warmup-samples", "100"}, "--lr-decay-samples"},
      {{"--train-iters", "0"}, "--train-iters"},
      {{"--lr-warmup-iters", "-1"}, "--lr-warmup-iters"},
      {{"--lr-decay-style", "exponential"}, "--lr-decay-style"},
      {{"--global-batch-size", "4", "--train-iters", "4611686018427387904"},
       "--train-iters (4611686018427387904) x --global-batch-size (4) does not fit 64 bits"},
      {{"--global-batch-size", "4", "--train-iters", "2", "--lr-decay-iters", "4611686018427387905"},
       "--lr-decay-iters (4611686018427387905) x --global-batch-size (4) does not fit 64 bits"},
      {{"--global-batch-size", "4", "--eval-iters", "4611686018427387904"},
       "--eval-iters (4611686018427387904) x --global-batch-size (4) does not fit 64 bits"},
      {{"--global-batch-size", "4", "--train-iters", "10", "--eval-interval", "1", "--eval-iters",
        "1152921504606846976"},
       "--eval-iters (1152921504606846976) x --global-batch-size x the 11 evaluations does not fit 64 bits"},
      {{"--save", "--mock-data"}, "--save: expected a value, got the flag --mock-data (write --save=--mock-data"},
      {{"--lr", "--seed", "3"}, "--lr: expected a value, got the flag --seed"},
      {{"--train-iters", "5", "--load"}, "--load: expected a value"},
      {{"--num-layers", "0"}, "--num-layers must be positive, got 0"},
      {{"--profile-step-start", "3"}, "--profile-step-start, --profile-step-end and --profile-ranks need --profile"},
      {{"--profile", "--profile-step-start", "5", "--profile-step-end", "5"},
       "--profile-step-end (5) must exceed --profile-step-start (5)"},
      {{"--profile", "--profile-step-start", "-1"}, "--profile-step-start"},
      {{"--profile", "--profile-ranks", "0", "-2"}, "--profile-ranks: rank -2 must not be negative"},
      {{"--profile", "--profile-ranks", "0", "one"}, "--profile-ranks"},
      {{"--profile", "--profile-ranks", "4294967296"}, "--profile-ranks: rank 4294967296 is too large"},
      {{"--profile", "--profile-ranks", "--profile-step-start", "0"}, "--profile-ranks: expected one or more global ranks"},
      {{"--config", "--device", "cpu"}, "--config: expected a value, got the flag --device"},
      {{"--lr-decay-style", "WSD"}, "--lr-decay-style WSD needs --lr-wsd-decay-iters"},
      {{"--train-samples", "400", "--lr-decay-style", "WSD"}, "needs --lr-wsd-decay-samples"},
      {{"--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "-5"}, "--lr-wsd-decay-iters"},
      {{"--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "5", "--lr-wsd-decay-style", "step"},
       "--lr-wsd-decay-style: unknown style 'step'"},
      {{"--lr-decay-style", "WSD", "--train-iters", "100", "--lr-warmup-iters", "10", "--lr-wsd-decay-iters", "91"},
       "--lr-wsd-decay-iters (91) must not exceed the decay after the warm-up (90 iterations)"},
      {{"--train-samples", "400", "--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "5"},
       "--lr-wsd-decay-iters is iteration-based"},
      {{"--lr-decay-style", "WSD", "--lr-wsd-decay-samples", "5"}, "--lr-wsd-decay-samples needs sample-based"},
      {{"--lr", "-1"}, "--lr must"},  // not "--min-lr must be in [0, --lr]"
      {{"--lr", "inf"}, "--lr:"},
      {{"--lr", "0.1", "--min-lr", "0.2"}, "--min-lr"},
      {{"--eval-interval", "0"}, "--eval-interval"},
      {{"--eval-iters", "-1"}, "--eval-iters"},
      {{"--eval-iters", "ten"}, "--eval-iters"},
      {{"--tensorboard-log-interval", "0"}, "--tensorboard-log-interval"},
      {{"--tensorboard-dir="}, "--tensorboard-dir"},
      {{"--peak-tflops", "-3"}, "--peak-tflops"},
      {{"--peak-tflops", "nan"}, "--peak-tflops"},
      {{"--max-nan-iterations", "-1"}, "--max-nan-iterations"},
      {{"--save-interval", "-10", "--save", "x"}, "--save-interval"},
      {{"--keep-last", "-1"}, "--keep-last"},
      {{"--save="}, "--save"},
      {{"--load="}, "--load"},
      {{"--config", bad_bool_yaml}, "fp16"},
      // torch.optim.AdamW's ranges; a given batch or virtual-stage count of 0 is not "unset".
      {{"--adam-beta1", "1.5"}, "--adam-beta1 must be in [0, 1)"},
      {{"--adam-beta2", "1.0"}, "--adam-beta2 must be in [0, 1)"},
      {{"--adam-beta2", "-0.5"}, "--adam-beta2"},
      {{"--adam-eps", "-1"}, "--adam-eps must be"},
      {{"--global-batch-size", "0"}, "--global-batch-size must be positive"},
      {{"--tensorboard-queue-size", "0"}, "--tensorboard-queue-size must be positive"},
      {{"--pipeline-model-parallel-size", "2", "--num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "0"},
       "--num-layers-per-virtual-pipeline-stage must be positive"},
      {{"--pipeline-model-parallel-size", "2", "--num-layers", "4", "--num-virtual-stages-per-pipeline-rank", "0"},
       "--num-virtual-stages-per-pipeline-rank must be positive"},
      {{"--pipeline-model-parallel-size", "2", "--num-layers", "4", "--num-virtual-stages-per-pipeline-rank", "0",
        "--num-layers-per-virtual-pipeline-stage", "1"},
       "alternatives"},
      {{"--ffn-hidden-size", "0"}, "--ffn-hidden-size (0) must be 4 x --hidden-size"},
      {{"--lr", "0x1p-10"}, "--lr: cannot parse '0x1p-10' as a number"},  // Python's float() refuses hex
      {{"--kv-channels", "0"}, "--kv-channels (0) must be"},
  };
  for (const BadCase& c : cases) {
    const std::string msg = error_of(c.args);
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_NE(msg, "") << joined << "should fail";
    EXPECT_NE(msg.find(c.flag), std::string::npos) << joined << "-> '" << msg << "' does not name " << c.flag;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << joined << "-> more than one line: " << msg;
  }
  std::filesystem::remove(bad_bool_yaml);
}

}  // namespace
}  // namespace trident
