// The arguments of trident-train's command line and of its --config file, gathered into one
// argument list for cxxopts (the file's first, so that the command line wins), with the word
// lists (--data-path 0.3 A 0.7 B, ...) taken out into TrainOptions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "train/options.h"

namespace trident::train_flags {

// The arguments cxxopts parses (the config file's first, so that the command line wins)
// and where the config file set the values that were kept.
struct GatheredArgs {
  std::vector<std::string> args;
  std::map<std::string, std::string> from_config;  // flag -> "file:line"
};

// The command line with the word lists and --config's file pulled out, the file's values
// dropped where the command line overrides them (overridden_by_command_line). ConfigError
// naming the flag, or the file and line.
GatheredArgs gather_args(int argc, const char* const* argv, TrainOptions& o);

// `msg` with the config file's line of each flag it names whose value came from the file.
std::string with_config_origins(const std::string& msg, const std::map<std::string, std::string>& from_config);

}  // namespace trident::train_flags
