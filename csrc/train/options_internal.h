// What the options*.cpp files share and nothing else includes: typed access to the parsed flags,
// and the steps of parse_train_options (options.cpp) that live in the other files.
//   options_flags.cpp         a flag's text as a number (convert), a word list as one text
//   options_read.cpp          the flags into TrainOptions, in the order their errors fire:
//                             the model, the schedule, the optimizer, the precision, then
//   options_deepspeed.cpp       the --deepspeed_config file over Megatron's flags,
//   options_read_run.cpp        the run's: layout, evaluation, logging, stopping, checkpoints,
//   options_read_data.cpp       the data's and the tokenizer's
//   options_validate.cpp      the checks across flags, once all are read
//   options_schedule.cpp      the schedule in samples, and the counts that follow from it
//   options_derived.cpp       the objects built from the options (schedules, loss scaler, backend)
//   options_shared_flags.cpp  what every rank of a job must have been given
#pragma once

#include <cxxopts.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "train/options.h"

namespace trident::options_internal {

// `raw` (a flag's value) as a T, as Megatron's argparse reads it: Python's int() and float(),
// which take underscores between digits (--train-samples 300_000_000); a float or double is
// decimal only and finite, a uint64_t has no minus sign. Anything else is a ConfigError naming
// `flag`. Defined for int, int64_t, uint64_t, float and double (options_flags.cpp).
template <typename T>
T convert(const std::string& flag, const std::string& raw);

// Typed access to the parsed flags; every conversion error names the flag.
class Flags {
 public:
  explicit Flags(cxxopts::ParseResult r) : r_(std::move(r)) {}
  bool has(const char* f) const { return r_.count(f) > 0; }
  std::string str(const char* f) const { return r_[f].as<std::string>(); }
  // `dst` from the flag when it was given (a switch: true), else left as it is.
  template <typename T>
  void get(const char* f, T& dst) const {
    if (!has(f)) return;
    if constexpr (std::is_same_v<T, std::string>) dst = str(f);
    else if constexpr (std::is_same_v<T, bool>) dst = true;
    else dst = convert<T>(f, str(f));
  }

 private:
  cxxopts::ParseResult r_;
};

// A word-list flag's words as one text, a space apart.
std::string join_words(const std::vector<std::string>& words);

// Every flag into `o`, each reader refusing what it can tell alone (options_read.cpp). Any
// value that does not convert throws as it is read, so the readers' order is the order in
// which a user with several wrong flags sees the errors.
void read_train_flags(const Flags& f, TrainOptions& o);
// The flags of the run after the model, schedule, optimizer and precision (options_read_run.cpp).
void read_run_flags(const Flags& f, TrainOptions& o);
// The data and tokenizer flags (options_read_data.cpp); read_run_flags reads them last.
void read_data_flags(const Flags& f, TrainOptions& o);
// --deepspeed with its --deepspeed_config file (options_deepspeed.cpp): after the batch and
// precision flags are read, before read_run_flags.
void apply_deepspeed_config(const Flags& f, TrainOptions& o);
// Megatron-LM's rule that bf16 accumulates and reduces the gradients in fp32 (options_read.cpp);
// the --deepspeed_config file's precision applies it again.
void apply_bf16_gradient_rule(const Flags& f, TrainOptions& o);
// Whether --openai-gelu asks Megatron's legacy model for its tanh GELU (options_read.cpp).
bool legacy_tanh_gelu(const Flags& f);

// The checks across flags, and the word lists that need other flags to be read, once every
// flag is in `o` (options_validate.cpp); resolves the schedule.
void validate_train_options(TrainOptions& o);

}  // namespace trident::options_internal
