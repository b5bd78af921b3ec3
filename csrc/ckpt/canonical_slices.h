// Moving between full canonical tensors and one TP rank's slice, through the shard rules
// of model/param_spec.h (canonical_index maps a local flat index to a canonical one).
//
// Two canonical forms exist for the word embedding:
//  * the padded form, spec.shape = [padded_vocab_size(tp), C]: what gpt2_param_specs(cfg, tp)
//    describes and what the model holds at that tp (rows >= vocab_size are zero);
//  * the stored form, [vocab_size, C]: what a canonical checkpoint (and HF) holds, so that a
//    tensor saved at tp=2 (padded to a multiple of 256) loads at tp=4 (multiple of 512).
// The *_stored functions read and write the stored form directly: padding rows of a slice
// read as 0 and are dropped on the way back. Every other parameter has one form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/param_spec.h"

namespace trident {

// A full host fp32 tensor (row-major), e.g. one canonical parameter.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const { return numel_of(shape); }
};
// Canonical (or Hugging Face) name -> tensor.
using TensorMap = std::map<std::string, HostTensor>;

std::vector<int64_t> shape_vec(const Shape& s);

// Rows of the stored form: spec.init_rows when the spec is vocab-padded, else shape[0].
int64_t stored_rows(const ParamSpec& spec);
Shape stored_shape(const ParamSpec& spec);
bool is_vocab_padded(const ParamSpec& spec);

// Full padded canonical (spec.shape) <-> TP rank's slice (local_shape(spec, tp)), any
// element size. Throws ConfigError for a bad tp / tp_rank.
void extract_local_bytes(const ParamSpec& spec, int tp, int tp_rank, const void* full, void* local, size_t elem);
void scatter_local_bytes(const ParamSpec& spec, int tp, int tp_rank, const void* local, void* full, size_t elem);

// fp32 versions.
void extract_local(const ParamSpec& spec, int tp, int tp_rank, const float* full, float* local);
void scatter_local(const ParamSpec& spec, int tp, int tp_rank, const float* local, float* full);
std::vector<float> extract_local(const ParamSpec& spec, int tp, int tp_rank, const std::vector<float>& full);

// Stored (unpadded) canonical <-> TP rank's slice. `stored` has stored_shape(spec).
void extract_local_stored(const ParamSpec& spec, int tp, int tp_rank, const float* stored, float* local);
void scatter_local_stored(const ParamSpec& spec, int tp, int tp_rank, const float* local, float* stored);
std::vector<float> extract_local_stored(const ParamSpec& spec, int tp, int tp_rank,
                                        const std::vector<float>& stored);
// Same, taking the stored tensor over: at tp 1 its buffer becomes the result (no copy).
std::vector<float> extract_local_stored(const ParamSpec& spec, int tp, int tp_rank, std::vector<float>&& stored);

// fp32 values -> their little-endian bytes as `dtype` (F32, F16 or BF16; rounding to nearest
// even), for files that store a tensor in the model's dtype.
std::vector<char> encode_as(const std::vector<float>& v, DType dtype);

// Row padding: [rows, cols] -> [padded_rows, cols] (new rows zero), and back (drops rows).
std::vector<float> pad_rows(const float* data, int64_t rows, int64_t cols, int64_t padded_rows);
std::vector<float> unpad_rows(const float* data, int64_t padded_rows, int64_t cols, int64_t rows);

}  // namespace trident
