#include "parallel/zero_shard.h"

#include <algorithm>

#include "core/error.h"

namespace trident {

ShardPlan::ShardPlan(std::vector<FlatRange> buckets, int shards, int shard)
    : buckets_(std::move(buckets)), shards_(shards), shard_(shard) {
  TRIDENT_CHECK(shards >= 1 && shard >= 0 && shard < shards, "shard index");
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const FlatRange& b = buckets_[i];
    TRIDENT_CHECK(b.size() >= 0 && b.size() % shards == 0, "bucket size must be a multiple of the shard count");
    TRIDENT_CHECK(i == 0 || b.begin >= buckets_[i - 1].end, "buckets must be ordered and disjoint");
    offsets_.push_back(numel_);
    numel_ += b.size() / shards;
  }
}

FlatRange ShardPlan::owned_chunk(size_t bucket) const {
  const FlatRange& b = buckets_[bucket];
  const int64_t chunk = b.size() / shards_;
  return FlatRange{b.begin + shard_ * chunk, b.begin + (shard_ + 1) * chunk};
}

std::vector<ShardPiece> ShardPlan::owned_pieces(FlatRange r) const {
  std::vector<ShardPiece> pieces;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const FlatRange c = owned_chunk(i);
    const int64_t lo = std::max(c.begin, r.begin), hi = std::min(c.end, r.end);
    if (lo < hi) pieces.push_back(ShardPiece{lo, hi, offsets_[i] + (lo - c.begin)});
  }
  return pieces;
}

}  // namespace trident
