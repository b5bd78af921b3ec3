#include "data/dataset_merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace trident {

namespace {

namespace fs = std::filesystem;

const char* dtype_name(IndexDType dt) {
  switch (dt) {
    case IndexDType::kUInt8: return "uint8";
    case IndexDType::kInt8: return "int8";
    case IndexDType::kInt16: return "int16";
    case IndexDType::kInt32: return "int32";
    case IndexDType::kInt64: return "int64";
    case IndexDType::kFloat32: return "float32";
    case IndexDType::kFloat64: return "float64";
    case IndexDType::kUInt16: return "uint16";
  }
  return "unknown";
}

}  // namespace

std::vector<std::string> dataset_prefixes_in(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError("--input: " + dir + " is not a folder");
  std::map<std::string, int> halves;  // stem -> bit 1: .bin, bit 2: .idx (std::map: byte order)
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const fs::path p = entry.path();
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
      throw IoError(idx_path(prefix) + ": tokens of dtype " + dtype_name(in.dtype()) + ", where " +
                    idx_path(input_prefixes.front()) + "'s are " + dtype_name(dtype));
    }
    // The input's document ends, doc_idx[1:], each closing the output's document once that many
    // of its items are written (empty documents included; items after the last end run on into
    // the next input's first document, as in Megatron's merge).
    const UnalignedArray<int64_t> ends = in.doc_idx();
    size_t next_end = 1;
    const auto close_documents_at = [&](uint64_t written) {
      for (; next_end < ends.size() && static_cast<uint64_t>(ends[next_end]) == written; ++next_end) out->end_document();
    };
    close_documents_at(0);
    for (uint64_t i = 0; i < in.size(); ++i) {
      out->add_item(in.item(i));
      close_documents_at(i + 1);
    }
  }
  out->finish();
  return MergedDataset{out->items(), out->documents(), out->tokens()};
}

}  // namespace trident
