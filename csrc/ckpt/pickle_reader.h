// A data-only reader of Python pickles (the binary opcodes of protocols 2-5), for the files
// torch.save writes. Nothing is executed: a GLOBAL is only its module and name, and a call
// (REDUCE, NEWOBJ) or a BUILD is recorded as an Object holding the callable, its arguments
// and its state. A few constructors whose result is plain data are evaluated:
//   collections.OrderedDict(...)        -> a Dict
//   torch.Size(t), builtins.tuple(t)    -> a Tuple
//   builtins.set(l), frozenset(l)       -> a Set (how protocol 2 pickles sets); builtins.list(l)
//   _codecs.encode(s, "latin1")         -> Bytes (how protocol 2 pickles bytes)
// and the caller may evaluate others (torch's tensor rebuilds) through Hooks::reduce.
// Persistent ids (BINPERSID: torch's storages) are handed to Hooks::persistent_load.
//
// Every malformed input (truncation, an unknown or text-protocol opcode, a stack underflow, a
// memo miss, a SETITEM on a non-dict) throws IoError "<source>: pickle: ... at byte N".
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trident::pickle {

struct Value;
using Ref = std::shared_ptr<Value>;  // shared: the memo hands out the same object again

enum class Kind { None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Dict, Set, Global, Object, External };

struct Value {
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  // Str (UTF-8), Bytes, BigInt (two's complement, little-endian, as LONG1/LONG4 store it).
  std::string text;
  std::string module, name;                 // Global
  std::vector<Ref> items;                   // Tuple, List, Set; an Object's APPENDs
  std::vector<std::pair<Ref, Ref>> entries; // Dict (insertion order); an Object's SETITEMs
  Ref callable, args, state;                // Object: callable(*args), then BUILD's state
  std::any external;                        // External: what a hook returned

  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  // Frees nested values iteratively: a deeply nested pickle must not overflow the stack.
  ~Value();

  // Dict lookup by string key; nullptr when absent or not a Dict. An Object's BUILD state
  // that is a dict (argparse.Namespace, most classes) is searched too.
  const Value* get(std::string_view key) const;
  bool is_str() const { return kind == Kind::Str; }
  bool is_global(std::string_view mod, std::string_view nm) const {
    return kind == Kind::Global && module == mod && name == nm;
  }
  // A short description for error messages: "int 3", "str 'x'", "argparse.Namespace object", ...
  std::string describe() const;
};

Ref make(Kind k);

struct Hooks {
  // BINPERSID: the persistent id (torch: a tuple ('storage', type, key, location, numel)).
  std::function<Ref(const Ref& pid)> persistent_load;
  // REDUCE/NEWOBJ of a callable: return a value to use instead of recording an Object, or
  // nullptr to record it. `callable` is usually a Global.
  std::function<Ref(const Value& callable, const Ref& args)> reduce;
};

// Unpickles the pickle at the start of `bytes`; `consumed`, when given, receives its length
// (torch's legacy format puts several pickles and raw data one after the other).
Ref unpickle(std::string_view bytes, const std::string& source, const Hooks& hooks = {}, size_t* consumed = nullptr);

}  // namespace trident::pickle
