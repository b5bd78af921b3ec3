// Takes a tool's own flags out of its command line and leaves the rest, in order, for
// parse_train_options (trident-eval and trident-plan take trident-train's flags plus a few).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/flag_value.h"
#include "train/options.h"

namespace trident {

// One of the tool's flags as it is met: `name` ("--iteration"), whether "=value" was
// attached, and value(), which reads the value (the attached one, else the next argument;
// a ConfigError "--name: expected a value" when there is none).
struct ToolFlag {
  std::string name;
  bool has_value = false;
  std::function<std::string()> value;
  // For a switch: "--name=..." is an error.
  void no_value() const {
    if (has_value) throw ConfigError(name + " takes no value (write " + name + " alone)");
  }
};

// Hands every argument to `own`, which returns false for one that is not the tool's; those
// are returned after `tool` (as argv[0]).
inline std::vector<std::string> take_tool_flags(int argc, char** argv, const char* tool,
                                                const std::function<bool(const ToolFlag&)>& own) {
  std::vector<std::string> rest = {tool};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    ToolFlag f{a, false, {}};
    std::string attached;
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      f.name = a.substr(0, eq);
      attached = a.substr(eq + 1);
      f.has_value = true;
    }
    f.value = [&]() -> std::string {
      if (f.has_value) return attached;
      check_separate_value(f.name, i + 1 < argc ? argv[i + 1] : nullptr);
      return argv[++i];
    };
    if (!own(f)) rest.push_back(a);
  }
  return rest;
}

// parse_train_options over the arguments take_tool_flags left (false after --help).
inline bool parse_train_options(const std::vector<std::string>& args, TrainOptions& opt) {
  std::vector<const char*> argv;
  for (const std::string& s : args) argv.push_back(s.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data(), opt);
}

}  // namespace trident
