// PyTorch distributed-checkpoint folders assembled here byte by byte from the format's
// description (torch/distributed/checkpoint/metadata.py and filesystem.py): a .metadata pickle
// of Metadata / TensorStorageMetadata / ChunkStorageMetadata / MetadataIndex / _StorageInfo
// objects (protocol 2 opcodes: NEWOBJ of the class, BUILD with its state dict; TensorProperties
// with its tuple state), and a .distcp file holding each piece as a torch.save zip archive at
// its byte range. The reader assembles boxes across pieces, and a tensor whose entry is wrong
// fails only when it is read.
#include "ckpt/torch_dcp.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <tuple>
#include <vector>

#include "ckpt_test_util.h"
#include "core/error.h"
#include "pickle_bytes.h"
#include "zip_test_util.h"

namespace trident {
namespace {

using testing::PickleBytes;
using testing::io_error_of;
using testing::ScratchDir;
using testing::spit;
using testing::write_zip;

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";

// torch.Size((v...,)): REDUCE of the class over a 1-tuple holding the tuple.
PickleBytes& size(PickleBytes& p, const std::vector<int>& v) {
  p.global("torch", "Size").mark().mark();
  for (int x : v) p.int1(static_cast<uint8_t>(x));
  return p.op('t').op('t').op('R');
}

// An instance of `cls` whose BUILD state is the dict `fields` writes (MARK ... SETITEMS).
PickleBytes& object(PickleBytes& p, const char* module, const char* cls, const std::function<void()>& fields) {
  p.global(module, cls).op(')').op('\x81').op('}').mark();
  fields();
  return p.op('u').op('b');
}

struct Piece {
  std::string fqn;
  std::vector<int> offsets, sizes;
  bool with_record = true;
  uint64_t byte_offset = 0, byte_length = 0;
};

// One tensor entry: dtype torch.<dtype>, its size, its pieces.
void tensor_entry(PickleBytes& p, const std::string& fqn, const char* dtype, const std::vector<int>& sz,
                  const std::vector<Piece>& pieces) {
  p.str(fqn);
  object(p, kMeta, "TensorStorageMetadata", [&] {
    // TensorProperties' __getstate__ tuple: (dtype, layout, requires_grad, memory format, pin_memory).
    p.str("properties").global(kMeta, "TensorProperties").op(')').op('\x81');
    p.mark().global("torch", dtype).global("torch", "strided").op('\x89').int1(0).op('\x89').op('t').op('b');
    size(p.str("size"), sz);
    p.str("chunks").op(']').mark();
    for (const Piece& c : pieces)
      object(p, kMeta, "ChunkStorageMetadata", [&] {
        size(p.str("offsets"), c.offsets);
        size(p.str("sizes"), c.sizes);
      });
    p.op('e');
  });
}

// The .metadata of `tensors` (fqn -> dtype, size, pieces) and one bytes item "extra" stored at
// `extra`'s byte range.
std::string metadata_pickle(const std::vector<std::tuple<std::string, const char*, std::vector<int>, std::vector<Piece>>>& tensors,
                            const Piece& extra) {
  PickleBytes p;
  p.op('\x80').op('\x02');
  object(p, kMeta, "Metadata", [&] {
    p.str("state_dict_metadata").op('}').mark();
    for (const auto& [fqn, dtype, sz, pieces] : tensors) tensor_entry(p, fqn, dtype, sz, pieces);
    p.str("extra");
    object(p, kMeta, "BytesStorageMetadata", [] {});
    p.op('u');
    p.str("storage_data").op('}').mark();
    object(p, kMeta, "MetadataIndex", [&] { p.str("fqn").str("extra"); });  // a bytes item: no offset
    object(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo", [&] {
      p.str("relative_path").str("__0_0.distcp");
      p.str("offset").int4(static_cast<int32_t>(extra.byte_offset));
      p.str("length").int4(static_cast<int32_t>(extra.byte_length));
    });
    for (const auto& t : tensors)
      for (const Piece& c : std::get<3>(t)) {
        if (!c.with_record) continue;
        object(p, kMeta, "MetadataIndex", [&] {
          p.str("fqn").str(c.fqn);
          size(p.str("offset"), c.offsets);
          p.str("index").op('N');
        });
        object(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo", [&] {
          p.str("relative_path").str("__0_0.distcp");
          p.str("offset").int4(static_cast<int32_t>(c.byte_offset));
          p.str("length").int4(static_cast<int32_t>(c.byte_length));
        });
      }
    p.op('u');
  });
  return p.stop().bytes();
}

// A torch.save archive of a [r, c] float32 tensor at `offset` of a storage of `values`.
std::string piece_archive(const std::string& dir, const std::vector<float>& values, int offset, int r, int c) {
  PickleBytes pkl;
  pkl.tensor2d("FloatStorage", "0", static_cast<int>(values.size()), offset, r, c, c, 1).stop();
  const std::string path = dir + "/piece.zip";
  write_zip(path, {{"archive/data.pkl", pkl.bytes()},
                   {"archive/data/0", std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4)}});
  const std::string bytes = testing::slurp(path);
  std::filesystem::remove(path);
  return bytes;
}

float w_at(int r, int c) { return static_cast<float>(10 * r + c); }  // "w"[r][c]

class TorchDcp : public ::testing::Test {
 protected:
  // "w" [4, 3] in two pieces of two rows: rows 0-1 alone in their storage, rows 2-3 at offset 3
  // of a larger one; "odd" complex64; "partial" with one of two pieces listed; "unrecorded"
  // with a piece lacking its storage record; "overlap" with pieces sharing row 1.
  void SetUp() override {
    std::vector<float> top, bottom = {-1, -1, -1};
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) (r < 2 ? top : bottom).push_back(w_at(r, c));
    bottom.push_back(-2);
    const std::string a = piece_archive(dir.path(), top, 0, 2, 3), b = piece_archive(dir.path(), bottom, 3, 2, 3);
    const std::string junk(7, 'j');
    spit(dir.path() + "/__0_0.distcp", junk + a + b);
    Piece p0{"w", {0, 0}, {2, 3}, true, junk.size(), a.size()};
    Piece p1{"w", {2, 0}, {2, 3}, true, junk.size() + a.size(), b.size()};
    const auto as = [](Piece p, const std::string& fqn) {
      p.fqn = fqn;
      return p;
    };
    Piece unrecorded = as(p1, "unrecorded");
    unrecorded.with_record = false;
    Piece overlapping = as(p1, "overlap");
    overlapping.offsets = {1, 0};
    spit(dir.path() + "/.metadata",
         metadata_pickle({{"w", "float32", {4, 3}, {p1, p0}},
                          {"odd", "complex64", {4, 3}, {as(p0, "odd"), as(p1, "odd")}},
                          {"partial", "float32", {4, 3}, {as(p0, "partial")}},
                          {"unrecorded", "float32", {4, 3}, {as(p0, "unrecorded"), unrecorded}},
                          {"overlap", "float32", {4, 3}, {as(p0, "overlap"), overlapping}}},
                         p0));
  }
  ScratchDir dir;
};

TEST_F(TorchDcp, BoxesAcrossPieces) {
  const DcpCheckpoint d(dir.path());
  ASSERT_EQ(d.tensors().count("w"), 1u);
  EXPECT_EQ(d.tensors().at("w").size, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(d.objects(), std::vector<std::string>{"extra"});
  std::vector<float> whole;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) whole.push_back(w_at(r, c));
  EXPECT_EQ(d.read_f32("w", {0, 0}, {4, 3}), whole);
  // Rows 1-2, columns 1-2: one row from each piece.
  EXPECT_EQ(d.read_f32("w", {1, 1}, {2, 2}), (std::vector<float>{w_at(1, 1), w_at(1, 2), w_at(2, 1), w_at(2, 2)}));
  EXPECT_EQ(d.read_f32("w", {3, 0}, {1, 3}), (std::vector<float>{w_at(3, 0), w_at(3, 1), w_at(3, 2)}));
}

TEST_F(TorchDcp, ObjectsOpenAtTheirByteRange) {
  const DcpCheckpoint d(dir.path());
  const std::unique_ptr<TorchFile> extra = d.open_object("extra");  // stored where w's first piece is
  const TorchTensor* t = TorchFile::tensor(extra->root());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(extra->read_f32(*t, "extra"), d.read_f32("w", {0, 0}, {2, 3}));
  EXPECT_EQ(io_error_of([&] { d.open_object("nothing"); }),
            dir.path() + "/.metadata: object 'nothing' has no storage_data record");
}

TEST_F(TorchDcp, AWrongEntryFailsOnlyItsRead) {
  const DcpCheckpoint d(dir.path());
  const std::string meta = dir.path() + "/.metadata";
  EXPECT_EQ(io_error_of([&] { d.read_f32("odd", {0, 0}, {4, 3}); }),
            meta + ": 'odd': dtype torch.complex64 is not read");
  EXPECT_EQ(io_error_of([&] { d.read_f32("partial", {0, 0}, {4, 3}); }),
            meta + ": 'partial': its chunks hold 6 of its 12 elements [4, 3]");
  EXPECT_EQ(io_error_of([&] { d.read_f32("unrecorded", {0, 0}, {4, 3}); }),
            meta + ": 'unrecorded' chunk at [2, 0] has no storage_data record");
  EXPECT_EQ(io_error_of([&] { d.read_f32("overlap", {0, 0}, {4, 3}); }),
            meta + ": 'overlap' chunk at [1, 0] overlaps the chunk at [0, 0]");
  EXPECT_EQ(d.read_f32("w", {0, 0}, {1, 1}), std::vector<float>{w_at(0, 0)});
}

TEST_F(TorchDcp, DamagedFiles) {
  const std::string data = dir.path() + "/__0_0.distcp";
  std::filesystem::resize_file(data, 40);
  const DcpCheckpoint d(dir.path());
  EXPECT_NE(io_error_of([&] { d.read_f32("w", {0, 0}, {4, 3}); }).find(data + " at byte "), std::string::npos);
  spit(dir.path() + "/.metadata", PickleBytes().int1(7).stop().bytes());
  EXPECT_EQ(io_error_of([&] { DcpCheckpoint e(dir.path()); }),
            dir.path() + "/.metadata: holds int 7, not torch's checkpoint Metadata");
  std::filesystem::remove(dir.path() + "/.metadata");
  EXPECT_EQ(io_error_of([&] { DcpCheckpoint e(dir.path()); }),
            dir.path() + "/.metadata: missing (a distributed checkpoint's index)");
}

}  // namespace
}  // namespace trident
