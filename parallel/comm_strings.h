// Strings over a Comm (host memory): their length, then their bytes as I32 words. Used for
// the few small messages that are not tensors: checkpoint file lists, save tokens, and the
// error that one rank hit and every rank must report.
#pragma once

#include <functional>
#include <string>

#include "parallel/comm.h"

namespace trident {

// Rank `root`'s `s` into every rank's `s`. Collective over `c`.
void broadcast_string(Comm& c, std::string& s, int root);

void send_string(Comm& c, const std::string& s, int peer);
std::string recv_string(Comm& c, int peer);
// Sends `out` to `send_peer` while receiving the string `recv_peer` sends ("" where that side
// is absent: a peer of -1).
std::string exchange_string(Comm& c, const std::string& out, int send_peer, int recv_peer);

// A host buffer of int32 words, the form in which the strings travel.
Tensor host_i32(int32_t* data, int64_t n);

// The error of the lowest rank that has one (`mine`: this rank's, "" for none), on every
// rank; "" when no rank failed. Collective over `c`.
std::string first_failure(Comm& c, const std::string& mine);

// Runs `step` on this rank, then shares the lowest failing rank's error over `c`: a rank whose
// step threw rethrows its own exception (keeping its kind), every other rank throws a
// ConfigError with that rank's message (a StorageError for that rank's StorageError), so
// that no rank goes on to wait for one that stopped. Collective over `c`.
void run_sharing_first_failure(Comm& c, const std::function<void()>& step);

}  // namespace trident
