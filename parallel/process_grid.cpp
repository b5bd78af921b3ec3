#include "parallel/process_grid.h"

#include <string>

#include "core/error.h"

namespace trident {

GridShape make_grid_shape(int world, int tp, int pp) {
  if (tp <= 0) throw ConfigError("--tensor-model-parallel-size must be positive");
  if (pp <= 0) throw ConfigError("--pipeline-model-parallel-size must be positive");
  if (world % (tp * pp) != 0)
    throw ConfigError("world size " + std::to_string(world) + " is not divisible by --tensor-model-parallel-size (" +
                      std::to_string(tp) + ") x --pipeline-model-parallel-size (" + std::to_string(pp) + ")");
  return GridShape{world, tp, pp, world / (tp * pp)};
}

ProcessGrid::ProcessGrid(const GridShape& s, int world_rank) : shape(s), rank(world_rank) {
  tp_rank = world_rank % s.tp;
  dp_rank = (world_rank / s.tp) % s.dp;
  pp_rank = world_rank / (s.tp * s.dp);
}

std::vector<int> ProcessGrid::tp_group() const {
  std::vector<int> g;
  for (int t = 0; t < shape.tp; ++t) g.push_back(rank_of(t, dp_rank, pp_rank));
  return g;
}

std::vector<int> ProcessGrid::dp_group() const {
  std::vector<int> g;
  for (int d = 0; d < shape.dp; ++d) g.push_back(rank_of(tp_rank, d, pp_rank));
  return g;
}

std::vector<int> ProcessGrid::pp_group() const {
  std::vector<int> g;
  for (int p = 0; p < shape.pp; ++p) g.push_back(rank_of(tp_rank, dp_rank, p));
  return g;
}

std::vector<int> ProcessGrid::embedding_group() const {
  if (shape.pp == 1) return {rank_of(tp_rank, dp_rank, 0)};
  return {rank_of(tp_rank, dp_rank, 0), rank_of(tp_rank, dp_rank, shape.pp - 1)};
}

}  // namespace trident
