#include "train/replica_check.h"

#include <cstdint>
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
  size_t differing = 0, first = n;
  std::string ranks;
  for (size_t i = 0; i < n; ++i) {
    bool differs = false;
    for (int r = 1; r < size; ++r)
      if (all[static_cast<size_t>(r) * n + i] != all[i]) {
        differs = true;
        if (first == n || first == i) {
          first = i;
          ranks += (ranks.empty() ? "" : ", ") + std::to_string(r) +
                   (world.empty() ? std::string() : " (world rank " + std::to_string(world[static_cast<size_t>(r)]) + ")");
        }
      }
    differing += differs;
  }
  if (differing == 0) return "";
  std::string where = "data-parallel rank" + std::string(ranks.find(',') == std::string::npos ? " " : "s ") + ranks;
  return "the data-parallel replicas' parameters differ: " + list[first].spec.name + " on " + where +
         " is not data-parallel rank 0's" +
         (world.empty() ? std::string() : " (world rank " + std::to_string(world[0]) + ")") +
         (differing > 1 ? ", and " + std::to_string(differing - 1) + " more parameter" + (differing > 2 ? "s" : "") +
                              " differ"
                        : std::string());
}

}  // namespace trident
