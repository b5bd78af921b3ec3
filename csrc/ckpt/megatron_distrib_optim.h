// The parameter state of Megatron's distributed optimizer (--use-distributed-optimizer with
// --ckpt-format torch): distrib_optim.pt beside each rank's model_optim_rng.pt, which
// DistributedOptimizer.save_parameter_state writes on data-parallel rank 0. Internal to
// megatron_optimizer.cpp.
//
// Its layouts, by Megatron version (GBUF counts the model chunks' gradient buffers, one a chunk
// for GPT-2's single dtype; T is a flat fp32 tensor gathered over the data-parallel ranks):
//   {GBUF: {DTYPE: {'param' | 'exp_avg' | 'exp_avg_sq': T}}}                 the whole buffer (2023)
//   {'bucket_sizes' or 'per_bucket_numel'..., GBUF: {DTYPE: {KEY: [T per bucket]}}}  (to early 2024)
//   {'buckets_coalesced': True, GBUF: {(PARAM_DTYPE, GRAD_DTYPE): {KEY: T, 'numel_unpadded': n}}}
// A buffer holds its chunk's parameters in reverse named_parameters() order, in buckets: a list
// entry is one bucket with its end padding, a coalesced tensor the buckets one after the other
// without it. Where a parameter starts depends on the version (packed; from Megatron-core 0.8 at
// a multiple of 64 elements from its bucket's start), and so do the bucket boundaries (the
// bucket size, the shared embedding's bucket of its own, padding to the data-parallel size or
// lcm(dp, 128)). Rather than re-derive each version's rules, the reader finds each parameter
// where its fp32 master equals (fp32 models) or rounds to (16-bit) the stored parameter, trying
// in turn the places those rules give (ChunkSearch::candidate); a parameter that fits nowhere
// sends the search back to the previous one's next place. The moments lie where the master
// does. Megatron-core 0.8 to 0.13.0 could start the first stage's shared embedding before its
// own bucket (fixed in 0.13.1); such a layout is not read.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/megatron_optimizer.h"

namespace trident::megatron {

// A parameter of a model chunk as the search sees it: its name and shape (for errors), its
// element count and its stored values (flattened, as fp32).
struct BufferParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::function<std::vector<float>()> values;
};

// A flat piece of a chunk's buffer (a bucket, or the whole buffer): its element count and a
// reader of its fp32 masters [at, at + n).
struct BufferSegment {
  int64_t numel = 0;
  std::function<std::vector<float>(int64_t at, int64_t n)> masters;
};

struct BufferPlace {
  size_t segment = 0;
  int64_t at = 0;
};

// Where each of `params` (a model chunk's parameters in named_parameters() order) lies in
// `segments` (its buffer's, in order), found as above: places[i] is params[i]'s. `dp` is the
// run's data-parallel size (0: unknown). Throws IoError starting with `where` when a parameter
// fits nowhere.
std::vector<BufferPlace> place_parameters(const std::vector<BufferParam>& params,
                                          const std::vector<BufferSegment>& segments, DType dtype, int64_t dp,
                                          const std::string& where);

// One flat piece of a chunk's buffer as distrib_optim.pt saves it (a list entry, one bucket; or
// the whole buffer): its three states' tensors (param, exp_avg, exp_avg_sq) and element count.
struct SavedSegment {
  std::array<const TorchTensor*, 3> t{};
  int64_t numel = 0;
};

// The buffers of `file`'s object (distrib_optim.pt's; torch_dist's dp_zero_gather_scatter saves
// the same as an object): `buffers` of them, one per model chunk of the rank that holds
// parameters (Megatron builds no buffer for a chunk without, and numbers the others in turn).
// Throws IoError naming the file.
std::vector<std::vector<SavedSegment>> saved_buffers(const TorchFile& file, size_t buffers);

// State k's elements [at, at + n) of a segment of `file`, as fp32.
std::vector<float> read_segment_range(const TorchFile& file, const SavedSegment& s, int k, int64_t at, int64_t n);

// Fills out.params for every parameter of `chunks` (one rank folder's model chunks, each in
// named_parameters() order) from `file`, a distrib_optim.pt, whose model is stored as `dtype`;
// `dp` is the run's data-parallel size (0: unknown), which some versions padded to.
// The states are views into the file's buffers (kept in out.views; `file` must outlive them).
// Throws IoError naming the file for a layout in which a parameter cannot be found.
void read_distributed_state(const TorchFile& file, const std::vector<std::vector<ModelParam>>& chunks, DType dtype,
                            int64_t dp, OptimizerState& out);

}  // namespace trident::megatron
