// make_train_data's order under MPI (run as a world of one and under mpirun -np 2): world
// rank 0 builds the GPT index maps and writes their caches, every other rank then maps those
// caches instead of building the same maps at the same time; a failure on rank 0 stops every
// rank (none waits for it); a cache folder that cannot be written leaves each rank building
// in memory. Its own main (MPI_Init).
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "parallel/mpi_comm.h"
#include "parallel/parallel_context.h"
#include "train/train_data.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

// A folder that every rank knows (rank 0 makes it) and rank 0 removes at the end.
class SharedDir {
 public:
  SharedDir() {
    char name[256] = {};
    if (mpi_world_rank() == 0) {
      std::string templ = (fs::temp_directory_path() / "trident-order-XXXXXX").string();
      std::snprintf(name, sizeof name, "%s", ::mkdtemp(templ.data()));
    }
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = name;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (mpi_world_rank() == 0) fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Rank 0 writes 60 documents of 1..30 tokens (ids below 500) and a 512-word vocabulary.
void write_data(const SharedDir& dir) {
  if (mpi_world_rank() == 0) {
    IndexedDatasetBuilder b(dir / "corpus", IndexDType::kUInt16);
    for (int d = 0; d < 60; ++d) {
      std::vector<int32_t> tokens;
      for (int t = 0; t <= d % 30; ++t) tokens.push_back((7 * d + t) % 500);
      b.add_item(tokens);
      b.end_document();
    }
    b.finish();
    std::ofstream vocab(dir / "vocab.txt");
    for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) vocab << special << "\n";
    for (int i = 5; i < 512; ++i) vocab << "w" << i << "\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TrainOptions options(const SharedDir& dir, const std::string& cache) {
  TrainOptions opt;
  opt.data_path = {dir / "corpus"};
  opt.vocab_file = dir / "vocab.txt";
  opt.tokenizer_type = "BertWordPieceLowerCase";
  opt.data_cache_path = cache;
  opt.split = "8,1,1";
  opt.model.seq_length = 8;
  opt.micro_batch_size = 1;
  opt.global_batch_size = 2;
  opt.train_iters = 40;
  opt.eval_interval = 10;
  opt.eval_iters = 2;
  return opt;
}

std::vector<const GptDataset*> datasets(const TrainData& d) {
  std::vector<const GptDataset*> out;
  for (const SampleSource* s : {d.train.get(), d.valid.get(), d.test.get()}) {
    out.push_back(dynamic_cast<const GptDataset*>(s));
    EXPECT_TRUE(out.back()) << "not one GptDataset per split";
  }
  return out;
}

TEST(DataBuildOrder, RankZeroBuildsTheOthersMapItsCaches) {
  SharedDir dir;
  write_data(dir);
  auto par = make_parallel_context(1, 1);
  TrainOptions opt = options(dir, dir / "cache");
  const TrainData d = make_train_data(opt, par.get());
  EXPECT_EQ(opt.model.vocab_size, 512);
  for (const GptDataset* ds : datasets(d)) {
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->loaded_from_cache(), par->world_rank() != 0) << ds->cache_file() << " on rank " << par->world_rank();
    EXPECT_TRUE(fs::exists(ds->cache_file()));
  }
}

TEST(DataBuildOrder, UnwritableCacheFolderBuildsOnEveryRank) {
  SharedDir dir;
  write_data(dir);
  if (mpi_world_rank() == 0) std::ofstream(dir / "a_file") << "not a folder";
  MPI_Barrier(MPI_COMM_WORLD);
  auto par = make_parallel_context(1, 1);
  TrainOptions opt = options(dir, dir / "a_file/cache");
  const TrainData d = make_train_data(opt, par.get());
  for (const GptDataset* ds : datasets(d)) {
    ASSERT_TRUE(ds);
    EXPECT_FALSE(ds->loaded_from_cache());
  }
  EXPECT_GE(d.train->size(), 80u);
}

TEST(DataBuildOrder, FailureOnRankZeroStopsEveryRank) {
  auto par = make_parallel_context(1, 1);
  if (par->world_size() < 2) GTEST_SKIP() << "needs 2 ranks (mpirun -np 2)";
  SharedDir dir;
  write_data(dir);
  TrainOptions opt = options(dir, dir / "cache");
  if (par->world_rank() == 0) opt.data_path = {dir / "missing"};  // rank 0 alone cannot build
  try {
    make_train_data(opt, par.get());
    FAIL() << "rank " << par->world_rank() << " went on without rank 0's datasets";
  } catch (const IoError& e) {
    EXPECT_EQ(par->world_rank(), 0);
    EXPECT_NE(std::string(e.what()).find(dir / "missing.idx"), std::string::npos) << e.what();
  } catch (const ConfigError& e) {
    EXPECT_NE(par->world_rank(), 0);
    // Rank 0's own message, on every rank.
    EXPECT_NE(std::string(e.what()).find(dir / "missing.idx"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  trident::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
