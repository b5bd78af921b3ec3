#include "ckpt/pickle_writer.h"

#include <cstring>

#include "core/error.h"
#include "core/tensor.h"

namespace trident::pickle {

// Opcodes (Python's pickletools table).
namespace {
constexpr char kMark = '(', kStop = '.', kNone = 'N', kTrue = '\x88', kFalse = '\x89', kBinInt = 'J',
               kLong1 = '\x8a', kBinFloat = 'G', kBinUnicode = 'X', kGlobal = 'c', kEmptyDict = '}',
               kSetItems = 'u', kEmptyTuple = ')', kTuple = 't', kReduce = 'R', kNewObj = '\x81', kBuild = 'b',
               kBinPersId = 'Q', kEmptyList = ']', kAppends = 'e';
}  // namespace

Writer::Writer() { out_ = "\x80\x02"; }

void Writer::le(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
}

void Writer::none() { op(kNone); }
void Writer::boolean(bool v) { op(v ? kTrue : kFalse); }

void Writer::integer(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    op(kBinInt);
    le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    return;
  }
  op(kLong1);  // 8 bytes of two's complement always hold an int64
  out_ += '\x08';
  le(static_cast<uint64_t>(v), 8);
}

void Writer::real(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  op(kBinFloat);
  for (int i = 7; i >= 0; --i) out_ += static_cast<char>((u >> (8 * i)) & 0xff);  // big-endian
}

void Writer::str(std::string_view s) {
  op(kBinUnicode);
  le(s.size(), 4);
  out_.append(s);
}

void Writer::global(std::string_view module, std::string_view name) {
  op(kGlobal);
  out_.append(module);
  out_ += '\n';
  out_.append(name);
  out_ += '\n';
}

void Writer::begin_dict() {
  op(kEmptyDict);
  op(kMark);
  open_.push_back(Open::kDict);
}

void Writer::begin_ordered_dict() {
  global("collections", "OrderedDict");
  op(kEmptyTuple);
  op(kReduce);
  op(kMark);
  open_.push_back(Open::kDict);
}

void Writer::begin_namespace() {
  global("argparse", "Namespace");
  op(kEmptyTuple);
  op(kNewObj);
  op(kEmptyDict);
  op(kMark);
  open_.push_back(Open::kNamespace);
}

void Writer::begin_tuple() {
  op(kMark);
  open_.push_back(Open::kTuple);
}

void Writer::begin_list() {
  op(kEmptyList);
  op(kMark);
  open_.push_back(Open::kList);
}

void Writer::begin_call(std::string_view module, std::string_view name) {
  global(module, name);
  op(kMark);
  open_.push_back(Open::kCall);
}

void Writer::begin_object(std::string_view module, std::string_view name) {
  global(module, name);
  op(kEmptyTuple);
  op(kNewObj);
  open_.push_back(Open::kObject);
}

void Writer::end() {
  TRIDENT_CHECK(!open_.empty(), "pickle writer: end() without begin");
  const Open o = open_.back();
  open_.pop_back();
  if (o == Open::kTuple) {
    op(kTuple);
    return;
  }
  if (o == Open::kList) {
    op(kAppends);
    return;
  }
  if (o == Open::kCall) {  // the arguments become a tuple, the callable's argument
    op(kTuple);
    op(kReduce);
    return;
  }
  if (o == Open::kObject) {
    op(kBuild);
    return;
  }
  op(kSetItems);
  if (o == Open::kNamespace) op(kBuild);  // the attribute dict becomes the Namespace's state
}

void Writer::tensor(std::string_view storage_type, std::string_view key, const std::vector<int64_t>& shape) {
  const int64_t numel = numel_of(shape);
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  global("torch._utils", "_rebuild_tensor_v2");
  begin_tuple();
  begin_tuple();  // the persistent id of the storage
  str("storage");
  global("torch", storage_type);
  str(key);
  str("cpu");
  integer(numel);
  end();
  op(kBinPersId);
  integer(0);  // storage offset
  begin_tuple();
  for (int64_t d : shape) integer(d);
  end();
  begin_tuple();
  for (int64_t s : stride) integer(s);
  end();
  boolean(false);  // requires_grad
  begin_ordered_dict();  // backward hooks
  end();
  end();
  op(kReduce);
}

std::string Writer::finish() {
  TRIDENT_CHECK(open_.empty(), "pickle writer: finish() with open containers");
  op(kStop);
  return std::move(out_);
}

}  // namespace trident::pickle
