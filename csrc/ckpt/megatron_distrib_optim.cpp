#include "ckpt/megatron_distrib_optim.h"

#include <array>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "ckpt/safetensors.h"
#include "core/error.h"

namespace trident::megatron {

namespace {

using pickle::Kind;
using pickle::Value;

constexpr const char* kKeys[3] = {"param", "exp_avg", "exp_avg_sq"};
constexpr int64_t kParamAlignment = 64;  // Megatron-core's param start alignment (elements)

// Where the search stands in a chunk's buffer: the segment, the current bucket's start in it, and
// the next free element.
struct Position {
  size_t seg = 0;
  int64_t bucket = 0, at = 0;
};

TorchTensor view(const TorchTensor& flat, int64_t at, const std::vector<int64_t>& shape) {
  TorchTensor v = flat;
  v.offset = flat.offset + at;
  v.shape = shape;
  v.stride.assign(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) v.stride[d - 1] = v.stride[d] * shape[d];
  return v;
}

class ChunkSearch {
 public:
  ChunkSearch(const std::vector<BufferParam>& params, const std::vector<BufferSegment>& segments, DType dtype,
              int64_t dp, const std::string& where)
      : segments_(segments), dtype_(dtype), dp_(dp), where_(where), prefixes_(params.size()) {
    for (size_t i = params.size(); i-- > 0;) order_.push_back(&params[i]);  // the buffer's order
  }

  // Each parameter's place (in order_'s order), by a depth-first search over the candidates.
  // Where a parameter fits nowhere after a given place of the one before, that is remembered,
  // so that a layout no candidate explains fails in polynomial time.
  std::vector<Position> run() {
    struct Frame {
      Position before;
      int next = 0;
    };
    using State = std::tuple<size_t, size_t, int64_t, int64_t>;  // parameter, its `before`
    const auto state = [](size_t i, const Position& p) { return State{i, p.seg, p.bucket, p.at}; };
    std::set<State> failed;
    std::vector<Frame> stack{{Position{}, 0}};
    std::vector<Position> placed;
    size_t deepest = 0;  // the first parameter not placed at the search's deepest
    const size_t limit = 64 * order_.size() * order_.size() + 1024;
    size_t tries = 0;
    while (placed.size() < order_.size()) {
      Frame& f = stack.back();
      const size_t i = placed.size();
      std::optional<Position> found;
      while (!found && f.next < kCandidates) {
        const std::optional<Position> c = candidate(f.before, f.next++);
        if (!c) continue;
        if (++tries > limit)
          throw IoError(where_ + ": the search for the parameters' places gave up after " + std::to_string(limit) +
                        " tries (the deepest it came: parameter '" + order_[std::min(deepest, order_.size() - 1)]->name +
                        "')");
        const Position after{c->seg, c->bucket, c->at + order_[i]->numel};
        if ((i + 1 == order_.size() || !failed.count(state(i + 1, after))) && matches(i, *c)) found = c;
      }
      if (found) {
        placed.push_back(*found);
        deepest = std::max(deepest, placed.size());
        if (placed.size() < order_.size())
          stack.push_back({Position{found->seg, found->bucket, found->at + order_[i]->numel}, 0});
        continue;
      }
      failed.insert(state(i, f.before));
      stack.pop_back();
      if (stack.empty()) throw nowhere(deepest);
      placed.pop_back();
    }
    return placed;
  }

 private:
  static constexpr int kCandidates = 5;
  // Candidate k after `p`: right there; the bucket's next 64-element boundary (Megatron-core 0.8
  // on); a new bucket right there (coalesced buckets); a new bucket at the bucket's next multiple
  // of lcm(dp, 128) (Megatron-core 0.8 to 0.13.0 started the shared embedding there, and counted
  // the padding in the bucket before); the next segment.
  std::optional<Position> candidate(const Position& p, int k) const {
    const auto up = [&](int64_t m) { return m > 0 ? p.bucket + (p.at - p.bucket + m - 1) / m * m : p.at; };
    switch (k) {
      case 0: return p;
      case 1: {
        const int64_t aligned = up(kParamAlignment);
        if (aligned == p.at) return std::nullopt;
        return Position{p.seg, p.bucket, aligned};
      }
      case 2:
        if (p.bucket == p.at) return std::nullopt;
        return Position{p.seg, p.at, p.at};
      case 3: {
        const int64_t padded = up(dp_ > 0 ? std::lcm(dp_, int64_t{128}) : 0);
        if (padded == p.at) return std::nullopt;
        return Position{p.seg, padded, padded};
      }
      case 4:
        if (p.seg + 1 >= segments_.size()) return std::nullopt;
        return Position{p.seg + 1, 0, 0};
    }
    return std::nullopt;
  }

  IoError nowhere(size_t i) const {
    const BufferParam& p = *order_[std::min(i, order_.size() - 1)];
    return IoError(where_ + ": parameter '" + p.name + "' (" + shape_str(p.shape) + ") is nowhere in the "
                   "buffer where its master weight matches it: not a layout of Megatron's distributed optimizer "
                   "that trident reads, or not this model's optimizer");
  }

  // Whether the master at `at` is parameter i's: its first elements first (kept for every
  // parameter), then all of it.
  bool matches(size_t i, const Position& at) {
    const BufferParam& p = *order_[i];
    const BufferSegment& s = segments_[at.seg];
    if (at.at + p.numel > s.numel) return false;
    const int64_t head = std::min<int64_t>(p.numel, kPrefix);
    std::vector<float>& prefix = prefixes_[i];
    if (prefix.empty()) {
      prefix = p.values();
      prefix.resize(static_cast<size_t>(head));
    }
    if (master_mismatch(s.masters(at.at, head), prefix, dtype_) >= 0) return false;
    if (head == p.numel) return true;
    return master_mismatch(s.masters(at.at, p.numel), p.values(), dtype_) < 0;
  }

  static constexpr int64_t kPrefix = 256;
  const std::vector<BufferSegment>& segments_;
  DType dtype_;
  int64_t dp_;  // the data-parallel size (0: unknown)
  std::string where_;
  std::vector<const BufferParam*> order_;
  std::vector<std::vector<float>> prefixes_;  // the parameters' first kPrefix values, read once
};

// A chunk's buffer: its one dtype's three tensors, each whole or a list of buckets.
std::vector<SavedSegment> chunk_segments(const Value& gbuf, const std::string& where) {
  if (gbuf.kind != Kind::Dict || gbuf.entries.size() != 1)
    throw IoError(where + ": holds " +
                  (gbuf.kind == Kind::Dict ? std::to_string(gbuf.entries.size()) + " dtypes' buffers"
                                           : gbuf.describe()) +
                  ", not one dtype's (trident's GPT-2 has parameters of one dtype)");
  const Value& d = *gbuf.entries[0].second;
  std::vector<SavedSegment> out;
  for (int k = 0; k < 3; ++k) {
    const Value* v = d.get(kKeys[k]);
    if (!v) throw IoError(where + ": no '" + kKeys[k] + "' buffer");
    std::vector<const Value*> items;
    if (v->kind == Kind::List) {
      for (const auto& item : v->items) items.push_back(item.get());
    } else {
      items.push_back(v);
    }
    if (k == 0) out.resize(items.size());
    if (items.size() != out.size())
      throw IoError(where + ": '" + kKeys[k] + "' has " + std::to_string(items.size()) + " buckets, 'param' " +
                    std::to_string(out.size()));
    for (size_t b = 0; b < items.size(); ++b) {
      const TorchTensor* t = TorchFile::tensor(*items[b]);
      if (!t || t->shape.size() != 1 || (t->shape[0] > 1 && t->stride[0] != 1))
        throw IoError(where + ": '" + kKeys[k] + "' bucket " + std::to_string(b) + " is " +
                      (t ? "of shape " + shape_str(t->shape) : items[b]->describe()) + ", not a flat tensor");
      if (k == 0) out[b].numel = t->shape[0];
      else if (t->shape[0] != out[b].numel)
        throw IoError(where + ": '" + kKeys[k] + "' bucket " + std::to_string(b) + " holds " +
                      std::to_string(t->shape[0]) + " elements, 'param' " + std::to_string(out[b].numel));
      out[b].t[k] = t;
    }
  }
  return out;
}

}  // namespace

std::vector<BufferPlace> place_parameters(const std::vector<BufferParam>& params,
                                          const std::vector<BufferSegment>& segments, DType dtype, int64_t dp,
                                          const std::string& where) {
  std::vector<BufferPlace> out(params.size());
  if (params.empty()) return out;
  const std::vector<Position> placed = ChunkSearch(params, segments, dtype, dp, where).run();
  for (size_t i = 0; i < placed.size(); ++i) out[params.size() - 1 - i] = {placed[i].seg, placed[i].at};
  return out;
}

std::vector<std::vector<SavedSegment>> saved_buffers(const TorchFile& file, size_t buffers) {
  const Value* top = &file.root();
  // A ChainedOptimizer's one; a sharded object's datum.
  if (top->kind == Kind::List && top->items.size() == 1) top = top->items[0].get();
  const Value& root = *top;
  if (root.kind != Kind::Dict)
    throw IoError(file.path() + ": holds " + root.describe() + ", not the optimizer's state");
  std::vector<const Value*> gbufs(buffers, nullptr);
  for (const auto& [k, v] : root.entries) {
    if (k->kind != Kind::Int) continue;  // 'buckets_coalesced', 'per_bucket_numel', ...
    if (k->integer < 0 || k->integer >= static_cast<int64_t>(buffers))
      throw IoError(file.path() + ": buffer " + std::to_string(k->integer) + ", but the rank has " +
                    std::to_string(buffers) + " model chunk(s) with parameters");
    gbufs[static_cast<size_t>(k->integer)] = v.get();
  }
  std::vector<std::vector<SavedSegment>> out;
  for (size_t c = 0; c < buffers; ++c) {
    const std::string where = file.path() + ": buffer " + std::to_string(c);
    if (!gbufs[c]) throw IoError(where + ": missing");
    out.push_back(chunk_segments(*gbufs[c], where));
  }
  return out;
}

std::vector<float> read_segment_range(const TorchFile& file, const SavedSegment& s, int k, int64_t at, int64_t n) {
  return file.read_f32(view(*s.t[static_cast<size_t>(k)], at, {n}), std::string("'") + kKeys[k] + "' buffer");
}

void read_distributed_state(const TorchFile& file, const std::vector<std::vector<ModelParam>>& chunks, DType dtype,
                            int64_t dp, OptimizerState& out) {
  std::vector<size_t> holding;  // the chunks with parameters, whose buffers Megatron numbers in turn
  for (size_t c = 0; c < chunks.size(); ++c)
    if (!chunks[c].empty()) holding.push_back(c);
  const std::vector<std::vector<SavedSegment>> buffers = saved_buffers(file, holding.size());
  for (size_t b = 0; b < holding.size(); ++b) {
    const size_t c = holding[b];
    const std::vector<SavedSegment>& segments = buffers[b];
    std::vector<BufferSegment> flat;
    for (const SavedSegment& s : segments)
      flat.push_back({s.numel, [&file, &s](int64_t at, int64_t n) { return read_segment_range(file, s, 0, at, n); }});
    std::vector<BufferParam> params;
    for (const ModelParam& p : chunks[c])
      params.push_back({p.key, p.tensor->shape, p.tensor->numel(),
                        [&p] { return p.shard->file->read_f32(*p.tensor, "'" + p.key + "'"); }});
    const std::vector<BufferPlace> places =
        place_parameters(params, flat, dtype, dp, file.path() + ": buffer " + std::to_string(b));
    for (size_t i = 0; i < places.size(); ++i) {
      const ModelParam& p = chunks[c][i];
      const SavedSegment& s = segments[places[i].segment];
      ParamState ps;
      ps.file = &file;
      const Value** slots[3] = {&ps.master, &ps.exp_avg, &ps.exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        pickle::Ref v = pickle::make(Kind::External);
        v->external = view(*s.t[k], places[i].at, p.tensor->shape);
        *slots[k] = v.get();
        out.views.push_back(std::move(v));
      }
      out.params[{p.shard, p.key}] = ps;
    }
  }
  out.moments = true;
}

}  // namespace trident::megatron
