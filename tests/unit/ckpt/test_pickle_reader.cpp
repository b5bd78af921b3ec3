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
