// Megatron-core's files of data-path words, for blends too long for a command line:
// --data-args-path FILE holds --data-path's words (whitespace-separated), and
// --per-split-data-args-path FILE.json an object {"train": ..., "valid": ..., "test": ...},
// each --train-data-path's words as one string or a list of strings (null or empty: no data
// for that split). Every key is required, as Megatron's reader requires it.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace trident {

// The text of the file a flag names; ConfigError "FLAG <the read error>" when it cannot be read.
std::string read_flag_file(const std::string& flag, const std::string& path);
// The whitespace-separated words of `text`, as Python's str.split() cuts them.
std::vector<std::string> whitespace_words(const std::string& text);

// The words of a --data-args-path file; ConfigError naming the file when it cannot be read
// or holds none.
std::vector<std::string> read_data_args_file(const std::string& path);

// The train, valid and test words of a --per-split-data-args-path file; ConfigError naming
// the file and the key for anything else than the format above.
std::array<std::vector<std::string>, 3> read_per_split_data_args_file(const std::string& path);

}  // namespace trident
