// trident-merge-datasets' merge against Megatron's rule (IndexedDatasetBuilder.add_index),
// computed here naively: the items of the inputs concatenated in order, and the document
// index [0] followed by each input's doc_idx[1:] shifted by the items before that input.
// Inputs with an empty document, with no items, and with items after their last document end
// (which run on into the next input's first document, as in Megatron's merge); tokens that only
// int64 holds, copied as they are; a dangling link beside the pairs.
#include "data/dataset_merge.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace trident {
namespace {

using testing::ScratchDir;

struct Input {
  std::vector<std::vector<int32_t>> items;
  std::vector<int64_t> doc_idx;  // starts at 0
};

void write(const std::string& prefix, const Input& in, IndexDType dtype = IndexDType::kUInt16) {
  IndexedDatasetBuilder b(prefix, dtype);
  size_t end = 1;
  for (; end < in.doc_idx.size() && in.doc_idx[end] == 0; ++end) b.end_document();
  for (size_t i = 0; i < in.items.size(); ++i) {
    b.add_item(in.items[i]);
    for (; end < in.doc_idx.size() && in.doc_idx[end] == static_cast<int64_t>(i + 1); ++end) b.end_document();
  }
  b.finish();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DatasetMerge, MegatronsAddIndexRule) {
  ScratchDir dir;
  const std::vector<Input> inputs = {
      {{{1, 2, 3}, {4}, {5, 6}}, {0, 2, 3}},          // two documents
      {{{7}, {8, 9}, {10}}, {0, 0, 1, 2}},            // an empty first document, an item after the last end
      {{}, {0, 0, 0}},                                // no items, two empty documents
      {{{11, 12}, {13}, {14}}, {0, 1, 2}},            // the last input's last item after its last end
  };
  std::vector<std::string> prefixes;
  for (size_t k = 0; k < inputs.size(); ++k) {
    prefixes.push_back(dir / ("shard_" + std::to_string(k)));
    write(prefixes.back(), inputs[k]);
  }
  const MergedDataset m = merge_indexed_datasets(prefixes, dir / "merged");

  std::vector<std::vector<int32_t>> items;
  std::vector<int64_t> doc_idx = {0};
  for (const Input& in : inputs) {
    const int64_t offset = static_cast<int64_t>(items.size());
    for (size_t d = 1; d < in.doc_idx.size(); ++d) doc_idx.push_back(offset + in.doc_idx[d]);
    items.insert(items.end(), in.items.begin(), in.items.end());
  }
  const IndexedDataset out(dir / "merged");
  EXPECT_EQ(out.dtype(), IndexDType::kUInt16);
  ASSERT_EQ(out.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(out.item(i), items[i]) << "item " << i;
  std::vector<int64_t> got_docs;
  for (size_t d = 0; d < out.doc_idx().size(); ++d) got_docs.push_back(out.doc_idx()[d]);
  EXPECT_EQ(got_docs, doc_idx);
  EXPECT_EQ(m.items, 9u);
  EXPECT_EQ(m.documents, doc_idx.size() - 1);
  EXPECT_EQ(m.tokens, 14u);
}

TEST(DatasetMerge, Int64TokensAreCopiedAsTheyAre) {
  ScratchDir dir;
  // Two int64 datasets of items of 2 and 1 tokens, whose ids lie past int32 (which
  // IndexedDataset::item refuses): the index from the builder, the .bin then written raw.
  const std::vector<int64_t> tokens = {int64_t{1} << 40, 7, -(int64_t{1} << 35)};
  const std::string raw(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 8);
  for (const std::string name : {"a", "b"}) {
    IndexedDatasetBuilder b(dir / name, IndexDType::kInt64);
    b.add_item(std::vector<int32_t>{0, 0});
    b.add_item(std::vector<int32_t>{0});
    b.end_document();
    b.finish();
    testing::write_file(dir / (name + ".bin"), raw);
  }
  const MergedDataset m = merge_indexed_datasets({dir / "a", dir / "b"}, dir / "ab");
  EXPECT_EQ(m.tokens, 6u);
  EXPECT_EQ(testing::read_file(dir / "ab.bin"), raw + raw);
}

TEST(DatasetMerge, FolderListingAndErrors) {
  ScratchDir dir;
  write(dir / "b", {{{1}}, {0, 1}});
  write(dir / "a.part", {{{2}}, {0, 1}});
  write(dir / "B", {{{3}}, {0, 1}});
  testing::write_file(dir / "notes.txt", "not a dataset");
  testing::write_file(dir / "b.idx.tmp.host.123", "a builder's leftover");
  std::filesystem::create_symlink(dir / "gone.bin", dir / "zzz.bin");  // dangling, listed last
  // Python's sorted(): byte order, upper case first.
  EXPECT_EQ(dataset_prefixes_in(dir.path()), (std::vector<std::string>{dir / "B", dir / "a.part", dir / "b"}));

  testing::write_file(dir / "c.bin", "");
  EXPECT_EQ(error_of([&] { dataset_prefixes_in(dir.path()); }), dir / "c.bin" + ": no " + dir / "c.idx" + " beside it");
  std::filesystem::remove(dir / "c.bin");
  testing::write_file(dir / "d.idx", "");
  EXPECT_EQ(error_of([&] { dataset_prefixes_in(dir.path()); }), dir / "d.idx" + ": no " + dir / "d.bin" + " beside it");

  ScratchDir empty;
  EXPECT_EQ(error_of([&] { dataset_prefixes_in(empty.path()); }), "--input: " + empty.path() + " holds no .bin/.idx pair");
  EXPECT_EQ(error_of([&] { dataset_prefixes_in(dir / "notes.txt"); }), "--input: " + dir / "notes.txt" + " is not a folder");

  ScratchDir mixed;
  write(mixed / "x", {{{1}}, {0, 1}});
  write(mixed / "y", {{{70000}}, {0, 1}}, IndexDType::kInt32);
  EXPECT_EQ(error_of([&] { merge_indexed_datasets({mixed / "x", mixed / "y"}, mixed / "out"); }),
            mixed / "y.idx" + ": tokens of dtype int32, where " + mixed / "x.idx" + "'s are uint16");
  EXPECT_EQ(mixed.files(), (std::set<std::string>{"x.bin", "x.idx", "y.bin", "y.idx"}));  // nothing left behind
}

}  // namespace
}  // namespace trident
