// Every rank of a job must read the same data. The flags' data paths are not compared
// (flags_every_rank_shares: nodes may mount the data at other places), so ranks given other
// files (a node's stale copy, an MPMD launch with another --data-path) would train one model
// on different samples without a word; under tensor parallelism the ranks of one layer would
// even compute it from different tokens. What each prefix holds is compared instead.
#pragma once

#include <functional>
#include <vector>

#include "data/gpt_dataset.h"
#include "parallel/comm.h"

namespace trident {

// Compares this rank's `identify()` (gpt_dataset_identities) with rank 0's: ConfigError on
// every rank, naming the first rank that differs, the prefix (flag and position) and both
// ranks' paths and contents, when a prefix's content, or the number of prefixes, differs. When
// `identify` throws on some rank (a prefix that does not open), every rank throws: that rank
// its own error, the others the lowest failing rank's as a ConfigError. Collective over `world`.
void check_every_rank_reads_the_same_data(Comm& world,
                                          const std::function<std::vector<DatasetIdentity>()>& identify);

}  // namespace trident
