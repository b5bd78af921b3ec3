// ZeRO sharding of flat parameter/gradient buffers over the data-parallel ranks, as index
// arithmetic only (no buffers, no communication).
//
// The flat buffers are cut into buckets (contiguous ranges; each a multiple of the shard
// count long). Like Megatron's distributed optimizer, every bucket is split into `shards`
// equal chunks and rank d owns chunk d of every bucket, so a bucket's gradients can be
// reduce-scattered, and its parameters all-gathered, as soon as that bucket is ready. The
// owned chunks, concatenated in bucket order, form the rank's compact shard, which holds
// its fp32 master weights, Adam moments and reduced gradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trident {

struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// A piece of an owned chunk: flat range and where it starts in the compact shard.
struct ShardPiece {
  int64_t flat_begin = 0, flat_end = 0, shard_offset = 0;
  int64_t size() const { return flat_end - flat_begin; }
};

class ShardPlan {
 public:
  // `shards` == 1: this rank owns everything and the shard is the flat layout itself when
  // the buckets tile the buffer from 0.
  ShardPlan(std::vector<FlatRange> buckets, int shards, int shard);

  const std::vector<FlatRange>& buckets() const { return buckets_; }
  int shards() const { return shards_; }
  int shard() const { return shard_; }
  FlatRange owned_chunk(size_t bucket) const;
  int64_t shard_offset(size_t bucket) const { return offsets_[bucket]; }
  int64_t shard_numel() const { return numel_; }
  // The parts of flat range `r` (e.g. one parameter) this rank owns.
  std::vector<ShardPiece> owned_pieces(FlatRange r) const;

 private:
  std::vector<FlatRange> buckets_;
  std::vector<int64_t> offsets_;
  int shards_, shard_;
  int64_t numel_ = 0;
};

}  // namespace trident
