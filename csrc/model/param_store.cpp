#include "model/param_store.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/philox.h"
#include "model/param_init.h"

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

namespace {

// Values of elements [begin, end) of TP rank `tp_rank`'s slice of `s`. Walks the slice in
// runs of consecutive canonical indices, so there is no per-element index arithmetic.
void init_local_range(const ParamSpec& s, int tp, int tp_rank, uint64_t seed, uint32_t name_hash, int64_t begin,
                      int64_t end, float* out) {
  const int64_t row_len = s.shape.ndim == 2 ? s.shape.dims[1] : 1;
  // Canonical indices at or past `limit` are vocabulary padding rows and stay 0.
  const int64_t limit = s.init_rows >= 0 ? s.init_rows * row_len : INT64_MAX;
  for (int64_t i = begin; i < end;) {
    const int64_t g = canonical_index(s, tp, tp_rank, i);
    const int64_t len = std::min(canonical_run(s, tp, i), end - i);
    const int64_t valid = std::clamp<int64_t>(limit - g, 0, len);
    float* o = out + (i - begin);
    switch (s.init) {
      case InitKind::Normal: init_normal_range(seed, name_hash, static_cast<uint64_t>(g), valid, s.std, o); break;
      case InitKind::Ones: std::fill(o, o + valid, 1.0f); break;
      case InitKind::Zeros: std::fill(o, o + valid, 0.0f); break;
    }
    std::fill(o + valid, o + len, 0.0f);
    i += len;
  }
}

}  // namespace

void ParamStore::init(uint64_t seed) {
  // Each element is a pure function of (seed, name, canonical index), so the work is split
  // into fixed chunks over threads without changing a bit (invariant 2). One parameter at a
  // time: the host buffer is at most the largest tensor. An fp32 tensor in host memory (the
  // CPU backend) is written in place, with no staging copy.
  constexpr int64_t kChunk = int64_t{1} << 16;
  std::vector<float> host;
  for (const LocalParam& p : params_) {
    const ParamSpec& s = p.spec;
    const int64_t n = p.numel();
    const Tensor dst = param(p);
    const bool in_place = dst.device == Device::Cpu && dst.dtype == DType::F32;
    // A dry run allocates what a real one does (the fp32 staging below), values aside.
    const bool generate = !backend_.dry_run();
    if (!in_place && generate) host.resize(static_cast<size_t>(n));
    float* out = in_place ? dst.ptr<float>() : host.data();
    const uint32_t name_hash = fnv1a32(s.name.c_str());
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int tp = tp_, tp_rank = tp_rank_;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
    for (int64_t c = 0; c < (generate ? chunks : 0); ++c) {
      const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      init_local_range(s, tp, tp_rank, seed, name_hash, begin, end, out + begin);
    }
    if (in_place) continue;
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
