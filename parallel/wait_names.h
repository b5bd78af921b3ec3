// What a communicator's waits are called in a timeout's line (collective_timeout.h): the
// op and the world ranks it waits for, e.g. "MPI allreduce among world ranks 0 2 4 6" or
// "NCCL point-to-point transfers with world rank 3 (receive), 5 (send)", so that the line
// of the rank that timed out points at the ranks to look at.
//
// The names are kept for the process's life: the watchdog reads a wait's name from its own
// thread, possibly while the next op runs or the communicator is being destroyed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace trident {

class WaitNames {
 public:
  // `transport`: "MPI" or "NCCL"; `world_ranks`: the world rank of each of the group's
  // ranks (Comm::world_ranks; empty when unknown: the names then name no ranks).
  WaitNames(std::string transport, std::vector<int> world_ranks);
  // The name of collective `op` ("allreduce", ...).
  const char* op(const std::string& op);
  // The name of an exchange of `transfers` (their peers are ranks of the group).
  const char* exchange(const std::vector<P2pTransfer>& transfers);

 private:
  std::string world_rank(int group_rank) const;
  std::string transport_;
  std::vector<int> world_ranks_;
  std::map<std::string, const char*> ops_;  // op -> its interned name
};

}  // namespace trident
