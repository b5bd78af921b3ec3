#include "parallel/wait_names.h"

#include <mutex>
#include <set>
#include <utility>

namespace trident {
namespace {

// The names live as long as the process: the watchdog thread may still be printing a wait's
// name while the main thread, its wait over, destroys the communicator that named it (after
// MPI_Abort from the watchdog, the main thread goes on until the job is killed).
const char* intern(std::string name) {
  static std::mutex mu;
  static auto* names = new std::set<std::string>();  // never destroyed; node addresses are stable
  const std::lock_guard<std::mutex> lock(mu);
  return names->insert(std::move(name)).first->c_str();
}

}  // namespace

WaitNames::WaitNames(std::string transport, std::vector<int> world_ranks)
    : transport_(std::move(transport)), world_ranks_(std::move(world_ranks)) {}

std::string WaitNames::world_rank(int group_rank) const {
  if (group_rank >= 0 && group_rank < static_cast<int>(world_ranks_.size()))
    return std::to_string(world_ranks_[group_rank]);
  return "?";
}

const char* WaitNames::op(const std::string& op) {
  auto it = ops_.find(op);
  if (it != ops_.end()) return it->second;
  std::string name = transport_ + " " + op;
  if (!world_ranks_.empty()) {  // at most 16 named, then how many more
    name += world_ranks_.size() == 1 ? " among world rank" : " among world ranks";
    for (size_t i = 0; i < world_ranks_.size() && i < 16; ++i) name.append(" ").append(std::to_string(world_ranks_[i]));
    if (world_ranks_.size() > 16) name.append(" and ").append(std::to_string(world_ranks_.size() - 16)).append(" more");
  }
  return ops_.emplace(op, intern(std::move(name))).first->second;
}

const char* WaitNames::exchange(const std::vector<P2pTransfer>& transfers) {
  std::string name = transport_ + " point-to-point transfers";
  if (!world_ranks_.empty() && !transfers.empty()) {
    name += " with world rank";
    for (size_t i = 0; i < transfers.size(); ++i)
      name.append(i ? ", " : " ").append(world_rank(transfers[i].peer)).append(transfers[i].send ? " (send)" : " (receive)");
  }
  return intern(std::move(name));
}

}  // namespace trident
