// safetensors: round trips for each dtype, the header checked byte by byte by an
// independent reader, and each kind of corrupt file rejected with a named error.
#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "ckpt/checksum.h"
#include "ckpt_test_util.h"

namespace trident {
namespace {

using testing::expect_io_error;
using testing::ScratchDir;
using testing::slurp;
using testing::spit;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g() & 0xff);
  return s;
}

// Builds a file by hand: 8-byte length, header text padded to 8, data.
std::string hand_file(const std::string& header, const std::string& data) {
  std::string h = header;
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + h + data;
}

struct Case {
  StDType dtype;
  std::vector<int64_t> shape;
};

TEST(Safetensors, RoundTripEachDtype) {
  ScratchDir dir;
  const std::vector<Case> cases = {
      {StDType::F32, {3, 5}}, {StDType::F16, {7}},     {StDType::BF16, {2, 3, 4}}, {StDType::I32, {9}},
      {StDType::I64, {2, 2}}, {StDType::U8, {13}},     {StDType::F64, {3}},       {StDType::BOOL, {5}},
      {StDType::I8, {4, 1}},  {StDType::U16, {6}},     {StDType::F32, {}},        {StDType::F16, {0, 4}},
  };
  std::vector<std::string> payloads;
  std::vector<StTensorRef> refs;
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t n = 1;
    for (auto d : cases[i].shape) n *= d;
    payloads.push_back(random_bytes(static_cast<size_t>(n) * st_dtype_size(cases[i].dtype), 100 + i));
  }
  for (size_t i = 0; i < cases.size(); ++i)
    refs.push_back({std::string("t") + std::to_string(i) + "." + st_dtype_name(cases[i].dtype), cases[i].dtype, cases[i].shape,
                    payloads[i].data()});
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\xc3\xa9llo \"q\""}};
  const std::string path = dir / "all.safetensors";
  const WrittenFile wf = write_safetensors(path, refs, meta);
  EXPECT_EQ(wf.size, std::filesystem::file_size(path));
  EXPECT_EQ(wf.xxh3, checksum_file(path));

  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), meta);
  ASSERT_EQ(r.tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& info = r.info(refs[i].name);
    EXPECT_EQ(info.dtype, cases[i].dtype) << refs[i].name;
    EXPECT_EQ(info.shape, cases[i].shape) << refs[i].name;
    ASSERT_EQ(info.nbytes(), payloads[i].size());
    EXPECT_EQ(0, std::memcmp(r.data(refs[i].name), payloads[i].data(), payloads[i].size())) << refs[i].name;
    // Aligned to the element size inside the mapping.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data(refs[i].name)) % st_dtype_size(cases[i].dtype), 0u);
    std::string copy(payloads[i].size(), '\0');
    r.read_raw(refs[i].name, cases[i].dtype, cases[i].shape, copy.data());
    EXPECT_EQ(copy, payloads[i]);
  }
}

TEST(Safetensors, ReadF32ConvertsHalfTypes) {
  ScratchDir dir;
  const std::vector<float> vals = {1.0f, -2.5f, 0.1f, 65504.0f, 3.0e-5f};
  std::vector<uint16_t> h, b;
  for (float v : vals) {
    h.push_back(float_to_half(v));
    b.push_back(float_to_bf16(v));
  }
  const std::string path = dir / "x.safetensors";
  write_safetensors(path, {{"f", StDType::F32, {5}, vals.data()}, {"h", StDType::F16, {5}, h.data()},
                           {"b", StDType::BF16, {5}, b.data()}, {"i", StDType::I32, {1}, h.data()}});
  SafetensorsReader r(path);
  EXPECT_EQ(r.read_f32("f"), vals);
  const auto rh = r.read_f32("h", std::vector<int64_t>{5});
  const auto rb = r.read_f32("b");
  for (size_t i = 0; i < vals.size(); ++i) {
    EXPECT_EQ(rh[i], half_to_float(h[i]));
    EXPECT_EQ(rb[i], bf16_to_float(b[i]));
  }
  EXPECT_EQ(rh[0], 1.0f);
  EXPECT_EQ(rb[1], -2.5f);
  expect_io_error([&] { r.read_f32("i"); }, {path, "'i'", "I32"});
  expect_io_error([&] { r.read_f32("f", std::vector<int64_t>{4}); }, {path, "'f'", "[5]", "[4]"});
  expect_io_error([&] { r.info("nope"); }, {path, "no tensor 'nope'"});
  float dst[5];
  expect_io_error([&] { r.read_raw("f", StDType::F16, {5}, dst); }, {path, "'f'", "F32", "F16"});
}

// The exact bytes the reference writer produces for one small tensor.
TEST(Safetensors, ExactBytesForOneTensor) {
  ScratchDir dir;
  const float v[2] = {1.0f, 2.0f};
  const std::string path = dir / "one.safetensors";
  write_safetensors(path, {{"a", StDType::F32, {2}, v}});
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 54 bytes
  ASSERT_EQ(json.size(), 54u);
  std::string expect;
  expect += std::string("\x38\0\0\0\0\0\0\0", 8);  // 56 = 54 rounded up to a multiple of 8
  expect += json + "  ";
  expect += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  EXPECT_EQ(slurp(path), expect);
}

// An independent reader: parse the length, the padded JSON and the offsets ourselves.
TEST(Safetensors, HeaderFollowsSpec) {
  ScratchDir dir;
  std::vector<std::string> payloads = {random_bytes(2 * 3, 1), random_bytes(8 * 5, 2), random_bytes(4 * 7, 3),
                                       random_bytes(1 * 3, 4), random_bytes(2 * 1, 5)};
  std::vector<StTensorRef> refs = {{"bf", StDType::BF16, {3}, payloads[0].data()},
                                   {"i64", StDType::I64, {5}, payloads[1].data()},
                                   {"f32", StDType::F32, {7, 1}, payloads[2].data()},
                                   {"u8", StDType::U8, {3}, payloads[3].data()},
                                   {"f16", StDType::F16, {1}, payloads[4].data()}};
  const std::string path = dir / "h.safetensors";
  write_safetensors(path, refs, {{"k", "v"}});
  const std::string file = slurp(path);
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u) << "header not padded to 8";
  ASSERT_LE(8 + n, file.size());
  const std::string header = file.substr(8, n);
  const size_t last = header.find_last_not_of(' ');
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - (last + 1), 8u) << "more padding than needed";
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"k\":\"v\"}", 0), 0u) << header;
  const auto j = nlohmann::json::parse(header.substr(0, last + 1));
  const uint64_t data_size = file.size() - 8 - n;
  // Offsets tile the data buffer in order and each tensor is aligned to its element size.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (size_t k = 0; k < refs.size(); ++k) {
    const auto& e = j.at(refs[k].name);
    EXPECT_EQ(e.at("dtype").get<std::string>(), st_dtype_name(refs[k].dtype));
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), refs[k].shape);
    const uint64_t b = e.at("data_offsets")[0], en = e.at("data_offsets")[1];
    EXPECT_EQ(en - b, payloads[k].size());
    EXPECT_EQ(b % st_dtype_size(refs[k].dtype), 0u) << refs[k].name;
    EXPECT_EQ(file.substr(8 + n + b, en - b), payloads[k]) << refs[k].name;
    spans.push_back({b, en});
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (auto [b, e] : spans) {
    EXPECT_EQ(b, at);
    at = e;
  }
  EXPECT_EQ(at, data_size);
  EXPECT_EQ(j.size(), refs.size() + 1);  // the tensors and __metadata__
}

TEST(Safetensors, ReadsHandWrittenFile) {
  ScratchDir dir;
  const std::string path = dir / "hand.safetensors";
  // Key order and spacing of another writer; offsets in non-sorted key order.
  spit(path, hand_file(R"({ "b": {"shape": [1], "dtype": "I32", "data_offsets": [8, 12]},
                            "a": {"data_offsets": [0, 8], "dtype": "F32", "shape": [2]}, "__metadata__": {}})",
                       std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x07\x00\x00\x00", 12)));
  SafetensorsReader r(path);
  EXPECT_EQ(r.read_f32("a"), (std::vector<float>{1.0f, 2.0f}));
  int32_t b = 0;
  r.read_raw("b", StDType::I32, {1}, &b);
  EXPECT_EQ(b, 7);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b"}));
}

struct Corrupt {
  const char* label;
  std::string bytes;
  std::vector<std::string> expect;
};

TEST(Safetensors, CorruptFilesGiveNamedErrors) {
  ScratchDir dir;
  const std::string d12(12, '\x01'), d8(8, '\x01');
  const std::vector<Corrupt> cases = {
      {"overlap",
       hand_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", d12),
       {"overlap", "'b'", "'a'"}},
      {"out of range", hand_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8),
       {"'a'", "out of range", "8 bytes"}},
      {"bad json", hand_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", d8), {"bad header JSON"}},
      {"not json", hand_file("{garbage", d8), {"bad header JSON"}},
      {"size mismatch", hand_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8),
       {"'a'", "needs 12"}},
      {"hole", hand_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), {"hole", "'a'"}},
      {"trailing", hand_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8), {"trailing"}},
      {"unknown dtype", hand_file(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", d8),
       {"'a'", "unknown dtype 'F33'"}},
      {"duplicate", hand_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       {"duplicate key 'a'"}},
      {"negative dim", hand_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), {"'a'", "negative"}},
      {"end before begin", hand_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", d8),
       {"'a'", "end before begin"}},
      {"metadata value", hand_file(R"({"__metadata__":{"x":1}})", ""), {"__metadata__", "'x'"}},
      {"unknown field", hand_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":0}})", d8),
       {"unknown field 'x'"}},
      {"not an object", hand_file(R"([1,2])", ""), {"start with '{'"}},
      {"too short", std::string("\x05\0\0", 3), {"truncated", "3 bytes"}},
      {"header past end", std::string("\xff\0\0\0\0\0\0\0{}", 10), {"truncated", "header length 255"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = dir / (std::string(c.label) + ".safetensors");
    spit(path, c.bytes);
    std::vector<std::string> parts = c.expect;
    parts.push_back(path);
    try {
      SafetensorsReader r(path);
      ADD_FAILURE() << "accepted";
    } catch (const IoError& e) {
      const std::string msg = e.what();
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(Safetensors, TruncatedFileIsRejected) {
  ScratchDir dir;
  const std::string path = dir / "t.safetensors";
  std::vector<float> v(100, 1.5f);
  write_safetensors(path, {{"w", StDType::F32, {10, 10}, v.data()}});
  const std::string good = slurp(path);
  { SafetensorsReader ok(path); }
  spit(path, good.substr(0, good.size() - 1));
  expect_io_error([&] { SafetensorsReader r(path); }, {path, "'w'", "out of range", "truncated"});
  spit(path, good.substr(0, 20));  // inside the header
  expect_io_error([&] { SafetensorsReader r(path); }, {path, "truncated", "header length"});
  spit(path, "");
  expect_io_error([&] { SafetensorsReader r(path); }, {path, "truncated", "0 bytes"});
  expect_io_error([&] { SafetensorsReader r(dir / "missing.safetensors"); }, {"missing.safetensors", "cannot open"});
}

TEST(Safetensors, WriterIsAtomicAndValidates) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  const float a[2] = {1, 2}, b[3] = {3, 4, 5};
  write_safetensors(path, {{"a", StDType::F32, {2}, a}});
  const std::string before = slurp(path);
  // Bad arguments: nothing written, the old file stays.
  EXPECT_THROW(write_safetensors(path, {{"x", StDType::F32, {2}, a}, {"x", StDType::F32, {2}, a}}), ConfigError);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", StDType::F32, {2}, a}}), ConfigError);
  EXPECT_THROW(write_safetensors(path, {{"n", StDType::F32, {2}, nullptr}}), ConfigError);
  EXPECT_EQ(slurp(path), before);
  // Replacing works and leaves no temporary behind.
  write_safetensors(path, {{"b", StDType::F32, {3}, b}});
  EXPECT_EQ(SafetensorsReader(path).read_f32("b"), (std::vector<float>{3, 4, 5}));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // Unwritable destination: IoError naming it.
  expect_io_error([&] { write_safetensors(dir / "no/such/dir.safetensors", {{"a", StDType::F32, {2}, a}}); },
                  {"no/such/dir.safetensors"});
}

TEST(Safetensors, FillCallbackWritesTheSameBytes) {
  // A tensor given by a copy callback (how device tensors are saved) is written exactly
  // like one given by a pointer; the callback sees whole elements only.
  ScratchDir dir;
  const std::string big = random_bytes((size_t{20} << 20) + 12, 31);  // spans two 16 MB chunks
  const std::string small = random_bytes(6, 32);
  const std::vector<StTensorRef> plain = {{"h", StDType::BF16, {3}, small.data()},
                                          {"f", StDType::F32, {static_cast<int64_t>(big.size() / 4)}, big.data()}};
  std::vector<StTensorRef> filled = plain;
  for (auto& r : filled) {
    const char* src = static_cast<const char*>(r.data);
    const size_t esize = st_dtype_size(r.dtype);
    r.data = nullptr;
    r.fill = [src, esize](void* dst, uint64_t offset, size_t len) {
      EXPECT_EQ(offset % esize, 0u);
      EXPECT_EQ(len % esize, 0u);
      std::memcpy(dst, src + offset, len);
    };
  }
  const WrittenFile a = write_safetensors(dir / "a.safetensors", plain, {{"k", "v"}});
  const WrittenFile b = write_safetensors(dir / "b.safetensors", filled, {{"k", "v"}});
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.xxh3, b.xxh3);
  EXPECT_EQ(b.xxh3, checksum_file(dir / "b.safetensors"));
  EXPECT_TRUE(slurp(dir / "a.safetensors") == slurp(dir / "b.safetensors"));
}

TEST(Safetensors, ReaderChecksTheExpectedFile) {
  ScratchDir dir;
  const std::string path = dir / "x.safetensors";
  const std::string payload = random_bytes(size_t{40} << 20, 41);  // past one read-ahead window
  const WrittenFile wf =
      write_safetensors(path, {{"x", StDType::U8, {static_cast<int64_t>(payload.size())}, payload.data()}});
  const ExpectedFile good{wf.xxh3, static_cast<int64_t>(wf.size)};
  {
    SafetensorsReader r(path, good);
    EXPECT_EQ(std::memcmp(r.data("x"), payload.data(), payload.size()), 0);
  }
  expect_io_error([&] { SafetensorsReader r(path, ExpectedFile{"0123456789abcdef", good.size}); },
                  {path, "checksum mismatch", "expected 0123456789abcdef"});
  expect_io_error([&] { SafetensorsReader r(path, ExpectedFile{good.xxh3, good.size + 1}); },
                  {path, "truncated", "expected " + std::to_string(good.size + 1)});
  expect_io_error([&] { SafetensorsReader r(dir / "gone.safetensors", good); }, {"gone.safetensors", "missing"});
  std::string bytes = slurp(path);
  bytes[bytes.size() - 5] ^= 1;  // a flipped bit in the data, far from the header
  spit(path, bytes);
  expect_io_error([&] { SafetensorsReader r(path, good); }, {path, "checksum mismatch"});
  spit(path, bytes.substr(0, 5));  // shorter than the length field; the size is checked first
  expect_io_error([&] { SafetensorsReader r(path, ExpectedFile{checksum_file(path), 5}); },
                  {path, "truncated", "8-byte header length"});
}

TEST(Safetensors, EmptyFileHasEmptyHeader) {
  ScratchDir dir;
  const std::string path = dir / "e.safetensors";
  write_safetensors(path, {});
  EXPECT_EQ(slurp(path), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  SafetensorsReader r(path);
  EXPECT_TRUE(r.tensors().empty());
}

}  // namespace
}  // namespace trident
