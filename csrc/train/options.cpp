// parse_train_options: the command line and the --config file (option_args.h) checked against
// the flag table (option_table.h) and parsed, then read into TrainOptions and validated (the
// options_*.cpp files, options_internal.h); and what TrainOptions answers about itself.
#include "train/options.h"

#include <cstddef>
#include <cxxopts.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/flag_value.h"
#include "parallel/pipeline_layout.h"
#include "train/option_args.h"
#include "train/option_table.h"
#include "train/options_internal.h"

namespace trident {
using namespace train_flags;  // the flag table and the argument gathering of option_*.h

bool parse_train_options(int argc, const char* const* argv, TrainOptions& o) {
  const GatheredArgs gathered = gather_args(argc, argv, o);
  const std::vector<std::string>& args = gathered.args;
  cxxopts::Options options("trident-train", "Train GPT-2 (Megatron-compatible flags)");
  for (const FlagDef& d : flag_defs()) {
    if (d.is_bool)
      options.add_options()(d.name, d.help);
    else
      options.add_options()(d.name, d.help, cxxopts::value<std::string>());
  }
  // Name the unknown flags exactly as the user typed them, all in the one line (a script
  // brought over from Megatron would otherwise take one try per flag).
  std::string unknown;
  int unknown_count = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagDef* def = find_flag(name);
    if (!def) {
      unknown += (unknown.empty() ? "--" : ", --") + name;
      ++unknown_count;
      continue;
    }
    check_flag_word("--" + name, def->is_bool, eq != std::string::npos,
                    i + 1 < args.size() ? args[i + 1].c_str() : nullptr);
  }
  if (unknown_count > 0)
    throw ConfigError((unknown_count == 1 ? "unknown flag " : "unknown flags ") + unknown + " (see --help)");
  std::vector<const char*> cargv;
  for (const std::string& s : args) cargv.push_back(s.c_str());
  cxxopts::ParseResult r;
  try {
    r = options.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  if (!r.unmatched().empty()) throw ConfigError("unexpected argument '" + r.unmatched()[0] + "'");
  if (r.count("help")) {
    std::cout << options.help() << std::endl;
    return false;
  }
  try {
    const options_internal::Flags flags(std::move(r));
    options_internal::read_train_flags(flags, o);
    options_internal::validate_train_options(o);
  } catch (const ConfigError& e) {
    throw ConfigError(with_config_origins(e.what(), gathered.from_config));
  }
  return true;
}

std::string TrainOptions::non_persistent_dir(const std::string& base) const {
  if (!non_persistent_global_ckpt_dir.empty()) return non_persistent_global_ckpt_dir;
  return (std::filesystem::path(base) / "non_persistent").string();  // Megatron's subfolder
}

int TrainOptions::virtual_pipeline_chunks() const {
  if (!uneven_pipeline.layout.empty())
    return pipeline_layout_chunks(uneven_pipeline.layout, pipeline_model_parallel_size);
  if (num_virtual_stages_per_pipeline_rank > 0) return num_virtual_stages_per_pipeline_rank;
  if (num_layers_per_virtual_pipeline_stage > 0) {
    // Megatron counts the embedding and the loss among the layers a chunk holds where they count.
    return counted_layers(model.num_layers, uneven_pipeline) /
           (pipeline_model_parallel_size * num_layers_per_virtual_pipeline_stage);
  }
  return 1;
}

PipelineSplit TrainOptions::pipeline_split() const {
  return PipelineSplit{model.num_layers, pipeline_model_parallel_size, virtual_pipeline_chunks(), uneven_pipeline};
}

}  // namespace trident
