// run_sharing_first_failure on a rank whose step went well, while another rank's failed: the
// error it throws keeps the kind of that rank's (a full disk stays a StorageError: exit 3, not
// 2). The other rank is played by a test double that answers the collectives as rank 1 of two
// whose step threw would.
#include "parallel/comm_strings.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <algorithm>

#include "core/error.h"
#include "parallel/comm.h"

namespace trident {
namespace {

// Rank 0 of two; rank 1 shares `theirs` (what run_sharing_first_failure sends: its kind's letter
// and message) through first_failure's max-reduction and broadcast from rank 1.
class PeerFailed final : public Comm {
 public:
  explicit PeerFailed(std::string theirs) : theirs_(std::move(theirs)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce(const Tensor& t, ReduceOp op) override {
    ASSERT_EQ(op, ReduceOp::Max);
    ASSERT_EQ(t.numel(), 1);
    float& v = *static_cast<float*>(t.data);
    v = std::max(v, 1.0f);  // rank 1's: size - rank
  }
  void broadcast(const Tensor& t, int root) override {
    if (root == 0) return;  // this rank's own failure, the lowest: its buffer is what all get
    ASSERT_EQ(root, 1);
    if (broadcasts_++ == 0) {  // the length, then the bytes (in int32 words)
      *static_cast<int32_t*>(t.data) = static_cast<int32_t>(theirs_.size());
      return;
    }
    ASSERT_GE(t.nbytes(), theirs_.size());
    std::memcpy(t.data, theirs_.data(), theirs_.size());
  }
  void allgather(const Tensor&, const Tensor&) override { FAIL() << "not a collective of first_failure"; }
  void reduce_scatter(const Tensor&, const Tensor&) override { FAIL() << "not a collective of first_failure"; }
  void exchange(const std::vector<P2pTransfer>&) override { FAIL() << "not a collective of first_failure"; }
  void barrier() override { FAIL() << "not a collective of first_failure"; }

 private:
  std::string theirs_;
  int broadcasts_ = 0;
};

// What rank 1 shares when its step throws an E with message `what`: run_sharing_first_failure's
// encoding, 'S' before a StorageError's message, 'E' before any other's.
template <typename E>
std::string shared_by_a_rank_that_threw(const std::string& what) {
  return (std::is_base_of_v<StorageError, E> ? "S" : "E") + what;
}

TEST(RunSharingFirstFailure, AnotherRanksFullDiskIsAStorageErrorHereToo) {
  PeerFailed comm(shared_by_a_rank_that_threw<StorageError>("ck/iter_0000004: write failed: No space left on device"));
  try {
    run_sharing_first_failure(comm, [] {});
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_STREQ(e.what(), "ck/iter_0000004: write failed: No space left on device");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a StorageError: " << e.what();
  }
}

TEST(RunSharingFirstFailure, AnotherRanksBadInputIsAConfigErrorHere) {
  PeerFailed comm(shared_by_a_rank_that_threw<IoError>("data/a.idx: not a Megatron index"));
  try {
    run_sharing_first_failure(comm, [] {});
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    ADD_FAILURE() << "a StorageError: " << e.what();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "data/a.idx: not a Megatron index");
  }
}

// The rank whose step threw rethrows its own exception, of its own kind.
TEST(RunSharingFirstFailure, TheFailingRankKeepsItsOwnError) {
  PeerFailed comm(shared_by_a_rank_that_threw<IoError>("rank 1's"));
  EXPECT_THROW(run_sharing_first_failure(comm, [] { throw StorageError("mine"); }), StorageError);
}

}  // namespace
}  // namespace trident
