// KernelRowBook: the rows of trident-bench --kernels across gpu-check's runs of one table. A
// first run records every row; a rerun past the row the run before died in takes the rows
// before it from the results file (the table's choices then still compare every row), marks
// the dead row skipped, records its own rows, and a third run sees both runs' rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tools/kernel_rows.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Files {
  fs::path dir = fs::temp_directory_path() / ("kernel_rows_" + std::to_string(::getpid()));
  std::string progress = (dir / "progress").string(), results = (dir / "results").string();
  Files() { fs::create_directories(dir); }
  ~Files() { fs::remove_all(dir); }
};

// Runs rows `first`..`last` of a table whose row k takes k ms (row 3 fails in its check), as
// Bench::measure and push do, stopping (as a death) at row `dies_in` with the progress left.
void run_rows(KernelRowBook& book, int last, int dies_in = 0) {
  for (;;) {
    const int row = book.next_row();
    if (row > last) return;
    const std::string name = "row " + std::to_string(row);
    RowOutcome outcome;
    if (const std::optional<RowOutcome> known = book.settled(row, name, row == 1)) {
      outcome = *known;
    } else {
      book.note_progress(row, name);
      if (row == dies_in) return;
      outcome = {static_cast<double>(row), row == 3 ? "wrong result:\tmax |diff| 1\nfrom the defaults'" : ""};
      book.note_progress(row, "");
    }
    book.record(row, outcome);
  }
}

TEST(KernelRowBook, ARerunTakesTheRowsBeforeItFromTheResults) {
  Files f;
  KernelRowBook first(f.progress, f.results, 0, {});
  EXPECT_TRUE(first.complete());
  run_rows(first, 8, 5);
  EXPECT_EQ(read(f.progress), "5 row 5\n");  // the row to blame
  EXPECT_EQ(read(f.results), "1\t1\t\n2\t2\t\n3\t3\twrong result: max |diff| 1 from the defaults'\n4\t4\t\n");

  KernelRowBook second(f.progress, f.results, 5, {});
  EXPECT_TRUE(second.complete());
  EXPECT_TRUE(second.silent(4));
  EXPECT_FALSE(second.silent(5));
  for (int row = 1; row <= 4; ++row) {
    const std::optional<RowOutcome> known = second.settled(row, "row " + std::to_string(row), row == 1);
    ASSERT_TRUE(known) << row;
    EXPECT_EQ(known->ms, row);
    EXPECT_EQ(known->error, row == 3 ? "wrong result: max |diff| 1 from the defaults'" : "");
  }
  const std::optional<RowOutcome> dead = second.settled(5, "row 5", false);
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->error, "skipped: the run before died in it (a rerun past it)");
  EXPECT_FALSE(second.settled(6, "row 6", false));
  run_rows(second, 8, 7);

  KernelRowBook third(f.progress, f.results, 7, {});
  for (int row = 1; row <= 6; ++row) {
    const std::optional<RowOutcome> known = third.settled(row, "row " + std::to_string(row), false);
    ASSERT_TRUE(known) << row;
    EXPECT_EQ(known->ms, row == 5 ? 0.0 : row) << row;
    EXPECT_EQ(known->error.empty(), row != 3 && row != 5) << row;
  }
  run_rows(third, 8);
  EXPECT_EQ(read(f.progress), "");
  // Every row once, the second and third runs' after the first's: no row recorded twice.
  EXPECT_EQ(read(f.results),
            "1\t1\t\n2\t2\t\n3\t3\twrong result: max |diff| 1 from the defaults'\n4\t4\t\n"
            "5\t0\tskipped: the run before died in it (a rerun past it)\n6\t6\t\n"
            "7\t0\tskipped: the run before died in it (a rerun past it)\n8\t8\t\n");
}

TEST(KernelRowBook, WithoutResultsARerunKnowsOnlyItsCeilings) {
  Files f;
  KernelRowBook rerun(f.progress, "", 4, {});
  EXPECT_FALSE(rerun.complete());
  EXPECT_FALSE(rerun.settled(1, "peak: device copy", true)) << "a ceiling is measured again";
  ASSERT_TRUE(rerun.settled(2, "adamw", false));
  EXPECT_EQ(rerun.settled(2, "adamw", false)->error, "not rerun");
}

TEST(KernelRowBook, SkippedNamesAreNotRun) {
  Files f;
  KernelRowBook book("", "", 0, {"attn bwd, warp-spec dQ"});
  const std::optional<RowOutcome> skipped = book.settled(9, "attn bwd, warp-spec dQ", false);
  ASSERT_TRUE(skipped);
  EXPECT_EQ(skipped->error, "skipped: --kernels-skip");
  EXPECT_FALSE(book.settled(9, "attn bwd, warp-spec dK/dV", false));
}

// A name no row had (an old name without its section) is reported, in the order given.
TEST(KernelRowBook, SkipNamesThatMatchNoRowAreReported) {
  KernelRowBook book("", "", 0, {"attention D64: attn fwd", "attn fwd", "attention D128: attn fwd"});
  EXPECT_TRUE(book.settled(1, "attention D64: attn fwd", false));
  EXPECT_FALSE(book.settled(2, "attention D64: attn bwd", false));
  EXPECT_EQ(book.unmatched_skips(), (std::vector<std::string>{"attn fwd", "attention D128: attn fwd"}));
}

TEST(KernelRowBook, AResultsLineCutShortIsIgnored) {
  Files f;
  std::ofstream(f.results) << "1\t0.5\t\n2\t0.25\tok then\n3\t0.7";  // a run killed while writing row 3
  KernelRowBook rerun(f.progress, f.results, 3, {});
  EXPECT_EQ(rerun.settled(1, "a", false)->ms, 0.5);
  EXPECT_EQ(rerun.settled(2, "b", false)->error, "ok then");
  EXPECT_EQ(rerun.settled(3, "c", false)->error, "skipped: the run before died in it (a rerun past it)");
  EXPECT_THROW(KernelRowBook(f.progress, (f.dir / "none" / "results").string(), 3, {}), ConfigError);
}

}  // namespace
}  // namespace trident
