// The iter_NNNNNNN / latest_checkpointed_iteration.txt protocol: commit, crash safety,
// pointer errors, prune.
#include "ckpt/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "ckpt/checksum.h"
#include "ckpt/metadata.h"
#include "ckpt/save_dir_lock.h"
#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"

namespace trident {
namespace {

namespace fs = std::filesystem;
using testing::expect_io_error;
using testing::ScratchDir;
using testing::slurp;
using testing::spit;

// What a save records of the checkpoint its run continued from: nothing (older checkpoints,
// conversions), null (a run from scratch), or an iteration.
struct Previous {
  bool recorded = false;
  std::optional<int64_t> iteration;
};
const Previous kUnrecorded{}, kFromScratch{true, std::nullopt};
Previous after(int64_t iteration) { return {true, iteration}; }

// Saves one small checkpoint of `iteration` whose tensor holds `value`.
void save(const fs::path& root, int64_t iteration, float value, const Previous& previous = kUnrecorded) {
  TempIterationDir temp_dir(root, iteration, make_save_token());
  const fs::path tmp = temp_dir.path();
  fs::create_directories(tmp / rank_dir_name(0, 0, 1));
  const std::vector<float> v(16, value);
  write_safetensors((tmp / rank_dir_name(0, 0, 1) / "model.safetensors").string(),
                    {{"w", StDType::F32, {16}, v.data()}});
  CheckpointMetadata m;
  m.iteration = iteration;
  m.files = {make_file_record(tmp, "mp_rank_00/model.safetensors")};
  if (previous.recorded)
    m.trainer_state[kPreviousCheckpointKey] =
        previous.iteration ? nlohmann::json(*previous.iteration) : nlohmann::json(nullptr);
  write_metadata((tmp / kMetadataFileName).string(), m);
  temp_dir.commit();
}

// Loads the latest checkpoint the way a trainer would: pointer, metadata, checksums, tensor.
float load_value(const fs::path& root) {
  const int64_t it = latest_iteration(root);
  const CheckpointMetadata m = read_metadata((iteration_dir(root, it) / kMetadataFileName).string());
  EXPECT_EQ(m.iteration, it);
  verify_checkpoint_files(iteration_dir(root, it), m);
  SafetensorsReader r((iteration_dir(root, it) / "mp_rank_00" / "model.safetensors").string());
  return r.read_f32("w")[0];
}

// The names in `dir` but the lock file every save leaves (SaveDirLock tests it).
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != kSaveLockFileName) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointDir, Names) {
  EXPECT_EQ(iteration_dir_name(100), "iter_0000100");
  EXPECT_EQ(iteration_dir_name(0), "iter_0000000");
  EXPECT_EQ(iteration_dir_name(12345678), "iter_12345678");
  EXPECT_EQ(iteration_dir("/ck", 7).string(), "/ck/iter_0000007");
  EXPECT_EQ(latest_file("/ck").string(), "/ck/latest_checkpointed_iteration.txt");
  EXPECT_EQ(rank_dir_name(1, 0, 1), "mp_rank_01");
  EXPECT_EQ(rank_dir_name(1, 2, 4), "mp_rank_01_002");
  EXPECT_EQ(temp_iteration_dir("/ck", 100, "abc-1").string(), "/ck/iter_0000100.tmp-abc-1");
  EXPECT_THROW(temp_iteration_dir("/ck", 100, "../x"), ConfigError);
  EXPECT_THROW(iteration_dir_name(-1), ConfigError);
  const std::string t1 = make_save_token(), t2 = make_save_token();
  EXPECT_NE(t1, t2);
}

// --save-retain-interval's first step: the iteration moved out of the committed namespace (to a
// *.del-* name), not a missing one, and not a symbolic link.
TEST(CheckpointDir, RetireIterationMovesItOutOfTheNamespace) {
  ScratchDir dir;
  const fs::path root = dir.path();
  save(root, 2, 1.0f);
  save(root, 4, 2.0f);
  const RetiredIteration r = retire_iteration(root, 2);
  ASSERT_EQ(r.kind, RetiredIteration::kMoved);
  EXPECT_EQ(r.moved_to.parent_path(), root);
  EXPECT_EQ(r.moved_to.filename().string().rfind("iter_0000002.del-", 0), 0u) << r.moved_to;
  EXPECT_TRUE(fs::is_directory(r.moved_to));
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{4}));
  EXPECT_EQ(load_value(root), 2.0f);
  EXPECT_EQ(retire_iteration(root, 2).kind, RetiredIteration::kAbsent);
  fs::create_directory_symlink(iteration_dir(root, 4), iteration_dir(root, 6));
  EXPECT_EQ(retire_iteration(root, 6).kind, RetiredIteration::kSymlink);
  EXPECT_TRUE(fs::is_symlink(iteration_dir(root, 6)));
}

TEST(CheckpointDir, CommitWritesPointerLast) {
  ScratchDir d;
  const fs::path root = d / "ck";
  EXPECT_FALSE(find_latest_iteration(root).has_value());
  expect_io_error([&] { latest_iteration(root); }, {"latest_checkpointed_iteration.txt", "missing"});
  save(root, 100, 1.0f);
  EXPECT_EQ(slurp((root / kLatestFileName).string()), "100");  // Megatron writes the bare number
  EXPECT_EQ(latest_iteration(root), 100);
  EXPECT_EQ(load_value(root), 1.0f);
  save(root, 200, 2.0f);
  EXPECT_EQ(latest_iteration(root), 200);
  EXPECT_EQ(load_value(root), 2.0f);
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(entries(root), (std::vector<std::string>{"iter_0000100", "iter_0000200", kLatestFileName}));
  EXPECT_EQ(entries(iteration_dir(root, 200)), (std::vector<std::string>{kMetadataFileName, "mp_rank_00"}))
      << "the writer's lock file is no part of the checkpoint";
}

TEST(CheckpointDir, RecommitSameIterationReplacesOnlyWhenComplete) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  save(root, 100, 5.0f);
  EXPECT_EQ(load_value(root), 5.0f);
  EXPECT_EQ(entries(root), (std::vector<std::string>{"iter_0000100", kLatestFileName}));
  // A failing commit (its temporary is gone) leaves the committed copy alone.
  expect_io_error([&] { commit(root, 100, root / "iter_0000100.tmp-nothere"); }, {"iter_0000100.tmp-nothere"});
  EXPECT_EQ(load_value(root), 5.0f);
  // A temporary of another iteration is refused.
  const fs::path other = TempIterationDir(root, 200, "x").path();
  expect_io_error([&] { commit(root, 100, other); }, {"iter_0000200.tmp-x", "not a temporary directory of iteration 100"});
  EXPECT_EQ(load_value(root), 5.0f);
  EXPECT_EQ(latest_iteration(root), 100);
}

// A pointer that cannot be written (a full disk; here a directory in its place) fails the save
// and takes the new copy away again: a first save leaves no iteration folder without a pointer
// (which --load refuses), and a second copy of an iteration gives the first one its place back.
TEST(CheckpointDir, APointerThatCannotBeWrittenTakesTheNewCopyAway) {
  ScratchDir d;
  const fs::path root = d / "ck";
  fs::create_directories(root / kLatestFileName / "blocked");
  EXPECT_THROW(save(root, 100, 1.0f), IoError);
  EXPECT_EQ(entries(root), (std::vector<std::string>{kLatestFileName})) << "no iter_0000100, no temporaries";
  fs::remove_all(root / kLatestFileName);
  save(root, 100, 1.0f);
  fs::remove(root / kLatestFileName);
  fs::create_directories(root / kLatestFileName / "blocked");
  EXPECT_THROW(save(root, 100, 5.0f), IoError);
  EXPECT_EQ(entries(root), (std::vector<std::string>{"iter_0000100", kLatestFileName}));
  SafetensorsReader r((iteration_dir(root, 100) / "mp_rank_00" / "model.safetensors").string());
  EXPECT_EQ(r.read_f32("w")[0], 1.0f) << "the first copy is back in its place";
}

TEST(CheckpointDir, CorruptCommittedFileIsNamed) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  const std::string f = (iteration_dir(root, 100) / "mp_rank_00" / "model.safetensors").string();
  std::string bytes = slurp(f);
  bytes[bytes.size() - 3] ^= 0x40;  // inside the tensor data: still a valid safetensors file
  spit(f, bytes);
  EXPECT_NO_THROW(SafetensorsReader r(f));
  expect_io_error([&] { load_value(root); }, {f, "checksum mismatch"});
}

TEST(CheckpointDir, CrashBeforeCommitKeepsOldCheckpoint) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  // A save of 200 that dies half way: files written, one truncated, never committed.
  const fs::path tmp = TempIterationDir(root, 200, make_save_token()).path();
  fs::create_directories(tmp / "mp_rank_00");
  const std::vector<float> v(16, 9.0f);
  write_safetensors((tmp / "mp_rank_00" / "model.safetensors").string(), {{"w", StDType::F32, {16}, v.data()}});
  const std::string full = slurp((tmp / "mp_rank_00" / "model.safetensors").string());
  spit((tmp / "mp_rank_00" / "model.safetensors").string(), full.substr(0, full.size() / 2));
  spit((root / (std::string(kLatestFileName) + ".tmp-123-0-0")).string(), "20");  // torn pointer temp
  // The pointer still names the old, loadable checkpoint; the temporary is invisible.
  EXPECT_EQ(latest_iteration(root), 100);
  EXPECT_EQ(load_value(root), 1.0f);
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{100}));
  // A crash after the rename but before the pointer moved also keeps the old one current.
  save(root, 300, 3.0f);
  write_latest_iteration(root, 100);
  EXPECT_EQ(load_value(root), 1.0f);
  // The save of 300 removed the dead save's temporary (its lock free, in this pid's name);
  // prune cleans the torn pointer's and keeps the pointer's target, and 300 above it.
  EXPECT_FALSE(fs::exists(tmp));
  const PruneResult pr = prune(root, 1);
  EXPECT_EQ(pr.removed_temporaries.size(), 1u);
  EXPECT_TRUE(pr.removed_iterations.empty());
  EXPECT_EQ(pr.abandoned_iterations, (std::vector<int64_t>{300}));
  EXPECT_EQ(entries(root), (std::vector<std::string>{"iter_0000100", "iter_0000300", kLatestFileName}));
  EXPECT_EQ(load_value(root), 1.0f);
}

TEST(CheckpointDir, BadPointerErrorsNameTheFile) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  const std::string file = (root / kLatestFileName).string();
  spit(file, "10x0\n");
  expect_io_error([&] { latest_iteration(root); }, {file, "garbled content '10x0' "});  // the newline trimmed
  spit(file, "1\x01\n");
  expect_io_error([&] { latest_iteration(root); }, {file, "garbled content '1?' "});
  spit(file, "");
  expect_io_error([&] { latest_iteration(root); }, {file, "garbled"});
  spit(file, "release");
  expect_io_error([&] { latest_iteration(root); }, {file, "release"});
  spit(file, "250\n");
  expect_io_error([&] { latest_iteration(root); }, {file, "iteration 250", "iter_0000250", "does not exist"});
  // prune refuses to delete anything while the pointer is bad.
  save(root, 200, 2.0f);  // commit rewrites the pointer: good again
  spit(file, "garbage");
  EXPECT_THROW(prune(root, 1), IoError);
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{100, 200}));
  spit(file, "100\n");  // whitespace around the number is accepted
  EXPECT_EQ(latest_iteration(root), 100);
}

TEST(CheckpointDir, PruneKeepsTheNewestUpToThePointer) {
  ScratchDir d;
  const fs::path root = d / "ck";
  for (int64_t it : {10, 20, 30, 40, 50}) save(root, it, static_cast<float>(it));
  fs::create_directories(root / "iter_0000060.tmp-x");  // stale
  fs::create_directories(root / "unrelated");           // not ours: kept
  spit((root / "iter_notanumber").string(), "");        // not ours: kept
  PruneResult r = prune(root, 2);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{10, 20, 30}));
  EXPECT_TRUE(r.abandoned_iterations.empty());
  EXPECT_EQ(r.removed_temporaries.size(), 1u);
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{40, 50}));
  EXPECT_EQ(load_value(root), 50.0f);
  EXPECT_TRUE(fs::exists(root / "unrelated"));
  EXPECT_TRUE(fs::exists(root / "iter_notanumber"));
  EXPECT_THROW(prune(root, 0), ConfigError);
  // No pointer: nothing committed is deleted.
  save(root, 60, 6.0f);
  fs::remove(root / kLatestFileName);
  r = prune(root, 1);
  EXPECT_TRUE(r.removed_iterations.empty());
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{40, 50, 60}));
}

// A rollback: the pointer moved back to 10 while 15 .. 30 of the abandoned continuation
// exist, and the resumed run saves 15 and 20 with --keep-last 2. Only iterations up to the
// pointer count: the resumed run's own checkpoints are kept, the abandoned ones are neither
// counted nor deleted (each new save of the same number replaces one).
TEST(CheckpointDir, PruneAfterARollbackLeavesTheAbandonedContinuation) {
  ScratchDir d;
  const fs::path root = d / "ck";
  for (int64_t it : {5, 10, 15, 20, 25, 30}) save(root, it, static_cast<float>(it));
  write_latest_iteration(root, 10);
  PruneResult r = prune(root, 2);
  EXPECT_TRUE(r.removed_iterations.empty());
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{15, 20, 25, 30}));
  EXPECT_EQ(load_value(root), 10.0f);

  save(root, 15, 150.0f);  // the resumed run's iteration 15 replaces the abandoned one
  r = prune(root, 2);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{5}));
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{20, 25, 30}));
  save(root, 20, 200.0f);
  r = prune(root, 2);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{10}));
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{25, 30}));
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{15, 20, 25, 30}));
  EXPECT_EQ(load_value(root), 200.0f);
  write_latest_iteration(root, 15);
  EXPECT_EQ(load_value(root), 150.0f);  // the new iteration 15, not the abandoned one
}

// A rollback whose resumed run saves at other iterations than the abandoned one did (the
// black-box case: 5 .. 20 every 5, back to 10, then every 7): each save records the one its
// run continued from, so the abandoned 15 and 20, now between the resumed run's 14 and 21,
// are neither counted nor deleted, and the resumed run's own checkpoints are what --keep-last
// keeps. Before, every iteration up to the pointer counted: 15 and 20 pushed out 10 and 14.
TEST(CheckpointDir, PruneFollowsTheRecordedHistory) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 5, 5.0f, kFromScratch);
  for (int64_t it : {10, 15, 20}) save(root, it, static_cast<float>(it), after(it - 5));
  write_latest_iteration(root, 10);  // the rollback
  save(root, 14, 14.0f, after(10));
  PruneResult r = prune(root, 3);
  EXPECT_TRUE(r.removed_iterations.empty());
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{15, 20}));
  save(root, 21, 21.0f, after(14));
  r = prune(root, 3);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{5}));
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{15, 20}));
  save(root, 28, 28.0f, after(21));  // a third run, resumed from 21
  r = prune(root, 3);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{10}));
  EXPECT_EQ(list_iterations(root), (std::vector<int64_t>{14, 15, 20, 21, 28}));

  // A history that ends (a run from scratch in a directory of older checkpoints): the older
  // ones are not counted or deleted. One whose record cannot be followed (a loop, a missing
  // iteration) ends there too.
  const fs::path fresh = d / "fresh";
  for (int64_t it : {10, 20}) save(fresh, it, 1.0f, kUnrecorded);
  save(fresh, 5, 5.0f, kFromScratch);
  save(fresh, 8, 8.0f, after(5));
  r = prune(fresh, 1);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{5}));
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{10, 20}));
  const fs::path loop = d / "loop";
  save(loop, 3, 3.0f, after(4));
  save(loop, 4, 4.0f, after(3));
  r = prune(loop, 1);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{3}));
  save(loop, 9, 9.0f, after(7));  // 7 is not there
  r = prune(loop, 5);
  EXPECT_TRUE(r.removed_iterations.empty());
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{4}));
  // A metadata file that cannot be read (a file system's hiccup) ends the history there: no
  // guess from the next lower iteration, which may be an abandoned run's.
  const fs::path broken = d / "broken";
  save(broken, 10, 10.0f, kFromScratch);
  save(broken, 20, 20.0f, kUnrecorded);  // would fall back to 10
  save(broken, 30, 30.0f, after(20));
  spit((broken / "iter_0000020" / kMetadataFileName).string(), "{");
  r = prune(broken, 1);
  EXPECT_EQ(r.removed_iterations, (std::vector<int64_t>{20}));
  EXPECT_EQ(r.abandoned_iterations, (std::vector<int64_t>{10}));
}

// The pid of a process that has exited (and been reaped).
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) std::_Exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// Saves of `iterations` that die half way, in one child process: their temporaries (with a
// file written in each) stay.
std::vector<fs::path> crashed_saves(const fs::path& root, const std::vector<int64_t>& iterations) {
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      std::vector<TempIterationDir> temps;
      for (int64_t it : iterations) {
        temps.emplace_back(root, it, make_save_token());
        spit((temps.back().path() / "half-written").string(), "x");
      }
      std::_Exit(0);  // no destructor, no commit: as a crash
    } catch (...) {
      std::_Exit(1);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().find("-" + std::to_string(child) + "-") != std::string::npos)
      left.push_back(e.path());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left.size(), iterations.size());
  return left;
}

TEST(CheckpointDir, SaveRemovesOnlyTemporariesOfDeadWriters) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  const std::string host = make_save_token().substr(0, make_save_token().find('-'));
  const std::string gone = std::to_string(dead_pid());
  // Kept: a save in progress in this process; a live lock under a dead pid's name (a writer
  // in another pid namespace); another host's; an older trident's without a lock file; a
  // lock file not yet locked and written; a token without host and pid.
  TempIterationDir live(root, 300, make_save_token());
  TempIterationDir held(root, 400, host + "-" + gone + "-0-0-0");
  TempIterationDir(root, 500, "otherhost0123456789-" + gone + "-0-0-0");
  fs::create_directories(root / ("iter_0000600.tmp-" + host + "-" + gone + "-0-0-0"));
  fs::create_directories(root / ("iter_0000700.tmp-" + host + "-" + gone + "-1-0-0"));
  spit((root / ("iter_0000700.tmp-" + host + "-" + gone + "-1-0-0") / kWriterLockFileName).string(), "");
  TempIterationDir(root, 800, "x");
  const std::vector<std::string> kept = entries(root);
  // Removed: what a crashed process left, of any iteration; and a temporary in this
  // process's name that it never made (an earlier process with the same pid: a container
  // restarted with the same host name), its lock file written and not held.
  std::vector<fs::path> crashed = crashed_saves(root, {200, 100});
  const fs::path same_pid = root / ("iter_0001000.tmp-" + host + "-" + std::to_string(::getpid()) + "-0-0-0");
  fs::create_directories(same_pid);
  spit((same_pid / kWriterLockFileName).string(), std::to_string(::getpid()));
  crashed.push_back(same_pid);
  std::sort(crashed.begin(), crashed.end());

  TempIterationDir next(root, 900, make_save_token());
  std::vector<fs::path> removed = next.removed_stale();
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, crashed);
  std::vector<std::string> now = kept;
  now.push_back(next.path().filename().string());
  std::sort(now.begin(), now.end());
  EXPECT_EQ(entries(root), now);
  EXPECT_EQ(load_value(root), 1.0f);

  // prune takes every temporary but those whose writer holds its lock.
  const PruneResult pr = prune(root, 1);
  EXPECT_EQ(pr.removed_temporaries.size(), 4u);
  EXPECT_EQ(entries(root), (std::vector<std::string>{"iter_0000100", live.path().filename().string(),
                                                     held.path().filename().string(),
                                                     next.path().filename().string(), kLatestFileName}));
  next.commit();
  EXPECT_EQ(latest_iteration(root), 900);
}

// A save killed in its commit, after the slow sync of its files (a scheduler's kill during
// the final save): its directory still holds the lock file, so the next save removes it.
TEST(CheckpointDir, SaveKilledInItsCommitIsRemovedByTheNext) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  const pid_t child = ::fork();
  if (child == 0) {
    ::setenv("TRIDENT_TEST_CRASH_IN_COMMIT", "1", 1);
    TempIterationDir t(root, 200, make_save_token());
    fs::create_directories(t.path() / "mp_rank_00");
    spit((t.path() / "mp_rank_00" / "model.safetensors").string(), "x");
    t.commit();
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 9) << "the hook did not stop the commit";
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind("iter_0000200.tmp-", 0) == 0) left.push_back(e.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(fs::exists(left[0] / kWriterLockFileName));
  TempIterationDir next(root, 300, make_save_token());
  EXPECT_EQ(next.removed_stale(), left);
  EXPECT_EQ(latest_iteration(root), 100);
}

// A failed save's directory (files in subfolders) goes with discard(), the checkpoint before
// it stays the latest; a committed one stays after discard().
TEST(CheckpointDir, DiscardRemovesAnUncommittedSaveOnly) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  TempIterationDir failed(root, 200, make_save_token());
  fs::create_directories(failed.path() / "mp_rank_00");
  spit((failed.path() / "mp_rank_00" / "model.safetensors").string(), "partial");
  failed.discard();
  EXPECT_FALSE(fs::exists(failed.path()));
  EXPECT_EQ(latest_iteration(root), 100);
  EXPECT_EQ(load_value(root), 1.0f);
  TempIterationDir done(root, 300, make_save_token());
  fs::create_directories(done.path() / "mp_rank_00");
  const std::vector<float> v(16, 3.0f);
  write_safetensors((done.path() / "mp_rank_00" / "model.safetensors").string(), {{"w", StDType::F32, {16}, v.data()}});
  CheckpointMetadata m;
  m.iteration = 300;
  m.files = {make_file_record(done.path(), "mp_rank_00/model.safetensors")};
  write_metadata((done.path() / kMetadataFileName).string(), m);
  done.commit();
  done.discard();
  EXPECT_EQ(latest_iteration(root), 300);
  EXPECT_EQ(load_value(root), 3.0f);
}

// A deletion interrupted in a child process (killed after the rename, before or during the
// removal): its iter_NNNNNNN.del-<token> directory, with a file in it, stays.
fs::path interrupted_deletion(const fs::path& root, int64_t iteration) {
  const fs::path del = root / (iteration_dir_name(iteration) + ".del-");
  const pid_t child = ::fork();
  if (child == 0) {
    const fs::path dir = del.string() + make_save_token();
    fs::create_directories(dir / "mp_rank_00");
    spit((dir / "mp_rank_00" / "model.safetensors").string(), "x");
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().string().rfind(del.string(), 0) == 0) return e.path();
  ADD_FAILURE() << "no " << del << "* left";
  return {};
}

TEST(CheckpointDir, SaveRemovesInterruptedDeletionsOfDeadWriters) {
  ScratchDir d;
  const fs::path root = d / "ck";
  save(root, 100, 1.0f);
  const std::string host = make_save_token().substr(0, make_save_token().find('-'));
  const std::string gone = std::to_string(dead_pid());
  // Kept: a deletion this process is running, another host's, one without host and pid.
  for (const std::string& name : {"iter_0000030.del-" + make_save_token(),
                                  "iter_0000040.del-otherhost0123456789-" + gone + "-0-0-0",
                                  std::string("iter_0000050.del-x")})
    fs::create_directories(root / name);
  const std::vector<std::string> kept = entries(root);
  // Removed: what dead writers on this host left mid-deletion.
  const std::vector<fs::path> interrupted = {interrupted_deletion(root, 60),
                                             root / ("iter_0000070.del-" + host + "-" + gone + "-0-0-0")};
  fs::create_directories(interrupted[1]);

  TempIterationDir next(root, 200, make_save_token());
  std::vector<fs::path> removed = next.removed_stale();
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, interrupted);
  std::vector<std::string> now = kept;
  now.push_back(next.path().filename().string());
  std::sort(now.begin(), now.end());
  EXPECT_EQ(entries(root), now);
  EXPECT_EQ(load_value(root), 1.0f);
}

TEST(CheckpointDir, CheckpointRootUsableCreatesNothing) {
  ScratchDir d;
  EXPECT_NO_THROW(check_checkpoint_root_usable(d.path()));
  EXPECT_NO_THROW(check_checkpoint_root_usable(d / "new/deeper"));
  EXPECT_FALSE(fs::exists(d / "new"));
  spit(d / "afile", "");
  expect_io_error([&] { check_checkpoint_root_usable(d / "afile/ck"); },
                  {"cannot create " + d / "afile/ck", d / "afile is not a directory"});
  expect_io_error([&] { check_checkpoint_root_usable(d / "afile"); }, {d / "afile exists and is not a directory"});
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(d / "ro");
    ::chmod((d / "ro").c_str(), 0555);
    expect_io_error([&] { check_checkpoint_root_usable(d / "ro/ck"); }, {d / "ro is not writable"});
    ::chmod((d / "ro").c_str(), 0755);
  }
}

// A process holding `root`'s save lock in a child, until release() lets it end.
class LockHolder {
 public:
  explicit LockHolder(const fs::path& root) {
    if (::pipe(ready_) != 0 || ::pipe(go_) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      hold_save_dir_lock(root);
      char c = 1;
      (void)!::write(ready_[1], &c, 1);
      (void)!::read(go_[0], &c, 1);
      std::_Exit(0);
    }
    char c = 0;
    if (::read(ready_[0], &c, 1) != 1) ADD_FAILURE() << "the child did not take the lock";
  }
  pid_t pid() const { return pid_; }
  void release() {
    char c = 1;
    (void)!::write(go_[1], &c, 1);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    for (int fd : {ready_[0], ready_[1], go_[0], go_[1]}) ::close(fd);
  }

 private:
  int ready_[2] = {-1, -1}, go_[2] = {-1, -1};
  pid_t pid_ = -1;
};

// Another process saving into a directory: a save here is refused naming it (program, pid,
// host) and creates nothing; once it has ended, the save goes on. The same process takes the
// lock any number of times; the lock file stays.
TEST(SaveDirLock, AnotherProcessSavingIntoTheDirectoryIsNamed) {
  ScratchDir d;
  const fs::path root = d / "ck";
  fs::create_directories(root);
  LockHolder other(root);
  const std::string host = make_save_token().substr(0, make_save_token().find('-'));
  const std::string holder = "pid " + std::to_string(other.pid()) + " on host " + host + " since ";
  expect_io_error([&] { hold_save_dir_lock(root); },
                  {root.string() + " is being saved into by another run (", holder,
                   (root / kSaveLockFileName).string()});
  expect_io_error([&] { TempIterationDir(root, 200, make_save_token()); }, {holder});
  EXPECT_EQ(entries(root), std::vector<std::string>{});
  other.release();
  EXPECT_EQ(hold_save_dir_lock(root), "");
  EXPECT_EQ(hold_save_dir_lock(root), "");
  save(root, 200, 2.0f);
  EXPECT_EQ(load_value(root), 2.0f);
  EXPECT_TRUE(fs::exists(root / kSaveLockFileName));
  const std::string content = slurp(root / kSaveLockFileName);
  EXPECT_NE(content.find("pid " + std::to_string(::getpid()) + " on host " + host), std::string::npos) << content;
}

// A team's shared directory: the lock file another user's run left (mode 0644 under the
// usual umask) is still locked by the next user, read-only, and holds against a third run.
TEST(SaveDirLock, AnotherUsersLockFileIsLockedReadOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  ScratchDir d;
  const fs::path root = d / "shared";
  fs::create_directories(root);
  fs::permissions(d.path(), fs::perms::all);
  fs::permissions(root, fs::perms::all);
  // The line of an earlier run of this host that is gone: not the holder's name.
  const std::string host = make_save_token().substr(0, make_save_token().find('-'));
  spit(root / kSaveLockFileName, "trident-train pid " + std::to_string(dead_pid()) + " on host " + host + " since then\n");
  fs::permissions(root / kSaveLockFileName, fs::perms::owner_read | fs::perms::owner_write |
                                                fs::perms::group_read | fs::perms::others_read);
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    char c = 0;
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(4);
    try {
      c = hold_save_dir_lock(root).empty() ? 1 : 2;
    } catch (const std::exception&) {
      c = 3;
    }
    (void)!::write(ready[1], &c, 1);
    (void)!::read(go[0], &c, 1);
    std::_Exit(0);
  }
  char got = 0;
  ASSERT_EQ(::read(ready[0], &got, 1), 1);
  EXPECT_EQ(got, 1) << "the other user's run could not take the lock (2: a note, 3: an error)";
  expect_io_error([&] { hold_save_dir_lock(root); },
                  {root.string() + " is being saved into by another run (a run that could not write its name"});
  char c = 1;
  (void)!::write(go[1], &c, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
}

// A failed write into an output directory removes the lock file it made, and the directory
// when it made that too.
TEST(SaveDirLock, OutputWriteGuardRemovesTheDirectoryItMadeWithItsLock) {
  ScratchDir d;
  const fs::path out = fs::path(d / "made") / "ck";
  {
    OutputWriteGuard guard;
    guard.created = missing_directories(out);
    TempIterationDir temp(out, 5, make_save_token());
    guard.temp = temp.path();
    ASSERT_TRUE(fs::exists(out / kSaveLockFileName));
  }
  EXPECT_FALSE(fs::exists(d / "made"));
  // An existing empty directory is left empty.
  const fs::path existing = d / "existing";
  fs::create_directories(existing);
  {
    OutputWriteGuard guard;
    guard.created = missing_directories(existing);
    TempIterationDir temp(existing, 5, make_save_token());
    guard.temp = temp.path();
  }
  EXPECT_TRUE(fs::is_empty(existing));
}

}  // namespace
}  // namespace trident
