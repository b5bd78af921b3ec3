// Strings over a Comm (host memory): their length, then their bytes as I32 words. Used for
// the few small messages that are not tensors: checkpoint file lists, save tokens, and the
// error that one rank hit and every rank must report.
#pragma once

#include <string>

#include "parallel/comm.h"

namespace trident {

// Rank `root`'s `s` into every rank's `s`. Collective over `c`.
void broadcast_string(Comm& c, std::string& s, int root);

void send_string(Comm& c, const std::string& s, int peer);
std::string recv_string(Comm& c, int peer);

// The error of the lowest rank that has one (`mine`: this rank's, "" for none), on every
// rank; "" when no rank failed. Collective over `c`.
std::string first_failure(Comm& c, const std::string& mine);

}  // namespace trident
