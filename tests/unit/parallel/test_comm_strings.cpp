// run_sharing_first_failure across two ranks, each played in turn by a test double that
// answers first_failure's collectives: what a rank whose step threw shares, then what the
// other rank throws from it. Its kind survives (a full disk stays a StorageError: exit 3, not
// 2); any other failure is a ConfigError there.
#include "parallel/comm_strings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "parallel/comm.h"

namespace trident {
namespace {

// Rank 0 of two. `theirs`: what rank 1, whose step threw, shares (the bytes a PeerOfTwo that
// played it sent); empty: rank 1's step went well. What this rank shares is kept in sent().
class PeerOfTwo final : public Comm {
 public:
  explicit PeerOfTwo(std::string theirs = "") : theirs_(std::move(theirs)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& sent() const { return sent_; }
  void allreduce(const Tensor& t, ReduceOp op) override {
    ASSERT_EQ(op, ReduceOp::Max);
    ASSERT_EQ(t.numel(), 1);
    float& v = *static_cast<float*>(t.data);
    if (!theirs_.empty()) v = std::max(v, 1.0f);  // rank 1's failure: size - rank
  }
  // first_failure's broadcast_string: the length, then the bytes in int32 words.
  void broadcast(const Tensor& t, int root) override {
    const bool length = broadcasts_++ == 0;
    if (root == 0) {  // this rank's own failure, the lowest
      if (length) sent_.resize(static_cast<size_t>(*static_cast<int32_t*>(t.data)));
      else std::memcpy(sent_.data(), t.data, sent_.size());
      return;
    }
    ASSERT_EQ(root, 1);
    if (length) {
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
  std::string theirs_, sent_;
  int broadcasts_ = 0;
};

// What a rank whose step throws `error` shares with the others; its own exception comes back
// to it unchanged.
template <typename E>
std::string shared_by_a_rank_throwing(const E& error) {
  PeerOfTwo comm;
  EXPECT_THROW(run_sharing_first_failure(comm, [&] { throw error; }), E);
  EXPECT_FALSE(comm.sent().empty());
  return comm.sent();
}

TEST(RunSharingFirstFailure, AnotherRanksFullDiskIsAStorageErrorHereToo) {
  PeerOfTwo comm(shared_by_a_rank_throwing(StorageError("ck/iter_0000004: write failed: No space left on device")));
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
  for (const std::string& sent : {shared_by_a_rank_throwing(IoError("data/a.idx: not a Megatron index")),
                                  shared_by_a_rank_throwing(std::runtime_error("data/a.idx: not a Megatron index"))}) {
    PeerOfTwo comm(sent);
    try {
      run_sharing_first_failure(comm, [] {});
      ADD_FAILURE() << "no error";
    } catch (const StorageError& e) {
      ADD_FAILURE() << "a StorageError: " << e.what();
    } catch (const ConfigError& e) {
      EXPECT_STREQ(e.what(), "data/a.idx: not a Megatron index");
    }
  }
}

// Nobody failed: nothing is thrown, nothing sent.
TEST(RunSharingFirstFailure, NoFailureIsNoError) {
  PeerOfTwo comm;
  int ran = 0;
  run_sharing_first_failure(comm, [&] { ++ran; });
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(comm.sent().empty());
}

}  // namespace
}  // namespace trident
