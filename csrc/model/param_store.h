// ParamStore: this rank's slices of the canonical parameters, packed into one flat
// parameter buffer and one flat gradient buffer with the same layout. Flat buffers make
// the optimizer, gradient reductions and ZeRO sharding single contiguous operations.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "model/param_spec.h"

namespace trident {

struct LocalParam {
  ParamSpec spec;
  Shape shape;         // this rank's slice
  int64_t offset = 0;  // element offset in the flat parameter buffer
  size_t group = 0;    // index of its ParamGroup
  int64_t numel() const { return shape.numel(); }
};

// A run of consecutive parameters of one transformer layer (or of the non-layer
// parameters: embeddings, final LayerNorm), padded at its end so that its size is a
// multiple of the group multiple. Groups are the buckets of gradient reduction and ZeRO
// sharding; padding elements stay zero.
struct ParamGroup {
  int layer = -1;
  int64_t begin = 0, end = 0;  // element range in the flat parameter buffer
  int64_t grad_begin = 0;      // where the group's gradients start in the gradient buffer
  int64_t size() const { return end - begin; }
};

class ParamStore {
 public:
  // Keeps the specs for which `owned` is true, sliced for (tp, tp_rank). Every group's
  // size is a multiple of `group_multiple` (itself a multiple of 64).
  //
  // Gradients mirror the parameters' flat layout, except with `layer_grad_slots` > 0
  // (ZeRO-2): then transformer layer l's gradients live in slot l % slots, each the size
  // of the largest layer group, because the optimizer reduces a layer's gradients into its
  // shard (and zeroes them) as soon as backward has produced them; only the non-layer
  // groups keep their own gradient storage.
  ParamStore(Backend& backend, const std::vector<ParamSpec>& specs, int tp, int tp_rank,
             DType param_dtype, DType grad_dtype, const std::function<bool(const ParamSpec&)>& owned,
             int64_t group_multiple = 64, int layer_grad_slots = 0);

  // Layout-independent init (invariant 2): element value depends only on
  // (seed, name, canonical index); padding rows are zero.
  void init(uint64_t seed);
  void zero_grads();

  const std::vector<LocalParam>& list() const { return params_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const LocalParam& find(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  Tensor param(const std::string& name) const { return view(flat_params_, find(name)); }
  Tensor grad(const std::string& name) const { return grad(find(name)); }
  Tensor param(const LocalParam& p) const { return view(flat_params_, p); }
  Tensor grad(const LocalParam& p) const;
  // The gradient storage of group `g` (flat, the group's size).
  Tensor group_grads(size_t g) const;
  const Tensor& flat_params() const { return flat_params_.t(); }
  // All gradient storage: the flat layout of flat_params() unless layer slots are used.
  const Tensor& flat_grads() const { return flat_grads_.t(); }
  bool layer_grads_in_slots() const { return grad_slots_ > 0; }
  int64_t numel() const { return total_; }
  int tp() const { return tp_; }
  Backend& backend() const { return backend_; }
  int tp_rank() const { return tp_rank_; }

 private:
  static Tensor view(const Buffer& flat, const LocalParam& p) {
    return flat.t().flat_slice(p.offset, p.numel()).view(p.shape);
  }
  Backend& backend_;
  int tp_, tp_rank_;
  std::vector<LocalParam> params_;
  std::vector<ParamGroup> groups_;
  int grad_slots_ = 0;
  std::unordered_map<std::string, size_t> index_;
  int64_t total_ = 0;
  Buffer flat_params_, flat_grads_;
};

}  // namespace trident
