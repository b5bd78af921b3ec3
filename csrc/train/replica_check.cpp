#include "train/replica_check.h"

#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "ckpt/checksum.h"

namespace trident {
namespace {

// Test hook: the data-parallel rank named by TRIDENT_TEST_DIVERGE_REPLICA hashes its first
// parameter as though one byte differed, as a corrupted copy would.
bool diverge_here(int dp_rank) {
  const char* v = std::getenv("TRIDENT_TEST_DIVERGE_REPLICA");
  return v != nullptr && std::atoi(v) == dp_rank;
}

}  // namespace

std::string replica_mismatch(Backend& be, const ParamStore& params, Comm& dp) {
  const std::vector<LocalParam>& list = params.list();
  const size_t n = list.size();
  const int size = dp.size(), me = dp.rank();
  std::vector<uint64_t> all(n * static_cast<size_t>(size));
  std::vector<unsigned char> bytes;
  for (size_t i = 0; i < n; ++i) {
    const Tensor t = params.param(list[i]);
    bytes.resize(t.nbytes());
    be.copy_to_host(bytes.data(), t);
    if (i == 0 && !bytes.empty() && diverge_here(me)) bytes[0] ^= 1;
    Xxh3Hasher h;
    h.update(bytes.data(), bytes.size());
    all[static_cast<size_t>(me) * n + i] = h.value();
  }
  // Gathered as int32 words (the communicators carry no 64-bit integers); this rank's slot
  // holds its own hashes already.
  const auto words = [](uint64_t* p, size_t count) {
    return Tensor(p, Shape{static_cast<int64_t>(2 * count)}, DType::I32, Device::Cpu);
  };
  dp.allgather(words(all.data() + static_cast<size_t>(me) * n, n), words(all.data(), all.size()));
  const std::vector<int> world = dp.world_ranks();
  const auto rank_name = [&](int r) {
    return std::to_string(r) + (world.empty() ? std::string() : " (world rank " + std::to_string(world[r]) + ")");
  };
  size_t differing = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    bool differs = false;
    for (int r = 1; r < size; ++r) differs = differs || all[static_cast<size_t>(r) * n + i] != all[i];
    if (differs && first == n) first = i;
    differing += differs;
  }
  if (differing == 0) return "";
  // The replicas of the first differing parameter, grouped by their copy: where one copy is
  // held by more replicas than any other, the others are named as the odd ones out (a
  // corrupted replica, often); with no such majority every group is listed.
  std::vector<std::pair<uint64_t, std::vector<int>>> groups;
  for (int r = 0; r < size; ++r) {
    const uint64_t h = all[static_cast<size_t>(r) * n + first];
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == h; });
    if (g == groups.end()) groups.push_back({h, {r}});
    else g->second.push_back(r);
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  const auto names = [&](const std::vector<int>& ranks) {
    std::string s;
    for (size_t k = 0; k < ranks.size(); ++k)
      s += (k == 0 ? "" : k + 1 == ranks.size() ? " and " : ", ") + rank_name(ranks[k]);
    return s;
  };
  std::string what = list[first].spec.name + ": ";
  if (groups[0].second.size() > groups[1].second.size()) {
    std::vector<int> odd;
    for (size_t g = 1; g < groups.size(); ++g) odd.insert(odd.end(), groups[g].second.begin(), groups[g].second.end());
    std::sort(odd.begin(), odd.end());
    what += "data-parallel rank" + std::string(odd.size() > 1 ? "s " : " ") + names(odd) + " hold" +
            (odd.size() > 1 ? "" : "s") + " another copy than the other " + std::to_string(groups[0].second.size()) +
            " replicas";
  } else {
    what += "the copies of data-parallel ranks";
    for (size_t g = 0; g < groups.size(); ++g) what += std::string(g == 0 ? " [" : ", [") + names(groups[g].second) + "]";
    what += " differ, none held by most replicas";
  }
  if (differing > 1)
    what += ", and " + std::to_string(differing - 1) + " more parameter" + (differing > 2 ? "s differ" : " differs");
  return "the data-parallel replicas' parameters differ: " + what;
}

}  // namespace trident
