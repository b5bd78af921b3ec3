// Builds pickle byte strings opcode by opcode (the opcode table of Python's pickletools), for
// the pickle reader's and torch file's tests: no Python needed to make the inputs.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace trident::testing {

class PickleBytes {
 public:
  PickleBytes() { raw("\x80\x02", 2); }  // PROTO 2
  PickleBytes& op(char c) { bytes_ += c; return *this; }
  PickleBytes& mark() { return op('('); }
  PickleBytes& str(const std::string& s) { return op('X').le(s.size(), 4).raw(s.data(), s.size()); }  // BINUNICODE
  PickleBytes& int1(uint8_t v) { return op('K').le(v, 1); }                                          // BININT1
  PickleBytes& int4(int32_t v) { return op('J').le(static_cast<uint32_t>(v), 4); }                   // BININT
  PickleBytes& int2(uint16_t v) { return op('M').le(v, 2); }                                         // BININT2
  PickleBytes& long1(const std::string& le_bytes) { return op('\x8a').le(le_bytes.size(), 1).raw(le_bytes.data(), le_bytes.size()); }
  PickleBytes& real(double v) {  // BINFLOAT, big-endian
    uint64_t u;
    std::memcpy(&u, &v, 8);
    op('G');
    for (int i = 7; i >= 0; --i) bytes_ += static_cast<char>((u >> (8 * i)) & 0xff);
    return *this;
  }
  PickleBytes& global(const std::string& module, const std::string& name) { return op('c').raw_str(module + "\n" + name + "\n"); }
  PickleBytes& put(uint8_t k) { return op('q').le(k, 1); }
  PickleBytes& get(uint8_t k) { return op('h').le(k, 1); }
  PickleBytes& stop() { return op('.'); }
  PickleBytes& raw(const char* p, size_t n) { bytes_.append(p, n); return *this; }
  PickleBytes& raw_str(const std::string& s) { return raw(s.data(), s.size()); }
  PickleBytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  // torch._utils._rebuild_tensor_v2(('storage', torch.<type>, key, 'cpu', numel), offset, size,
  // stride, False, OrderedDict()) with 2-d size and stride.
  PickleBytes& tensor2d(const std::string& type, const std::string& key, int numel, int offset, int r, int c, int sr, int sc) {
    global("torch._utils", "_rebuild_tensor_v2").mark();
    mark().str("storage").global("torch", type).str(key).str("cpu").int1(static_cast<uint8_t>(numel)).op('t').op('Q');
    int1(static_cast<uint8_t>(offset)).int1(static_cast<uint8_t>(r)).int1(static_cast<uint8_t>(c)).op('\x86');
    int1(static_cast<uint8_t>(sr)).int1(static_cast<uint8_t>(sc)).op('\x86');
    op('\x89').global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace trident::testing
