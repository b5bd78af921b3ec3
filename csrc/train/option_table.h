// The flags trident-train knows (options.cpp parses with them): each flag with its help,
// Megatron's flags that change nothing here, the settings GPT-2 does one way, the other
// spellings of a flag, and the flags that choose one thing in different ways.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace trident::train_flags {

// Every flag is declared as a string; its typed conversion (options_flags.cpp) names the flag on error.
struct FlagDef {
  const char* name;
  const char* help;
  bool is_bool = false;
};

// Megatron's implementation switches that trident accepts and that change nothing here.
const std::vector<FlagDef>& flags_without_effect_defs();
// Megatron's list-valued flags that change nothing here (their words are read and dropped).
const std::vector<FlagDef>& list_flags_without_effect_defs();
bool is_list_flag_without_effect(const std::string& flag);

// Megatron's flags for what GPT-2 (or trident) does one way. A value flag that names that
// way is accepted (and listed with the flags without effect); another value, or any flag
// whose value is nullptr (a switch asking for something else), is refused with `why`. The
// --help text is derived from value and why.
struct FixedSetting {
  const char* name;
  bool is_bool;
  const char* value;  // the accepted value, or nullptr: refused whenever given
  const char* why;
  const char* also = nullptr;  // another spelling of the accepted value (Megatron-DeepSpeed's)
};
const std::vector<FixedSetting>& fixed_setting_defs();

// Every flag trident-train reads, with its --help text.
const std::vector<FlagDef>& flag_defs();
// The flag-list name of a flag typed under another spelling or name; `name` if none.
std::string megatron_spelling(const std::string& name);
// nullptr for a flag trident-train does not know.
const FlagDef* find_flag(const std::string& name);
// Whether the command line's flags override the config file's value of `flag`.
bool overridden_by_command_line(const std::string& flag, const std::set<std::string>& cli_flags);

}  // namespace trident::train_flags
