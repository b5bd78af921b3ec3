// The pickle reader against byte strings assembled from the pickle opcode table: values, the
// memo's shared objects, the constructors it evaluates and those it records, the hooks, and
// one-line errors for malformed input.
#include "ckpt/pickle_reader.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "pickle_bytes.h"

namespace trident {
namespace {

using pickle::Kind;
using pickle::Ref;
using testing::PickleBytes;

Ref read(const PickleBytes& p, const pickle::Hooks& hooks = {}) { return pickle::unpickle(p.bytes(), "test.pkl", hooks); }

std::string error_of(const std::string& bytes) {
  try {
    pickle::unpickle(bytes, "test.pkl");
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

// Written by CPython 3.11's pickle.dumps (protocols 2 and 4) of
//   class E(enum.Enum): a = 1; b = 2
//   sd = OrderedDict(w=1, v=2); sd._metadata = OrderedDict({"": {"version": 1}})  # as torch state dicts
//   {"args": argparse.Namespace(num_layers=2, kind=E.b, l=[1, 2], t=(1.5, None), s="x"), "sd": sd,
//    "b": b"\x00\xff", "big": 2**70, "neg": -2**40, "set": {3}}
const char* const kCPythonProtocol2 =
      "80027d71002858040000006172677371016361726770617273650a4e616d6573706163650a7102298171037d71042858"
      "0a0000006e756d5f6c617965727371054b0258040000006b696e647106635f5f6d61696e5f5f0a450a71074b02857108"
      "52710958010000006c710a5d710b284b014b0265580100000074710c473ff80000000000004e86710d58010000007371"
      "0e580100000078710f756258020000007364711063636f6c6c656374696f6e730a4f726465726564446963740a711129"
      "5271122858010000007771134b0158010000007671144b02757d711558090000005f6d65746164617461711668112952"
      "7117580000000071187d7119580700000076657273696f6e711a4b0173737362580100000062711b635f636f64656373"
      "0a656e636f64650a711c580300000000c3bf711d58060000006c6174696e31711e86711f527120580300000062696771"
      "218a0900000000000000004058030000006e656771228a060000000000ff58030000007365747123635f5f6275696c74"
      "696e5f5f0a7365740a71245d71254b0361857126527127752e";
const char* const kCPythonProtocol4 =
      "8004950e010000000000007d94288c0461726773948c086172677061727365948c094e616d6573706163659493942981"
      "947d94288c0a6e756d5f6c6179657273944b028c046b696e64948c085f5f6d61696e5f5f948c01459493944b02859452"
      "948c016c945d94284b014b02658c017494473ff80000000000004e86948c0173948c01789475628c027364948c0b636f"
      "6c6c656374696f6e73948c0b4f72646572656444696374949394295294288c0177944b018c0176944b02757d948c095f"
      "6d657461646174619468172952948c00947d948c0776657273696f6e944b01737373628c016294430200ff948c036269"
      "67948a090000000000000000408c036e6567948a060000000000ff8c03736574948f94284b0390752e";

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

TEST(PickleReader, WhatCPythonWrites) {
  for (const char* hex : {kCPythonProtocol2, kCPythonProtocol4}) {
    const Ref v = pickle::unpickle(from_hex(hex), "cpython.pkl");
    const pickle::Value* args = v->get("args");
    ASSERT_TRUE(args && args->kind == Kind::Object);
    EXPECT_TRUE(args->callable->is_global("argparse", "Namespace"));
    EXPECT_EQ(args->get("num_layers")->integer, 2);
    const pickle::Value* kind = args->get("kind");  // E(2)
    ASSERT_EQ(kind->kind, Kind::Object);
    EXPECT_TRUE(kind->callable->is_global("__main__", "E"));
    EXPECT_EQ(kind->args->items.at(0)->integer, 2);
    EXPECT_EQ(args->get("l")->items.size(), 2u);
    EXPECT_EQ(args->get("t")->items.at(0)->real, 1.5);
    EXPECT_EQ(args->get("t")->items.at(1)->kind, Kind::None);
    EXPECT_EQ(args->get("s")->text, "x");
    const pickle::Value* sd = v->get("sd");  // the OrderedDict, its _metadata BUILD ignored
    ASSERT_EQ(sd->kind, Kind::Dict);
    ASSERT_EQ(sd->entries.size(), 2u);
    EXPECT_EQ(sd->get("v")->integer, 2);
    EXPECT_EQ(v->get("b")->kind, Kind::Bytes);
    EXPECT_EQ(v->get("b")->text, std::string("\x00\xff", 2));
    EXPECT_EQ(v->get("big")->kind, Kind::BigInt);
    EXPECT_EQ(v->get("neg")->integer, -(int64_t{1} << 40));
    EXPECT_EQ(v->get("set")->items.at(0)->integer, 3);
  }
}

TEST(PickleReader, ScalarsStringsAndContainers) {
  PickleBytes p;
  p.op('}').mark().str("xs").op(']').mark();
  p.int1(7).int4(-2).int2(1001).real(3.5).op('N').op('\x88').op('\x89').str("h\xc3\xa9");
  p.op('C').le(2, 1).raw("\x00\xff", 2);                   // SHORT_BINBYTES
  p.long1(std::string("\xff", 1)).long1(std::string("\x00\x80", 2)).long1(std::string(9, '\x01'));
  p.int1(1).int1(2).op('\x86');                            // TUPLE2
  p.op('e').op('u').stop();
  const Ref v = read(p);
  ASSERT_EQ(v->kind, Kind::Dict);
  const pickle::Value* xs = v->get("xs");
  ASSERT_TRUE(xs);
  ASSERT_EQ(xs->kind, Kind::List);
  const auto& it = xs->items;
  ASSERT_EQ(it.size(), 13u);
  EXPECT_EQ(it[0]->integer, 7);
  EXPECT_EQ(it[1]->integer, -2);
  EXPECT_EQ(it[2]->integer, 1001);
  EXPECT_EQ(it[3]->real, 3.5);
  EXPECT_EQ(it[4]->kind, Kind::None);
  EXPECT_TRUE(it[5]->boolean);
  EXPECT_FALSE(it[6]->boolean);
  EXPECT_EQ(it[7]->text, "h\xc3\xa9");
  EXPECT_EQ(it[8]->kind, Kind::Bytes);
  EXPECT_EQ(it[8]->text, std::string("\x00\xff", 2));
  EXPECT_EQ(it[9]->integer, -1);       // LONG1 ff: sign-extended
  EXPECT_EQ(it[10]->integer, -32768);  // LONG1 00 80
  EXPECT_EQ(it[11]->kind, Kind::BigInt);
  EXPECT_EQ(it[12]->kind, Kind::Tuple);
  EXPECT_EQ(it[12]->items[1]->integer, 2);
  EXPECT_EQ(v->get("absent"), nullptr);
}

TEST(PickleReader, MemoSharesObjects) {
  // l = []; d = {'a': l, 'b': l}; l.append(5) after both references exist.
  PickleBytes p;
  p.op('}').str("a").op(']').put(0).op('s').str("b").get(0).op('s').get(0).int1(5).op('a').op('0').stop();
  const Ref v = read(p);
  ASSERT_EQ(v->kind, Kind::Dict);
  ASSERT_EQ(v->get("a")->items.size(), 1u);
  EXPECT_EQ(v->get("a"), v->get("b"));
  // MEMOIZE stores at the memo's size.
  PickleBytes m;
  m.str("x").op('\x94').op('0').op(']').op('\x94').op('0').op('h').le(0, 1).stop();
  EXPECT_EQ(read(m)->text, "x");
}

TEST(PickleReader, ConstructorsEvaluatedOrRecorded) {
  PickleBytes p;
  p.op('}').mark();
  p.str("od").global("collections", "OrderedDict").op(')').op('R').str("k").int1(1).op('s');
  p.str("size").global("torch", "Size").int1(2).int1(3).op('\x86').op('\x85').op('R');
  p.str("bytes").global("_codecs", "encode").str("\xc3\xbf\x01").str("latin1").op('\x86').op('R');
  // argparse.Namespace(): NEWOBJ, then BUILD with its __dict__.
  p.str("args").global("argparse", "Namespace").op(')').op('\x81').op('}').str("num_layers").int1(4).op('s').op('b');
  p.str("dtype").global("torch", "bfloat16");
  p.op('u').stop();
  const Ref v = read(p);
  const pickle::Value* od = v->get("od");
  ASSERT_EQ(od->kind, Kind::Dict);
  EXPECT_EQ(od->get("k")->integer, 1);
  const pickle::Value* size = v->get("size");
  ASSERT_EQ(size->kind, Kind::Tuple);
  EXPECT_EQ(size->items.size(), 2u);
  EXPECT_EQ(v->get("bytes")->kind, Kind::Bytes);
  EXPECT_EQ(v->get("bytes")->text, std::string("\xff\x01", 2));
  const pickle::Value* args = v->get("args");
  ASSERT_EQ(args->kind, Kind::Object);
  EXPECT_TRUE(args->callable->is_global("argparse", "Namespace"));
  EXPECT_EQ(args->get("num_layers")->integer, 4);
  EXPECT_EQ(args->describe(), "argparse.Namespace object");
  EXPECT_TRUE(v->get("dtype")->is_global("torch", "bfloat16"));
}

TEST(PickleReader, Hooks) {
  int persistent = 0, reduced = 0;
  pickle::Hooks h;
  h.persistent_load = [&](const Ref& pid) {
    ++persistent;
    EXPECT_EQ(pid->kind, Kind::Tuple);
    Ref e = pickle::make(Kind::External);
    e->external = pid->items.at(1)->integer;
    return e;
  };
  h.reduce = [&](const pickle::Value& callable, const Ref& args) -> Ref {
    if (!callable.is_global("m", "f")) return nullptr;
    ++reduced;
    return args->items.at(0);
  };
  PickleBytes p;
  p.global("m", "f").mark().str("storage").int1(42).op('t').op('Q').op('\x85').op('R').stop();
  const Ref v = read(p, h);
  EXPECT_EQ(persistent, 1);
  EXPECT_EQ(reduced, 1);
  ASSERT_EQ(v->kind, Kind::External);
  EXPECT_EQ(std::any_cast<int64_t>(v->external), 42);
}

TEST(PickleReader, DeepNestingIsFreedWithoutRecursion) {
  // [[[...]]] 200000 deep: MARK x n, then LIST x n. Freed recursively, this overflows an 8 MiB stack.
  constexpr int n = 200000;
  std::string bytes = "\x80\x02" + std::string(n, '(') + std::string(n, 'l') + ".";
  Ref v = pickle::unpickle(bytes, "deep.pkl");
  int depth = 0;
  for (const pickle::Value* x = v.get(); !x->items.empty(); x = x->items[0].get()) ++depth;
  EXPECT_EQ(depth, n - 1);
  v.reset();
  // The innermost list memoized and handed out again next to the chain: it outlives the chain.
  bytes = "\x80\x02" + std::string(n, '(') + std::string("]q\x00", 3) + std::string(n, 'l') + std::string("h\x00\x86.", 4);
  v = pickle::unpickle(bytes, "deep.pkl");
  Ref innermost = v->items.at(1);
  v.reset();
  EXPECT_EQ(innermost.use_count(), 1);
  EXPECT_EQ(innermost->kind, Kind::List);
}

TEST(PickleReader, MalformedInputIsOneLine) {
  PickleBytes truncated;
  truncated.str("abcdef");
  const std::string t = truncated.bytes().substr(0, truncated.bytes().size() - 3);
  EXPECT_EQ(error_of(t), "test.pkl: pickle: truncated (6 bytes wanted, 3 left) at byte 2");
  EXPECT_EQ(error_of(PickleBytes().op('\xff').bytes()), "test.pkl: pickle: unsupported opcode 0xff at byte 2");
  EXPECT_EQ(error_of(PickleBytes().op('I').bytes()),
            "test.pkl: pickle: text-protocol opcode 'I' (torch.save writes binary pickles) at byte 2");
  EXPECT_EQ(error_of(PickleBytes().get(3).bytes()), "test.pkl: pickle: memo key 3 not defined at byte 2");
  EXPECT_EQ(error_of(PickleBytes().op(']').int1(1).int1(2).op('s').bytes()), "test.pkl: pickle: SETITEM on a list of 0 at byte 7");
  EXPECT_EQ(error_of(PickleBytes().int1(1).int1(2).stop().bytes()), "test.pkl: pickle: STOP with 2 values on the stack at byte 6");
  EXPECT_EQ(error_of(PickleBytes().op('a').bytes()), "test.pkl: pickle: stack underflow at byte 2");
  EXPECT_EQ(error_of(std::string("\x80\x06", 2)), "test.pkl: pickle: protocol 6 (2 to 5 are read) at byte 0");
  EXPECT_EQ(error_of(PickleBytes().mark().op('t').op('Q').bytes()), "test.pkl: pickle: persistent id without a loader at byte 4");
  EXPECT_EQ(error_of(PickleBytes().int1(1).bytes()), "test.pkl: pickle: truncated (1 bytes wanted, 0 left) at byte 4");
}

}  // namespace
}  // namespace trident
