#include "ckpt/canonical_slices.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace trident {

namespace {

void check_rank(const ParamSpec& spec, int tp, int tp_rank) {
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
    throw ConfigError(spec.name + ": bad tensor-parallel rank " + std::to_string(tp_rank) + " of " +
                      std::to_string(tp));
  const Shape s = spec.shape;
  bool ok = true;
  switch (spec.shard) {
    case ShardRule::Replicated: break;
    case ShardRule::SplitRows: ok = s.dims[0] % tp == 0; break;
    case ShardRule::SplitCols: ok = s.ndim == 2 && s.dims[1] % tp == 0; break;
    case ShardRule::SplitQkvHeads: ok = s.dims[0] % 3 == 0 && (s.dims[0] / 3) % tp == 0; break;
  }
  if (!ok) throw ConfigError(spec.name + ": shape " + s.str() + " cannot be split " + std::to_string(tp) + " ways");
}

// Calls fn(local_begin, canonical_begin, count) for runs of elements that are contiguous in
// both layouts. A 2-D local row is one run (each shard rule keeps a local row inside one
// canonical row, contiguous: checked at both ends); 1-D tensors go element by element.
template <typename Fn>
void for_each_run(const ParamSpec& spec, int tp, int tp_rank, Fn&& fn) {
  check_rank(spec, tp, tp_rank);
  const Shape ls = local_shape(spec, tp);
  const int64_t n = ls.numel();
  if (ls.ndim >= 2) {
    const int64_t run = ls.dims[ls.ndim - 1];
    for (int64_t i = 0; i < n; i += run) {
      const int64_t c = canonical_index(spec, tp, tp_rank, i);
      TRIDENT_CHECK(canonical_index(spec, tp, tp_rank, i + run - 1) == c + run - 1, spec.name,
                    ": local row not contiguous in the canonical layout");
      fn(i, c, run);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i, canonical_index(spec, tp, tp_rank, i), int64_t{1});
  }
}

int64_t row_len(const ParamSpec& spec) {
  int64_t r = 1;
  for (int d = 1; d < spec.shape.ndim; ++d) r *= spec.shape.dims[d];
  return r;
}

}  // namespace

std::vector<int64_t> shape_vec(const Shape& s) { return std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.ndim); }

bool is_vocab_padded(const ParamSpec& spec) { return spec.init_rows >= 0; }

int64_t stored_rows(const ParamSpec& spec) { return is_vocab_padded(spec) ? spec.init_rows : spec.shape.dims[0]; }

Shape stored_shape(const ParamSpec& spec) {
  Shape s = spec.shape;
  s.dims[0] = stored_rows(spec);
  return s;
}

void extract_local_bytes(const ParamSpec& spec, int tp, int tp_rank, const void* full, void* local, size_t elem) {
  const char* src = static_cast<const char*>(full);
  char* dst = static_cast<char*>(local);
  for_each_run(spec, tp, tp_rank, [&](int64_t l, int64_t c, int64_t n) {
    std::memcpy(dst + l * elem, src + c * elem, static_cast<size_t>(n) * elem);
  });
}

void scatter_local_bytes(const ParamSpec& spec, int tp, int tp_rank, const void* local, void* full, size_t elem) {
  const char* src = static_cast<const char*>(local);
  char* dst = static_cast<char*>(full);
  for_each_run(spec, tp, tp_rank, [&](int64_t l, int64_t c, int64_t n) {
    std::memcpy(dst + c * elem, src + l * elem, static_cast<size_t>(n) * elem);
  });
}

void extract_local(const ParamSpec& spec, int tp, int tp_rank, const float* full, float* local) {
  extract_local_bytes(spec, tp, tp_rank, full, local, sizeof(float));
}
void scatter_local(const ParamSpec& spec, int tp, int tp_rank, const float* local, float* full) {
  scatter_local_bytes(spec, tp, tp_rank, local, full, sizeof(float));
}

std::vector<float> extract_local(const ParamSpec& spec, int tp, int tp_rank, const std::vector<float>& full) {
  check_rank(spec, tp, tp_rank);
  if (static_cast<int64_t>(full.size()) != spec.shape.numel())
    throw ConfigError(spec.name + ": full tensor has " + std::to_string(full.size()) + " elements, expected " +
                      std::to_string(spec.shape.numel()) + " for " + spec.shape.str());
  std::vector<float> out(static_cast<size_t>(local_shape(spec, tp).numel()));
  extract_local(spec, tp, tp_rank, full.data(), out.data());
  return out;
}

void extract_local_stored(const ParamSpec& spec, int tp, int tp_rank, const float* stored, float* local) {
  const int64_t limit = stored_rows(spec) * row_len(spec);  // canonical flat indices below this exist
  for_each_run(spec, tp, tp_rank, [&](int64_t l, int64_t c, int64_t n) {
    const int64_t have = std::clamp<int64_t>(limit - c, 0, n);  // the rest of the run is padding
    if (have > 0) std::memcpy(local + l, stored + c, static_cast<size_t>(have) * sizeof(float));
    std::fill(local + l + have, local + l + n, 0.0f);
  });
}

void scatter_local_stored(const ParamSpec& spec, int tp, int tp_rank, const float* local, float* stored) {
  const int64_t limit = stored_rows(spec) * row_len(spec);
  for_each_run(spec, tp, tp_rank, [&](int64_t l, int64_t c, int64_t n) {
    for (int64_t k = 0; k < n; ++k)
      if (c + k < limit) stored[c + k] = local[l + k];
  });
}

std::vector<float> extract_local_stored(const ParamSpec& spec, int tp, int tp_rank, const std::vector<float>& stored) {
  check_rank(spec, tp, tp_rank);
  if (static_cast<int64_t>(stored.size()) != stored_shape(spec).numel())
    throw ConfigError(spec.name + ": stored tensor has " + std::to_string(stored.size()) + " elements, expected " +
                      std::to_string(stored_shape(spec).numel()) + " for " + stored_shape(spec).str());
  std::vector<float> out(static_cast<size_t>(local_shape(spec, tp).numel()));
  extract_local_stored(spec, tp, tp_rank, stored.data(), out.data());
  return out;
}

std::vector<float> extract_local_stored(const ParamSpec& spec, int tp, int tp_rank, std::vector<float>&& stored) {
  // At tp 1 the local slice is the padded canonical tensor itself (canonical_index is the
  // identity for every shard rule): reuse the buffer, appending the zero padding rows.
  if (tp != 1) return extract_local_stored(spec, tp, tp_rank, static_cast<const std::vector<float>&>(stored));
  check_rank(spec, tp, tp_rank);
  if (static_cast<int64_t>(stored.size()) != stored_shape(spec).numel())
    throw ConfigError(spec.name + ": stored tensor has " + std::to_string(stored.size()) + " elements, expected " +
                      std::to_string(stored_shape(spec).numel()) + " for " + stored_shape(spec).str());
  stored.resize(static_cast<size_t>(local_shape(spec, tp).numel()), 0.0f);
  return std::move(stored);
}

std::vector<float> pad_rows(const float* data, int64_t rows, int64_t cols, int64_t padded_rows) {
  if (padded_rows < rows)
    throw ConfigError("pad_rows: " + std::to_string(padded_rows) + " padded rows < " + std::to_string(rows) + " rows");
  std::vector<float> out(static_cast<size_t>(padded_rows * cols), 0.0f);
  if (rows * cols != 0) std::memcpy(out.data(), data, static_cast<size_t>(rows * cols) * sizeof(float));
  return out;
}

std::vector<float> unpad_rows(const float* data, int64_t padded_rows, int64_t cols, int64_t rows) {
  if (padded_rows < rows)
    throw ConfigError("unpad_rows: " + std::to_string(padded_rows) + " padded rows < " + std::to_string(rows) + " rows");
  return std::vector<float>(data, data + rows * cols);
}

std::vector<char> encode_as(const std::vector<float>& v, DType dtype) {
  TRIDENT_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16, "encode_as: ", dtype_name(dtype));
  std::vector<char> out(v.size() * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = dtype == DType::F16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

}  // namespace trident
