#include "ckpt/pickle_reader.h"

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "core/error.h"

namespace trident::pickle {

Ref make(Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

Value::~Value() {
  std::vector<Ref> pending;
  const auto take = [&pending](Value& v) {
    for (Ref& r : v.items) pending.push_back(std::move(r));
    for (auto& [k, x] : v.entries) {
      pending.push_back(std::move(k));
      pending.push_back(std::move(x));
    }
    for (Ref* r : {&v.callable, &v.args, &v.state}) pending.push_back(std::move(*r));
    v.items.clear();
    v.entries.clear();
  };
  take(*this);
  while (!pending.empty()) {
    Ref r = std::move(pending.back());
    pending.pop_back();
    if (r && r.use_count() == 1) take(*r);  // its children now wait here; r itself is freed flat
  }
}

const Value* Value::get(std::string_view key) const {
  const std::vector<std::pair<Ref, Ref>>* e = nullptr;
  if (kind == Kind::Dict) e = &entries;
  else if (kind == Kind::Object && state && state->kind == Kind::Dict) e = &state->entries;
  if (!e) return nullptr;
  for (const auto& [k, v] : *e)
    if (k->kind == Kind::Str && k->text == key) return v.get();
  return nullptr;
}

std::string Value::describe() const {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return boolean ? "True" : "False";
    case Kind::Int: return "int " + std::to_string(integer);
    case Kind::BigInt: return "a long int";
    case Kind::Float: return "float " + std::to_string(real);
    case Kind::Str: return "str '" + (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
    case Kind::Bytes: return "bytes of length " + std::to_string(text.size());
    case Kind::Tuple: return "a tuple of " + std::to_string(items.size());
    case Kind::List: return "a list of " + std::to_string(items.size());
    case Kind::Dict: return "a dict of " + std::to_string(entries.size());
    case Kind::Set: return "a set";
    case Kind::Global: return module + "." + name;
    case Kind::Object:
      return (callable && callable->kind == Kind::Global ? callable->module + "." + callable->name : "an")
             + " object";
    case Kind::External: return "a tensor";
  }
  return "?";
}

namespace {

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const std::string& source, const Hooks& hooks)
      : in_(bytes), source_(source), hooks_(hooks) {}

  Ref run(size_t* consumed) {
    for (;;) {
      op_pos_ = pos_;
      const uint8_t op = u8();
      if (op == '.') {
        if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
        if (consumed) *consumed = pos_;
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(source_ + ": pickle: " + what + " at byte " + std::to_string(op_pos_));
  }

  std::string_view take(uint64_t n) {
    if (n > in_.size() - pos_) fail("truncated (" + std::to_string(n) + " bytes wanted, " +
                                    std::to_string(in_.size() - pos_) + " left)");
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(int n) {
    const std::string_view s = take(n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[i]);
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  std::string line() {  // GLOBAL's "module\n" and "name\n"
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) fail("truncated GLOBAL");
    std::string s(in_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return s;
  }

  Ref pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("stack underflow");
    Ref v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Ref& top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("stack underflow");
    return stack_.back();
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                         std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return out;
  }
  void push(Ref v) { stack_.push_back(std::move(v)); }

  Ref text(Kind k, std::string_view s) {
    Ref v = make(k);
    v->text = std::string(s);
    return v;
  }
  Ref integer(int64_t x) {
    Ref v = make(Kind::Int);
    v->integer = x;
    return v;
  }
  Ref long_int(std::string_view bytes) {
    if (bytes.size() > 8) return text(Kind::BigInt, bytes);
    uint64_t u = 0;
    for (size_t i = bytes.size(); i-- > 0;) u = (u << 8) | static_cast<uint8_t>(bytes[i]);
    if (!bytes.empty() && bytes.size() < 8 && (static_cast<uint8_t>(bytes.back()) & 0x80))
      u |= ~uint64_t{0} << (8 * bytes.size());  // sign-extend
    return integer(static_cast<int64_t>(u));
  }
  Ref sequence(Kind k, std::vector<Ref> items) {
    Ref v = make(k);
    v->items = std::move(items);
    return v;
  }

  // Python's str.encode('latin1') of a UTF-8 string: every code point must be < 256.
  std::string latin1(const std::string& utf8) {
    std::string out;
    for (size_t i = 0; i < utf8.size();) {
      const auto c = static_cast<uint8_t>(utf8[i]);
      if (c < 0x80) {
        out += static_cast<char>(c);
        ++i;
      } else if ((c & 0xe0) == 0xc0 && i + 1 < utf8.size()) {
        out += static_cast<char>(((c & 0x1f) << 6) | (static_cast<uint8_t>(utf8[i + 1]) & 0x3f));
        i += 2;
      } else {
        fail("_codecs.encode of a character outside latin-1");
      }
    }
    return out;
  }

  // REDUCE / NEWOBJ: the caller's hook, the plain-data constructors, else a recorded call.
  Ref call(const Ref& callable, const Ref& args) {
    if (hooks_.reduce)
      if (Ref v = hooks_.reduce(*callable, args)) return v;
    const auto arg = [&](size_t i) -> const Ref& {
      if (args->kind != Kind::Tuple || args->items.size() <= i) fail(callable->describe() + ": missing argument");
      return args->items[i];
    };
    if (callable->is_global("collections", "OrderedDict")) {
      Ref d = make(Kind::Dict);
      if (args->kind == Kind::Tuple && !args->items.empty())
        for (const Ref& pair : arg(0)->items) {
          if (pair->items.size() != 2) fail("OrderedDict item is not a pair");
          d->entries.emplace_back(pair->items[0], pair->items[1]);
        }
      return d;
    }
    const auto builtin = [&](const char* name) {
      return callable->is_global("builtins", name) || callable->is_global("__builtin__", name);
    };
    if (callable->is_global("torch", "Size") || builtin("tuple")) return sequence(Kind::Tuple, arg(0)->items);
    if (builtin("set") || builtin("frozenset")) return sequence(Kind::Set, arg(0)->items);  // protocol 2's sets
    if (builtin("list")) return sequence(Kind::List, arg(0)->items);
    if (callable->is_global("_codecs", "encode")) {
      if (!arg(0)->is_str()) fail("_codecs.encode of " + arg(0)->describe());
      return text(Kind::Bytes, latin1(arg(0)->text));
    }
    Ref o = make(Kind::Object);
    o->callable = callable;
    o->args = args;
    return o;
  }

  void set_items(Ref& target, std::vector<Ref> kv) {
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    if (target->kind != Kind::Dict && target->kind != Kind::Object) fail("SETITEM on " + target->describe());
    for (size_t i = 0; i < kv.size(); i += 2) target->entries.emplace_back(std::move(kv[i]), std::move(kv[i + 1]));
  }
  void append_items(Ref& target, std::vector<Ref> items) {
    if (target->kind != Kind::List && target->kind != Kind::Object && target->kind != Kind::Set)
      fail("APPEND on " + target->describe());
    for (Ref& v : items) target->items.push_back(std::move(v));
  }
  void put(uint64_t key) { memo_[key] = top(); }
  Ref get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " not defined");
    return it->second;
  }

  void step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t p = u8();
        if (p < 2 || p > 5) fail("protocol " + std::to_string(p) + " (2 to 5 are read)");
        return;
      }
      case 0x95: le(8); return;  // FRAME: a length hint
      case '(': marks_.push_back(stack_.size()); return;
      case '0':  // POP: a value, or the MARK when nothing was pushed after it
        if (!marks_.empty() && stack_.size() == marks_.back()) marks_.pop_back();
        else pop();
        return;
      case '1': pop_mark(); return;
      case '2': push(top()); return;
      case 'N': push(make(Kind::None)); return;
      case 0x88: case 0x89: {
        Ref v = make(Kind::Bool);
        v->boolean = op == 0x88;
        push(v);
        return;
      }
      case 'J': push(integer(static_cast<int32_t>(le(4)))); return;
      case 'K': push(integer(static_cast<int64_t>(le(1)))); return;
      case 'M': push(integer(static_cast<int64_t>(le(2)))); return;
      case 0x8a: push(long_int(take(le(1)))); return;
      case 0x8b: push(long_int(take(le(4)))); return;
      case 'G': {
        const std::string_view s = take(8);
        uint64_t u = 0;
        for (char c : s) u = (u << 8) | static_cast<uint8_t>(c);  // big-endian
        Ref v = make(Kind::Float);
        std::memcpy(&v->real, &u, 8);
        push(v);
        return;
      }
      case 'X': push(text(Kind::Str, take(le(4)))); return;
      case 0x8c: push(text(Kind::Str, take(le(1)))); return;
      case 0x8d: push(text(Kind::Str, take(le(8)))); return;
      case 'T': push(text(Kind::Str, take(le(4)))); return;  // Python 2 str, read as str
      case 'U': push(text(Kind::Str, take(le(1)))); return;
      case 'B': push(text(Kind::Bytes, take(le(4)))); return;
      case 'C': push(text(Kind::Bytes, take(le(1)))); return;
      case 0x8e: case 0x96: push(text(Kind::Bytes, take(le(8)))); return;
      case ')': push(make(Kind::Tuple)); return;
      case 't': push(sequence(Kind::Tuple, pop_mark())); return;
      case 0x85: case 0x86: case 0x87: {
        std::vector<Ref> items(op - 0x84);
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(sequence(Kind::Tuple, std::move(items)));
        return;
      }
      case ']': push(make(Kind::List)); return;
      case 'l': push(sequence(Kind::List, pop_mark())); return;
      case 'a': {
        Ref v = pop();
        append_items(top(), {std::move(v)});
        return;
      }
      case 'e': {
        std::vector<Ref> items = pop_mark();
        append_items(top(), std::move(items));
        return;
      }
      case '}': push(make(Kind::Dict)); return;
      case 'd': {
        Ref d = make(Kind::Dict);
        set_items(d, pop_mark());
        push(d);
        return;
      }
      case 's': {
        Ref v = pop(), k = pop();
        set_items(top(), {std::move(k), std::move(v)});
        return;
      }
      case 'u': {
        std::vector<Ref> kv = pop_mark();
        set_items(top(), std::move(kv));
        return;
      }
      case 0x8f: push(make(Kind::Set)); return;
      case 0x90: {
        std::vector<Ref> items = pop_mark();
        append_items(top(), std::move(items));
        return;
      }
      case 0x91: push(sequence(Kind::Set, pop_mark())); return;
      case 'c': {
        Ref g = make(Kind::Global);
        g->module = line();
        g->name = line();
        push(g);
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        Ref nm = pop(), mod = pop();
        if (!nm->is_str() || !mod->is_str()) fail("STACK_GLOBAL of non-strings");
        Ref g = make(Kind::Global);
        g->module = mod->text;
        g->name = nm->text;
        push(g);
        return;
      }
      case 'R': case 0x81: {  // REDUCE, NEWOBJ
        Ref args = pop(), callable = pop();
        if (args->kind != Kind::Tuple) fail("call with " + args->describe() + " as its arguments");
        push(call(callable, args));
        return;
      }
      case 0x92: {  // NEWOBJ_EX: cls, args, kwargs
        Ref kwargs = pop(), args = pop(), callable = pop();
        if (args->kind != Kind::Tuple) fail("call with " + args->describe() + " as its arguments");
        push(call(callable, args));
        return;
      }
      case 'b': {  // BUILD: an Object keeps its state; other values ignore it (e.g. a tensor's hooks)
        Ref state = pop();
        if (top()->kind == Kind::Object) top()->state = std::move(state);
        return;
      }
      case 'q': put(le(1)); return;
      case 'r': put(le(4)); return;
      case 0x94: put(memo_.size()); return;
      case 'h': push(get(le(1))); return;
      case 'j': push(get(le(4))); return;
      case 'Q': {
        Ref pid = pop();
        if (!hooks_.persistent_load) fail("persistent id without a loader");
        push(hooks_.persistent_load(pid));
        return;
      }
      default: break;
    }
    if (std::strchr("ILFSVPgpio", op) && op != 0)
      fail(std::string("text-protocol opcode '") + static_cast<char>(op) + "' (torch.save writes binary pickles)");
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op);
    fail(std::string("unsupported opcode ") + hex);
  }

  std::string_view in_;
  const std::string& source_;
  const Hooks& hooks_;
  size_t pos_ = 0, op_pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
};

}  // namespace

Ref unpickle(std::string_view bytes, const std::string& source, const Hooks& hooks, size_t* consumed) {
  return Unpickler(bytes, source, hooks).run(consumed);
}

}  // namespace trident::pickle
