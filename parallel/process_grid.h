// ProcessGrid: a rank's (tp, dp, pp) coordinate in Megatron's order,
//   rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank,
// and the member lists of its groups: TP groups are contiguous ranks (one node), PP groups
// stride by dp * tp, and the embedding group is the first and last stage of a pipeline.
#pragma once

#include <vector>

namespace trident {

struct GridShape {
  int world = 1, tp = 1, pp = 1, dp = 1;
};

// Checks world == tp * pp * dp for the given tp and pp; throws ConfigError naming
// --tensor-model-parallel-size / --pipeline-model-parallel-size otherwise.
GridShape make_grid_shape(int world, int tp, int pp);

struct ProcessGrid {
  GridShape shape;
  int rank = 0;
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;

  ProcessGrid() = default;
  ProcessGrid(const GridShape& s, int world_rank);

  int rank_of(int tp_r, int dp_r, int pp_r) const { return pp_r * shape.dp * shape.tp + dp_r * shape.tp + tp_r; }
  std::vector<int> tp_group() const;
  std::vector<int> dp_group() const;
  std::vector<int> pp_group() const;
  std::vector<int> embedding_group() const;  // {first, last} stage of this pipeline (one rank if pp == 1)
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == shape.pp - 1; }
};

}  // namespace trident
