// BigScience Megatron-DeepSpeed's second way of giving data ("Data loading Mode 2"):
// --train-weighted-split-paths, --valid-weighted-split-paths, --test-weighted-split-paths, each
// one or more groups (the training exactly one), a group one word:
//
//   "NAME: W1 S1:E1 PREFIX1, W2 S2:E2 PREFIX2, ..."
//
// a name, then comma-separated datasets of three words: a weight, the fractions start:end of
// the dataset's documents read (documents [round(S n), round(E n)) of n, data/gpt_dataset.h's
// document_range), and a .bin/.idx prefix. A group of several datasets blends them by their
// normalised weights (ceil(n w 1.005) samples asked of each, as Megatron's blends); a group of
// one is that dataset alone. Each validation group is evaluated alone and reported under its
// name; so is each test group.
//
// The -path forms (--valid-weighted-split-paths-path FILE, ...) read the groups from a file, by
// BigScience's parse_data_paths_path rule: exactly one line, ended by a newline, that starts
// with '"' and ends with '"'; the groups are what lies between, cut at each '" "' (quote,
// space, quote):
//
//   "TRAIN: 1 0:0.9 /data/a, 2 0:1 /data/b"\n
//   "WIKI: 1 0.9:1 /data/a" "BOOKS: 1 0.95:1 /data/b"\n     (a --valid-...-path file)
#pragma once

#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace trident {

struct WeightedSplitGroup {
  std::string name;
  // The datasets: prefixes, weights normalised to sum 1, and fractions; flag names the group
  // ("--valid-weighted-split-paths group WIKI") for the data's errors.
  DataBlend blend;
};

// The groups of one flag's words, each word one group. `flag` names the source in errors (the
// flag, or "--valid-weighted-split-paths-path FILE"); `one_group` is the training's rule.
// ConfigError naming `flag` and the offending group for: no colon, an empty name, a dataset
// that is not WEIGHT START:END PREFIX, a weight that is not a non-negative number (weights
// summing to zero when several), fractions outside 0 <= START < END <= 1, two groups of one
// name, and several groups where one is taken.
std::vector<WeightedSplitGroup> parse_weighted_split_paths(const std::vector<std::string>& words,
                                                           const std::string& flag, bool one_group);

// The group words of a -path file (format above); ConfigError naming `flag` and the file for
// a file that cannot be read or breaks the rule.
std::vector<std::string> read_weighted_split_paths_file(const std::string& path, const std::string& flag);

}  // namespace trident
