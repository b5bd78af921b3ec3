// Multi-tensor apply: one launch works on many tensors, so an optimizer step over a few
// hundred parameter pieces costs a handful of launches instead of one (or two) per piece.
// Each tensor is cut into chunks of `chunk` elements; one block handles one chunk. A launch
// holds at most kMaxTensors tensors and kMaxBlocks chunks, described by a table passed by
// value as a kernel parameter (each user sizes its table against the parameter limit:
// 4 KB before CUDA 12.1, 32 KB since; see cuda_adamw.cu). A tensor larger than what fits is
// continued in the next launch.
#pragma once

#include <cstdint>
#include <vector>

namespace trident::cuda {

// Which chunk of which tensor each block of one launch works on. Tensor numbers are
// positions in the launch's own tensor list.
template <int kMaxBlocks>
struct ChunkMap {
  unsigned char tensor[kMaxBlocks];
  int32_t chunk[kMaxBlocks];
};

// Splits tensors of `sizes` elements (empty ones skipped) into launches and calls
// launch(tensors, map, blocks) for each: `tensors` are indices into `sizes`, `map` gives
// each of the `blocks` blocks its tensor (position in `tensors`) and chunk. Every tensor of
// a launch has the same launch_key(i) (e.g. its dtype): a different key starts a new launch.
template <int kMaxTensors, int kMaxBlocks, typename LaunchKey, typename Launch>
void for_each_chunk_launch(const std::vector<int64_t>& sizes, int64_t chunk, LaunchKey launch_key, Launch launch) {
  static_assert(kMaxTensors <= 256, "tensor positions are stored in one byte");
  std::vector<int> tensors;
  ChunkMap<kMaxBlocks> map{};
  int blocks = 0;
  auto flush = [&] {
    if (blocks > 0) launch(tensors, map, blocks);
    tensors.clear();
    blocks = 0;
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 0) continue;
    if (!tensors.empty() && launch_key(i) != launch_key(static_cast<size_t>(tensors.back()))) flush();
    const int64_t chunks = (sizes[i] + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (blocks == kMaxBlocks) flush();
      if (tensors.empty() || tensors.back() != static_cast<int>(i)) {
        if (static_cast<int>(tensors.size()) == kMaxTensors) flush();
        tensors.push_back(static_cast<int>(i));
      }
      map.tensor[blocks] = static_cast<unsigned char>(tensors.size() - 1);
      map.chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
    }
  }
  flush();
}

}  // namespace trident::cuda
