#include "model/param_store.h"

#include <algorithm>

#include "core/error.h"
#include "core/philox.h"

namespace trident {

ParamStore::ParamStore(Backend& backend, const std::vector<ParamSpec>& specs, int tp, int tp_rank,
                       DType param_dtype, DType grad_dtype,
                       const std::function<bool(const ParamSpec&)>& owned, int64_t group_multiple,
                       int layer_grad_slots)
    : backend_(backend), tp_(tp), tp_rank_(tp_rank), grad_slots_(layer_grad_slots) {
  TRIDENT_CHECK(group_multiple > 0 && group_multiple % 64 == 0, "group multiple must be a multiple of 64");
  auto close_group = [&] {
    if (groups_.empty()) return;
    total_ = (total_ + group_multiple - 1) / group_multiple * group_multiple;
    groups_.back().end = total_;
  };
  for (const ParamSpec& s : specs) {
    if (!owned(s)) continue;
    if (groups_.empty() || groups_.back().layer != s.layer) {
      close_group();
      groups_.push_back(ParamGroup{s.layer, total_, total_});
    }
    LocalParam p;
    p.spec = s;
    p.shape = local_shape(s, tp);
    p.offset = total_;
    p.group = groups_.size() - 1;
    // Keep every tensor 64-element aligned inside the flat buffer (vector loads, GEMM).
    total_ += (p.numel() + 63) / 64 * 64;
    index_[s.name] = params_.size();
    params_.push_back(p);
  }
  close_group();
  flat_params_ = backend_.zeros({total_}, param_dtype);
  // Gradient storage: the same layout, or the non-layer groups followed by the slots.
  int64_t grad_total = 0, slot_size = 0;
  for (ParamGroup& g : groups_) {
    if (grad_slots_ > 0 && g.layer >= 0) {
      slot_size = std::max(slot_size, g.size());
      continue;
    }
    g.grad_begin = grad_slots_ > 0 ? grad_total : g.begin;
    grad_total += g.size();
  }
  if (grad_slots_ > 0) {
    for (ParamGroup& g : groups_)
      if (g.layer >= 0) g.grad_begin = grad_total + (g.layer % grad_slots_) * slot_size;
    grad_total += grad_slots_ * slot_size;
  } else {
    grad_total = total_;
  }
  flat_grads_ = backend_.zeros({grad_total}, grad_dtype);
}

Tensor ParamStore::grad(const LocalParam& p) const {
  const ParamGroup& g = groups_[p.group];
  return flat_grads_.t().flat_slice(g.grad_begin + (p.offset - g.begin), p.numel()).view(p.shape);
}

Tensor ParamStore::group_grads(size_t g) const {
  return flat_grads_.t().flat_slice(groups_[g].grad_begin, groups_[g].size());
}

const LocalParam& ParamStore::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw InternalError("no local parameter named " + name);
  return params_[it->second];
}

void ParamStore::init(uint64_t seed) {
  std::vector<float> host;
  for (const LocalParam& p : params_) {
    host.assign(static_cast<size_t>(p.numel()), 0.0f);
    const ParamSpec& s = p.spec;
    const int64_t row_len = s.shape.ndim == 2 ? s.shape.dims[1] : 1;
    const uint32_t name_hash = fnv1a32(s.name.c_str());
    for (int64_t i = 0; i < p.numel(); ++i) {
      const int64_t g = canonical_index(s, tp_, tp_rank_, i);
      if (s.init_rows >= 0 && g / row_len >= s.init_rows) continue;  // vocab padding stays 0
      switch (s.init) {
        case InitKind::Normal: host[i] = s.std * init_normal(seed, name_hash, static_cast<uint64_t>(g)); break;
        case InitKind::Ones: host[i] = 1.0f; break;
        case InitKind::Zeros: break;
      }
    }
    Tensor dst = param(p);
    if (dst.dtype == DType::F32) {
      backend_.copy_from_host(dst, host.data());
    } else {
      Buffer tmp = backend_.empty(p.shape, DType::F32);
      backend_.copy_from_host(tmp, host.data());
      backend_.cast(tmp, dst);
    }
  }
}

void ParamStore::zero_grads() { backend_.fill(flat_grads_, 0.0f); }

}  // namespace trident
