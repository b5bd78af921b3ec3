// Megatron's MMapIndexedDataset (.bin/.idx pair), byte for byte.
//
// .idx: "MMIDIDX\0\0" (9 bytes), u64 version = 1, u8 dtype code, u64 item count N,
//       u64 doc_idx length D, int32 sizes[N], int64 byte pointers[N], int64 doc_idx[D].
// .bin: the tokens of every item back to back, no header.
// All integers little-endian. doc_idx starts at 0 and gains one entry per document.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_files.h"
#include "data/unaligned_array.h"

namespace trident {

// Megatron's dtype codes.
enum class IndexDType : uint8_t {
  kUInt8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kFloat32 = 6, kFloat64 = 7, kUInt16 = 8
};
size_t index_dtype_size(IndexDType dt);  // bytes per element; 0 for an unknown code
const char* index_dtype_name(IndexDType dt);  // "uint16", ...; "unknown" for an unknown code
// uint16 when the vocabulary fits (vocab < 65500), int32 otherwise (Megatron's rule).
IndexDType best_fitting_dtype(int64_t vocab_size);

std::string idx_path(const std::string& prefix);  // prefix + ".idx"
std::string bin_path(const std::string& prefix);  // prefix + ".bin"

// Streams tokens to `{prefix}.bin.tmp.<host>.<pid>` and writes `{prefix}.idx.tmp.<host>.<pid>` at
// finish(); both files get their final names only then. Several outputs that must appear
// together use the two halves of finish(): prepare() each, then commit() each, and abort()
// every one if any step fails (abort() also takes back a commit). Destroyed before
// commit(): the temporary files are removed.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(std::string prefix, IndexDType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  void add_item(std::span<const int32_t> tokens);  // one sequence (throws if a token does not fit)
  void end_document();                             // closes the current document
  // Megatron's add_index: every item of `in`, its token bytes copied as they are, and its
  // document ends (doc_idx[1:]) shifted past the items written before. Items after its last
  // end run on into the next document closed here. `in` must have this builder's dtype.
  void add_index(const class IndexedDataset& in);
  void finish();                                   // prepare(), then commit()
  void prepare();  // closes the .bin and writes the .idx, both still under their temporary names
  void commit();   // renames both to their final names (.bin first; a failed .idx rename removes it)
  void abort();    // removes what this builder wrote: its temporary files, or after commit() its outputs

  uint64_t items() const { return sizes_.size(); }
  uint64_t documents() const { return doc_idx_.size() - 1; }
  uint64_t tokens() const { return tokens_; }

 private:
  enum class State : uint8_t { kWriting, kPrepared, kCommitted, kAborted };
  std::string prefix_, bin_tmp_, idx_tmp_;
  IndexDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> doc_idx_{0};
  std::vector<char> scratch_;
  uint64_t tokens_ = 0;
  State state_ = State::kWriting;
};

// Removes the temporary files `{prefix}.bin.tmp.<host>.<pid>` and `{prefix}.idx.tmp.<host>.<pid>`
// that builders of this prefix left behind in processes of this host that are gone
// (process_is_gone), e.g. an interrupted trident-preprocess. Files of running processes, of
// other hosts (on a shared file system a run there may still be writing them), of other
// prefixes and any other name (an older trident's `.tmp.<pid>`, which names no host) are
// kept. Returns the paths removed.
std::vector<std::string> remove_stale_builder_temps(const std::string& prefix);

// Reads a .bin/.idx pair, both memory-mapped as Megatron's reader does (the ranks of a node
// share one copy of a corpus's index in the page cache; its arrays, unaligned in the file,
// are read through UnalignedArray). Every field is checked against the file lengths
// when opened; a foreign or truncated file throws IoError naming it. Tokens are checked as
// they are read: an int64 token that int32 cannot hold, or with vocab_size > 0 an id outside
// [0, vocab_size) (data made with another tokenizer), throws IoError naming the .bin, the
// item and the id: the model would otherwise take it silently as a zero embedding and no
// target.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix, int64_t vocab_size = 0);
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  IndexDType dtype() const { return dtype_; }
  int64_t vocab_size() const { return vocab_size_; }  // 0: ids not checked
  uint64_t size() const { return n_; }  // number of items (sequences)
  UnalignedArray<int32_t> sizes() const { return sizes_; }
  UnalignedArray<int64_t> pointers() const { return pointers_; }
  UnalignedArray<int64_t> doc_idx() const { return doc_idx_; }
  uint64_t num_documents() const { return doc_idx_.size() - 1; }
  // Copies tokens [offset, offset + length) of item i into out as int32.
  void read(uint64_t i, uint64_t offset, uint64_t length, int32_t* out) const;
  // The .bin as mapped (items lie at pointers()[i], sizes()[i] tokens each).
  std::span<const char> bin_bytes() const { return {bin_map_.data(), bin_map_.size()}; }
  // The .idx as mapped.
  std::span<const char> idx_bytes() const { return {idx_map_.data(), idx_map_.size()}; }
  std::vector<int32_t> item(uint64_t i) const;

 private:
  std::string prefix_;
  IndexDType dtype_{};
  int64_t vocab_size_ = 0;
  uint64_t n_ = 0;
  ReadOnlyMapping idx_map_, bin_map_;
  UnalignedArray<int32_t> sizes_;
  UnalignedArray<int64_t> pointers_;
  UnalignedArray<int64_t> doc_idx_;
};

}  // namespace trident
