// The trainer's checkpoint rules on short CPU runs of a tiny model:
//  - which checkpoint --load names: the pointer's, an iteration folder, --ckpt-step's; a
//    folder of iterations without a pointer is an error; none at all starts from scratch,
//    or is an error with --exit-on-missing-checkpoint;
//  - a resumed run's data must cover the rest of it (training and validation) from the
//    checkpoint's consumed samples: another global batch size is an error before training;
//  - an fp32 run loading a 16-bit checkpoint takes the fp32 master weights, bit for bit;
//  - --no-save-optim / --no-save-rng leave those states out, and loading asks for
//    --no-load-optim / --no-load-rng;
//  - --keep-last after a rollback keeps the resumed run's checkpoints and leaves the
//    abandoned continuation above the pointer, named once in the log;
//  - Megatron's non-persistent checkpoints: saved, replaced, and resumed from when newer.
//  - an error while an --async-save writer still writes is not held up by it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "train/checkpoint_to_load.h"
#include "train/local_checkpoint.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace trident {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // trainer_test_util.h

void train(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  tr.train();
}

// The same after loading o.load's checkpoint; returns the log.
std::string train_from_checkpoint(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  EXPECT_TRUE(tr.load_checkpoint()) << log.str();
  tr.train();
  return log.str();
}

// The iteration a Trainer for `o` resumes at after load_checkpoint (-1: nothing loaded),
// or the ConfigError it throws ("error: ..."), and its log.
std::string load(const TrainOptions& o, std::string* log_out = nullptr) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  std::string result;
  try {
    result = tr.load_checkpoint() ? std::to_string(tr.iteration()) : "-1";
  } catch (const ConfigError& e) {
    result = std::string("error: ") + e.what();
  }
  if (log_out) *log_out = log.str();
  return result;
}

TEST(TrainerCheckpoint, LoadTakesTheCheckpointLoadNames) {
  const fs::path dir = fresh_temp_dir("load_names");
  TrainOptions o = tiny_options();
  o.train_iters = 6;
  o.save = dir.string();
  o.save_interval = 2;
  train(o);  // iter_0000002, 4 and 6; the pointer names 6
  o.save.clear();
  o.load = dir.string();
  EXPECT_EQ(load(o), "6");
  o.load = (dir / "iter_0000004").string();  // an iteration folder, as trident-eval takes it
  EXPECT_EQ(load(o), "4");
  o.ckpt_step = 2;
  EXPECT_TRUE(has(load(o), "error: --ckpt-step: --load " + o.load + " is one checkpoint folder already")) << load(o);
  o.load = dir.string();
  EXPECT_EQ(load(o), "2");  // Megatron's --ckpt-step: that iteration, not the pointer's
  o.ckpt_step = 3;
  EXPECT_EQ(load(o), "error: --ckpt-step: no checkpoint of iteration 3 (" + (dir / "iter_0000003").string() +
                         " not found)");

  // Without the pointer: an error rather than a silent start from scratch; --ckpt-step still loads.
  fs::remove(dir / kLatestFileName);
  o.ckpt_step = -1;
  EXPECT_EQ(load(o), "error: --load: " + dir.string() +
                         " holds iter_0000002 .. iter_0000006 but no latest_checkpointed_iteration.txt: give "
                         "--ckpt-step N to load one of them");
  o.ckpt_step = 4;
  EXPECT_EQ(load(o), "4");

  // No checkpoint at all: from scratch, or an error with --exit-on-missing-checkpoint.
  o.ckpt_step = -1;
  o.load = (dir / "empty").string();
  fs::create_directories(o.load);
  std::string log;
  EXPECT_EQ(load(o, &log), "-1");
  EXPECT_TRUE(has(log, "no checkpoint in " + o.load + " yet")) << log;
  o.exit_on_missing_checkpoint = true;
  EXPECT_EQ(load(o), "error: --exit-on-missing-checkpoint: --load " + o.load + " holds no checkpoint");
  o.load = (dir / "nowhere").string();
  EXPECT_EQ(load(o), "error: --exit-on-missing-checkpoint: --load " + o.load + " does not exist");
  fs::remove_all(dir);
}

// Megatron keeps --train-iters when the global batch size changes on resume, so the samples
// the rest of the run reads depend on the checkpoint's consumed samples: here 5 iterations
// of 8 (40 samples, and one validation of 8) resumed at a global batch of 4.
TEST(TrainerCheckpoint, DataMustCoverTheResumedRun) {
  const fs::path dir = fresh_temp_dir("data_size");
  TrainOptions o = tiny_options();
  o.global_batch_size = 8;
  o.train_iters = 10;
  o.exit_interval = 5;
  o.eval_interval = 5;
  o.eval_iters = 1;
  o.save = dir.string();
  {
    auto be = make_cpu_backend();
    std::ostringstream log;
    Trainer tr(o, *be, synthetic_tokens(o), log);
    tr.set_evaluation_data(synthetic_tokens(o, 1), nullptr);
    tr.train();
    ASSERT_EQ(tr.iteration(), 5);
  }
  o.save.clear();
  o.load = dir.string();
  o.global_batch_size = 4;
  o.override_opt_param_scheduler = true;  // the schedule in samples changes with the batch
  o.exit_interval = 0;
  // What make_train_data builds for 10 iterations of 4 (and 10 / 5 + 1 validations of 4);
  // the resumed run reads training samples [40, 60) and validation samples [8, 16).
  auto resumed = [&](uint64_t train_samples, uint64_t valid_samples) {
    auto be = make_cpu_backend();
    std::ostringstream log;
    Trainer tr(o, *be, synthetic_tokens(o, 0, train_samples), log);
    tr.set_evaluation_data(synthetic_tokens(o, 1, valid_samples), nullptr);
    try {
      tr.load_checkpoint();
      tr.train();
    } catch (const ConfigError& e) {
      EXPECT_EQ(tr.iteration(), 0) << "the error comes before anything is loaded or trained";
      return std::string(e.what());
    }
    EXPECT_EQ(tr.iteration(), 10);
    EXPECT_EQ(tr.consumed_samples(), 60u);
    return std::string();
  };
  EXPECT_EQ(resumed(40, 12),
            "--train-iters, --global-batch-size 4: the training data has 40 samples, the run reads 60 (resumed at "
            "iteration 5 with 40 training samples read; the data is sized for a run from iteration 0 at this "
            "global batch size); the checkpoint was written at --global-batch-size 8");
  EXPECT_EQ(resumed(60, 12),
            "--eval-iters, --eval-interval, --global-batch-size 4: the validation data has 12 samples, the run reads 16 (resumed at "
            "iteration 5 with 8 validation samples read; the data is sized for a run from iteration 0 at this "
            "global batch size); the checkpoint was written at --global-batch-size 8");
  EXPECT_EQ(resumed(60, 16), "");
  fs::remove_all(dir);
}

// A 16-bit run's model files hold rounded copies of its fp32 master weights; an fp32 run
// resuming from it must continue from the masters themselves, also when it loads the
// weights only (--finetune).
TEST(TrainerCheckpoint, FloatRunResumesFromTheMasterWeightsOfA16BitCheckpoint) {
  for (const auto& [dtype, finetune] : {std::pair{DType::F16, false}, std::pair{DType::BF16, false},
                                        std::pair{DType::BF16, true}}) {
    const fs::path dir = fresh_temp_dir("masters");
    TrainOptions o = tiny_options();
    o.model.dtype = dtype;
    o.initial_loss_scale = 1024;
    o.train_iters = 3;
    o.lr_warmup_iters = 0;
    o.save = dir.string();
    train(o);
    const fs::path rank = iteration_dir(dir, 3) / rank_dir_name(0, 0, 1);
    const SafetensorsReader model((rank / kModelFileName).string()), optim((rank / optimizer_file_name(0)).string());

    o.model.dtype = DType::F32;
    o.save.clear();
    o.load = dir.string();
    o.finetune = finetune;
    auto be = make_cpu_backend();
    std::ostringstream log;
    Trainer tr(o, *be, synthetic_tokens(o), log);
    ASSERT_TRUE(tr.load_checkpoint()) << log.str();
    const ParamStore& P = tr.model().params();
    int64_t elements = 0, rounded = 0, differ = 0;
    for (const LocalParam& p : P.list()) {
      const std::vector<float> master = optim.read_f32(optimizer_piece_key(p.spec.name, "master", 0));
      const std::vector<float> stored = model.read_f32(p.spec.name);
      ASSERT_EQ(master.size(), static_cast<size_t>(p.numel())) << p.spec.name;
      const float* loaded = static_cast<const float*>(P.param(p).data);
      for (int64_t i = 0; i < p.numel(); ++i) {
        rounded += stored[i] != master[i];
        differ += std::memcmp(&loaded[i], &master[i], sizeof(float)) != 0;
      }
      elements += p.numel();
    }
    EXPECT_GT(rounded, elements / 2) << dtype_name(dtype) << ": the model file's copy is rounded";
    EXPECT_EQ(differ, 0) << dtype_name(dtype) << ": of " << elements << " parameters, " << differ
                         << " differ from the checkpoint's masters";
    fs::remove_all(dir);
  }
}

TEST(TrainerCheckpoint, NoSaveOptimAndNoSaveRngLeaveThemOut) {
  const fs::path dir = fresh_temp_dir("no_save");
  TrainOptions o = tiny_options();
  o.train_iters = 2;
  o.lr_warmup_iters = 0;
  o.save = dir.string();
  o.no_save_optim = o.no_save_rng = true;
  train(o);
  const fs::path ckpt = iteration_dir(dir, 2);
  EXPECT_FALSE(fs::exists(ckpt / rank_dir_name(0, 0, 1) / optimizer_file_name(0)));
  nlohmann::json j;
  std::ifstream(ckpt / kMetadataFileName) >> j;
  for (const char* key : {"opt_param_scheduler", "loss_scaler", "optimizer_steps", "dropout_seed"})
    EXPECT_FALSE(j["trainer_state"].contains(key)) << key;
  EXPECT_EQ(j["trainer_state"]["consumed_valid_samples"], 0);

  o.save.clear();
  o.load = dir.string();
  EXPECT_EQ(load(o), "error: --load: " + ckpt.string() + " has no optimizer state (use --no-load-optim or --finetune)");
  o.no_load_optim = true;
  EXPECT_EQ(load(o), "error: --load: " + ckpt.string() + " has no RNG state (use --no-load-rng or --finetune)");
  o.no_load_rng = true;
  EXPECT_EQ(load(o), "2");
  o.no_load_optim = o.no_load_rng = false;
  o.finetune = true;
  EXPECT_EQ(load(o), "0");
  fs::remove_all(dir);
}

// Only a dynamic loss scaler's state is saved and loaded: an fp16 run resumed from a bf16
// checkpoint starts at --initial-loss-scale and says so, also from a checkpoint written
// before (which held a "scale 1" from every run); from an fp16 checkpoint it continues.
TEST(TrainerCheckpoint, LossScalerStateOnlyFromADynamicScaler) {
  const fs::path dir = fresh_temp_dir("scaler");
  TrainOptions o = tiny_options();
  o.model.dtype = DType::BF16;
  o.train_iters = 2;
  o.lr_warmup_iters = 0;
  o.save = dir.string();
  train(o);
  const fs::path meta_path = iteration_dir(dir, 2) / kMetadataFileName;
  nlohmann::json j;
  std::ifstream(meta_path) >> j;
  EXPECT_FALSE(j["trainer_state"].contains("loss_scaler"));

  TrainOptions f = o;
  f.model.dtype = DType::F16;
  f.initial_loss_scale = 4096;
  f.save.clear();
  f.load = dir.string();
  f.no_load_rng = true;
  const std::string note = "has no dynamic loss-scaler state (written by a bf16 run): the loss scale starts at "
                           "--initial-loss-scale 4096";
  std::string log;
  EXPECT_EQ(load(f, &log), "2");
  EXPECT_NE(log.find(note), std::string::npos) << log;
  j["trainer_state"]["loss_scaler"] = {{"scale", 1.0}, {"growth_tracker", 0}, {"hysteresis_tracker", 0}};
  std::ofstream(meta_path) << j.dump(2);
  EXPECT_EQ(load(f, &log), "2");
  EXPECT_NE(log.find(note), std::string::npos) << log;
  fs::remove_all(dir);

  TrainOptions h = f;  // an fp16 checkpoint: its state, no note
  h.load.clear();
  h.save = dir.string();
  h.no_load_rng = false;
  train(h);
  std::ifstream(iteration_dir(dir, 2) / kMetadataFileName) >> j;
  ASSERT_TRUE(j["trainer_state"].contains("loss_scaler"));
  EXPECT_EQ(j["trainer_state"]["loss_scaler"]["scale"], 4096.0);
  h.save.clear();
  h.load = dir.string();
  EXPECT_EQ(load(h, &log), "2");
  EXPECT_EQ(log.find("loss-scaler state"), std::string::npos) << log;
  fs::remove_all(dir);
}

// The rollback of the audit: 30 iterations saved every 5, the pointer edited back to 10, a
// resumed run with --keep-last 2 up to iteration 20.
TEST(TrainerCheckpoint, KeepLastAfterARollbackKeepsTheResumedRun) {
  const fs::path dir = fresh_temp_dir("rollback");
  TrainOptions o = tiny_options();
  o.save = dir.string();
  o.save_interval = 5;
  train(o);
  write_latest_iteration(dir, 10);
  o.load = dir.string();
  o.keep_last = 2;
  o.exit_interval = 20;
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  ASSERT_TRUE(tr.load_checkpoint());
  tr.train();
  EXPECT_EQ(list_iterations(dir), (std::vector<int64_t>{15, 20, 25, 30}));
  EXPECT_EQ(latest_iteration(dir), 20);
  const std::string note = "trident: --keep-last: iter_0000020, iter_0000025, iter_0000030 in " + dir.string() +
                           " are not in the history of the latest checkpoint (iteration 15), left by an abandoned "
                           "continuation";
  const std::string text = log.str();
  EXPECT_TRUE(has(text, note)) << text;
  EXPECT_EQ(text.find("--keep-last:"), text.rfind("--keep-last:")) << "said once";
  fs::remove_all(dir);
}

// A run of 12 iterations that stops at 7, saving into `dir` every 4 and non-persistent
// checkpoints of `type` every 3.
TrainOptions non_persistent_run(const fs::path& dir, const std::string& type) {
  TrainOptions o = tiny_options();
  o.train_iters = 12;
  o.exit_interval = 7;
  o.save = dir.string();
  o.save_interval = 4;
  o.non_persistent_save_interval = 3;
  o.non_persistent_ckpt_type = type;
  return o;
}

// Megatron's non-persistent checkpoints (--non-persistent-ckpt-type global): every
// --non-persistent-save-interval iterations that is not a --save-interval one, into
// <save>/non_persistent, each replacing the one before; none at the end, where the final
// save follows. --load takes the newer of the two folders' latest, and a run resumed from a
// non-persistent one continues --save's history where its run left it. Passed over: one
// continuing a checkpoint that a rollback of --load's pointer abandoned, and another run's.
TEST(TrainerCheckpoint, NonPersistentCheckpointsReplaceEachOtherAndResumeWhenNewer) {
  const fs::path dir = fresh_temp_dir("non_persistent");
  const fs::path np = dir / "non_persistent";
  TrainOptions o = non_persistent_run(dir, "global");
  train(o);  // persistent 4 and 7 (the exit); non-persistent 3, then 6 in its place
  EXPECT_EQ(list_iterations(dir), (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(list_iterations(np), (std::vector<int64_t>{6}));
  EXPECT_EQ(latest_iteration(np), 6);
  EXPECT_EQ(read_previous_checkpoint(iteration_dir(np, 6)).iteration, std::optional<int64_t>(3));
  const CheckpointMetadata m6 = read_metadata((iteration_dir(np, 6) / kMetadataFileName).string());
  EXPECT_EQ(m6.trainer_state.at(kPreviousPersistentKey), 4);
  EXPECT_EQ(m6.trainer_state.at(kNonPersistentKey), true);

  // Had the run died in iteration 7: --save's pointer names 4, the non-persistent one 6.
  fs::remove_all(iteration_dir(dir, 7));
  write_latest_iteration(dir, 4);
  o.load = dir.string();
  std::string log;
  EXPECT_EQ(load(o, &log), "6");
  EXPECT_TRUE(has(log, "trident: loaded non-persistent checkpoint " + iteration_dir(np, 6).string())) << log;
  TrainOptions without = o;  // the type not given: --load's own
  without.non_persistent_ckpt_type.clear();
  without.non_persistent_save_interval = 0;
  EXPECT_EQ(load(without), "4");
  TrainOptions step = o;  // --ckpt-step names one of --load's
  step.ckpt_step = 4;
  EXPECT_EQ(load(step), "4");

  // Resumed to 12 with --keep-last 3: saves 8 (continuing 4), non-persistent 9, 12 at the end.
  o.exit_interval = 0;
  o.keep_last = 3;
  const std::string resumed = train_from_checkpoint(o);
  EXPECT_FALSE(has(resumed, "abandoned")) << resumed;
  EXPECT_EQ(read_previous_checkpoint(iteration_dir(dir, 8)).iteration, std::optional<int64_t>(4));
  EXPECT_EQ(list_iterations(dir), (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(list_iterations(np), (std::vector<int64_t>{9}));
  EXPECT_EQ(load(o), "12");  // --save's is newer now

  // Rolled back to 4: the non-persistent 9 continues 8, which the rollback abandoned.
  write_latest_iteration(dir, 4);
  EXPECT_EQ(load(o, &log), "4");
  EXPECT_TRUE(has(log, "trident: note: " + iteration_dir(np, 9).string() + " continues iteration 8 of " + o.load +
                           ", past its latest, 4 (a rollback): not resumed from")) << log;
  // Another run's --load: not its non-persistent checkpoint.
  write_latest_iteration(dir, 8);
  TrainOptions other = o;
  other.load = other.save = (dir / "other").string();
  other.non_persistent_global_ckpt_dir = np.string();
  EXPECT_EQ(load(other, &log), "-1");
  EXPECT_TRUE(has(log, " was saved by a run saving into ")) << log;
  // Its folder elsewhere (--non-persistent-global-ckpt-dir).
  o.non_persistent_global_ckpt_dir = (dir / "elsewhere").string();
  fs::rename(np, o.non_persistent_global_ckpt_dir);
  EXPECT_EQ(load(o), "9");

  // The saves' folder may not be --save's or --load's, nor hold a persistent checkpoint.
  o.non_persistent_global_ckpt_dir = dir.string();
  EXPECT_THROW(check_non_persistent_dir(o), ConfigError);
  o.non_persistent_global_ckpt_dir = (dir / "elsewhere").string();
  EXPECT_NO_THROW(check_non_persistent_dir(o));
  fs::copy(iteration_dir(dir, 8), iteration_dir(o.non_persistent_global_ckpt_dir, 8), fs::copy_options::recursive);
  write_latest_iteration(o.non_persistent_global_ckpt_dir, 8);
  try {
    check_non_persistent_dir(o);
    ADD_FAILURE() << "a persistent checkpoint in the non-persistent folder";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--non-persistent-global-ckpt-dir: " +
                                         iteration_dir(o.non_persistent_global_ckpt_dir, 8).string() +
                                         " is not a non-persistent checkpoint; the non-persistent saves would "
                                         "replace it");
  }
  fs::remove_all(dir);
}

// A stop at a non-persistent iteration saves it twice (there, then to --save at the end):
// the resume takes --save's, the same state, so that --save's history stays whole; a run
// resumed from a non-persistent checkpoint that trains no further still saves to --save.
// With --async-save the non-persistent saves commit later, and replace each other all the same.
TEST(TrainerCheckpoint, NonPersistentTieStopAndAsyncSave) {
  const fs::path dir = fresh_temp_dir("non_persistent_tie");
  const fs::path np = dir / "non_persistent";
  TrainOptions o = tiny_options();
  o.train_iters = 12;
  o.exit_interval = 6;
  o.save = o.load = dir.string();
  o.save_interval = 4;
  o.non_persistent_save_interval = 3;
  o.non_persistent_ckpt_type = "global";
  o.async_save = true;
  train(o);  // non-persistent 3, then 6; persistent 4, and 6 at the exit
  EXPECT_EQ(list_iterations(dir), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(list_iterations(np), (std::vector<int64_t>{6}));
  std::string log;
  EXPECT_EQ(load(o, &log), "6");
  EXPECT_FALSE(has(log, "non-persistent")) << log;

  // Resumed from the non-persistent 6 (--save's 6 gone) with nothing left to train: saved to --save.
  fs::remove_all(iteration_dir(dir, 6));
  write_latest_iteration(dir, 4);
  o.train_iters = 6;
  o.use_checkpoint_opt_param_scheduler = true;  // the schedule of 12 iterations
  o.exit_interval = 0;
  EXPECT_TRUE(has(train_from_checkpoint(o), "trident: loaded non-persistent checkpoint " +
                                                iteration_dir(np, 6).string()));
  EXPECT_EQ(list_iterations(dir), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(latest_iteration(dir), 6);
  EXPECT_EQ(read_previous_checkpoint(iteration_dir(dir, 6)).iteration, std::optional<int64_t>(4));
  fs::remove_all(dir);
}

// A run that stops for an error while its --async-save writer still writes (a slow or hung
// disk) reports the error at once: waiting for the writer would keep a rank of a job silent
// while the others' collectives time out and blame it. The writer here would take 60 s.
TEST(TrainerCheckpoint, AnErrorDoesNotWaitForTheAsyncWriter) {
  const fs::path dir = fresh_temp_dir("error_async_writer");
  TrainOptions o = tiny_options();
  o.save = dir.string();
  o.async_save = true;
  ASSERT_EQ(setenv("TRIDENT_TEST_SLOW_ASYNC_WRITE_S", "60", 1), 0);
  auto be = make_cpu_backend();
  std::ostringstream log;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        Trainer tr(o, *be, synthetic_tokens(o), log);
        tr.save_checkpoint();
        throw IoError("a failure while the checkpoint is written");
      },
      IoError);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsetenv("TRIDENT_TEST_SLOW_ASYNC_WRITE_S");
  EXPECT_LT(s, 30.0) << log.str();
  EXPECT_TRUE(has(log.str(), "in the background")) << log.str();
  fs::remove_all(dir);  // the writer, asleep, ends with this process
}

// Local non-persistent checkpoints on one process (tests/mpi/local_checkpoints.sh runs them on
// four): the rank's own folder LDIR/0 keeps the newest, marked with its save and algorithm;
// --load resumes from it when newer, and passes over another run's; LDIR may not be --save.
TEST(TrainerCheckpoint, LocalCheckpointsResumeWhenNewer) {
  const fs::path dir = fresh_temp_dir("local_checkpoints");
  const fs::path local = dir / "local";
  TrainOptions o = non_persistent_run(dir, "local");
  o.non_persistent_local_ckpt_dir = local.string();
  train(o);  // persistent 4 and 7; local 3, then 6 in its place
  EXPECT_EQ(list_iterations(dir), (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(list_iterations(local / "0"), (std::vector<int64_t>{6}));
  EXPECT_FALSE(fs::exists(dir / "non_persistent"));
  const CheckpointMetadata m6 = read_metadata((iteration_dir(local / "0", 6) / kMetadataFileName).string());
  EXPECT_EQ(m6.trainer_state.at(kNonPersistentKey), true);
  EXPECT_EQ(m6.trainer_state.at(kLocalAlgoKey), "fully_parallel");
  EXPECT_FALSE(m6.trainer_state.at(kLocalSaveTokenKey).get<std::string>().empty());
  EXPECT_EQ(m6.trainer_state.at(kPreviousPersistentKey), 4);

  // Had the run died in iteration 7: the local 6 is newer than --save's 4.
  fs::remove_all(iteration_dir(dir, 7));
  write_latest_iteration(dir, 4);
  o.load = dir.string();
  std::string log;
  EXPECT_EQ(load(o, &log), "6");
  EXPECT_TRUE(has(log, "trident: loaded non-persistent checkpoint " + iteration_dir(local / "0", 6).string())) << log;
  TrainOptions global = o;  // another type: not looked for
  global.non_persistent_ckpt_type = "global";
  global.non_persistent_local_ckpt_dir.clear();
  EXPECT_EQ(load(global), "4");
  TrainOptions other = o;  // another run's --load
  other.load = other.save = (dir / "other").string();
  EXPECT_EQ(load(other, &log), "-1");
  EXPECT_TRUE(has(log, iteration_dir(local / "0", 6).string() + " was saved by a run saving into ")) << log;
  o.non_persistent_local_ckpt_dir = dir.string();
  EXPECT_THROW(check_non_persistent_dir(o), ConfigError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident
