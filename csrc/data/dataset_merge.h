// Megatron's tools/merge_datasets.py: the .bin/.idx pairs of one folder, taken in the order of
// their sorted prefixes, written as one dataset, as if their documents had been tokenized in one
// run (for a corpus tokenized in shards, by several trident-preprocess runs at once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// The prefixes of the .bin/.idx pairs in `dir` (dir/name without the extension), sorted as
// Python sorts their names (byte order). Files of other extensions are not datasets and are
// left out. Throws ConfigError naming --input when `dir` is not a folder or holds no pair,
// and IoError naming a .bin without its .idx or the reverse.
std::vector<std::string> dataset_prefixes_in(const std::string& dir);

struct MergedDataset {
  uint64_t items = 0, documents = 0, tokens = 0;
};

// Writes `output_prefix`.bin/.idx: every item of the inputs in order, their token bytes copied,
// each input's document boundaries shifted past the items before it (Megatron's
// IndexedDatasetBuilder.add_index), in the first input's token dtype, which every input must
// share. The outputs appear only
// complete (IndexedDatasetBuilder). Throws IoError naming the input that cannot be read or
// whose dtype differs.
MergedDataset merge_indexed_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix);

}  // namespace trident
