#include "data/dataset_merge.h"

#include <filesystem>
#include <map>
#include <memory>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace trident {

namespace fs = std::filesystem;

std::vector<std::string> dataset_prefixes_in(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError("--input: " + dir + " is not a folder");
  std::map<std::string, int> halves;  // stem -> bit 1: .bin, bit 2: .idx (std::map: byte order)
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code entry_ec;  // an entry that cannot be examined (a dangling link) is no dataset
    if (!it->is_regular_file(entry_ec)) continue;
    const fs::path p = it->path();
    if (p.extension() == ".bin") halves[p.stem().string()] |= 1;
    else if (p.extension() == ".idx") halves[p.stem().string()] |= 2;
  }
  if (ec) throw IoError(dir + ": cannot list: " + ec.message());
  std::vector<std::string> prefixes;
  for (const auto& [stem, have] : halves) {
    const std::string prefix = (fs::path(dir) / stem).string();
    if (have == 1) throw IoError(bin_path(prefix) + ": no " + idx_path(prefix) + " beside it");
    if (have == 2) throw IoError(idx_path(prefix) + ": no " + bin_path(prefix) + " beside it");
    prefixes.push_back(prefix);
  }
  if (prefixes.empty()) throw ConfigError("--input: " + dir + " holds no .bin/.idx pair");
  return prefixes;
}

MergedDataset merge_indexed_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix) {
  TRIDENT_CHECK(!input_prefixes.empty(), "merge_indexed_datasets without inputs");
  std::unique_ptr<IndexedDatasetBuilder> out;
  IndexDType dtype{};
  for (const std::string& prefix : input_prefixes) {
    const IndexedDataset in(prefix);
    if (!out) {
      dtype = in.dtype();
      out = std::make_unique<IndexedDatasetBuilder>(output_prefix, dtype);
    } else if (in.dtype() != dtype) {
      throw IoError(idx_path(prefix) + ": tokens of dtype " + index_dtype_name(in.dtype()) + ", where " +
                    idx_path(input_prefixes.front()) + "'s are " + index_dtype_name(dtype));
    }
    out->add_index(in);
  }
  out->finish();
  return MergedDataset{out->items(), out->documents(), out->tokens()};
}

}  // namespace trident
