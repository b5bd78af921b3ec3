// ZeRO shard plans: every element of every bucket is owned by exactly one rank, chunks
// are equal, the compact shard offsets are dense, and owned_pieces of any range tile the
// range's owned part.
#include <gtest/gtest.h>

#include "parallel/zero_shard.h"

namespace trident {
namespace {

TEST(ShardPlan, EveryElementOwnedOnceAndShardsDense) {
  const std::vector<FlatRange> buckets = {{0, 128}, {128, 640}, {704, 960}};  // a gap is allowed
  for (int shards : {1, 2, 4}) {
    std::vector<int> owner(960, -1);
    for (int d = 0; d < shards; ++d) {
      ShardPlan plan(buckets, shards, d);
      int64_t expect_offset = 0;
      for (size_t b = 0; b < buckets.size(); ++b) {
        const FlatRange c = plan.owned_chunk(b);
        EXPECT_EQ(c.size(), buckets[b].size() / shards);
        EXPECT_EQ(plan.shard_offset(b), expect_offset);
        expect_offset += c.size();
        for (int64_t i = c.begin; i < c.end; ++i) {
          EXPECT_EQ(owner[i], -1) << "element " << i << " owned twice";
          owner[i] = d;
        }
      }
      EXPECT_EQ(plan.shard_numel(), expect_offset);
      EXPECT_EQ(plan.shard_numel() * shards, 128 + 512 + 256);
    }
    for (int64_t i = 0; i < 960; ++i) EXPECT_EQ(owner[i] >= 0, i < 640 || i >= 704) << i;
  }
}

TEST(ShardPlan, OwnedPiecesOfARangeMatchTheChunks) {
  const std::vector<FlatRange> buckets = {{0, 256}, {256, 768}};
  ShardPlan plan(buckets, 4, 1);  // owns [64, 128) and [384, 512)
  const auto pieces = plan.owned_pieces(FlatRange{100, 400});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].flat_begin, 100);
  EXPECT_EQ(pieces[0].flat_end, 128);
  EXPECT_EQ(pieces[0].shard_offset, 36);
  EXPECT_EQ(pieces[1].flat_begin, 384);
  EXPECT_EQ(pieces[1].flat_end, 400);
  EXPECT_EQ(pieces[1].shard_offset, 64);
  EXPECT_TRUE(plan.owned_pieces(FlatRange{0, 64}).empty());
}

TEST(ShardPlan, RejectsBucketsThatDoNotSplitEvenly) {
  EXPECT_ANY_THROW(ShardPlan({{0, 130}}, 4, 0));
}

}  // namespace
}  // namespace trident
