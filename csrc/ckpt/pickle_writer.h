// Writes Python pickles (protocol 2, the one torch.save uses) of plain data, argparse
// Namespaces, OrderedDicts and torch tensors, value by value: a container is opened, its items
// written, and closed. For torch_file.h's writer; pickle_reader.h reads what this writes, and
// Python's pickle module (torch.load) too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trident::pickle {

class Writer {
 public:
  Writer();  // PROTO 2

  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void str(std::string_view s);
  void global(std::string_view module, std::string_view name);  // e.g. torch.bfloat16

  // Between begin and end: a dict's keys and values alternately; a tuple's or a list's items.
  void begin_dict();
  void begin_ordered_dict();  // collections.OrderedDict()
  void begin_namespace();     // argparse.Namespace() with the dict of its attributes
  void begin_tuple();
  void begin_list();
  // module.name(ARGS...) (REDUCE): its arguments' values between begin_call and end, e.g.
  // torch.Size((2, 3)) is begin_call("torch", "Size"), a tuple (2, 3), end().
  void begin_call(std::string_view module, std::string_view name);
  // An instance of module.name made as copyreg.__newobj__ makes it (NEWOBJ, no arguments),
  // whose state (a dict of its attributes, or what its __getstate__ returns) is the one value
  // written between begin_object and end (BUILD): how a dataclass pickles.
  void begin_object(std::string_view module, std::string_view name);
  void end();

  // torch._utils._rebuild_tensor_v2 of a contiguous tensor over the whole storage `key`
  // (a persistent id ('storage', torch.<storage_type>, key, 'cpu', numel)).
  void tensor(std::string_view storage_type, std::string_view key, const std::vector<int64_t>& shape);

  // STOP; the finished pickle.
  std::string finish();

 private:
  enum class Open { kDict, kNamespace, kTuple, kList, kCall, kObject };
  void op(char c) { out_ += c; }
  void le(uint64_t v, int n);
  std::string out_;
  std::vector<Open> open_;
};

}  // namespace trident::pickle
