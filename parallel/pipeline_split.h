// Which transformer layers each pipeline stage, and each model chunk of a stage, holds.
//
// Without Megatron's uneven-split flags the layers are split as evenly as possible (trident
// also takes layer counts the stages do not divide; see default_stage_layer_counts). With them
// the split is Megatron-core's (get_num_layers_to_build, get_transformer_layer_offset):
// - --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers give the first
//   and the last stage their own counts, and the other stages share the rest equally;
// - --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split count
//   the embedding (the loss) as one more layer of the first (the last) stage, which then
//   builds one transformer layer fewer.
// With an interleaved schedule each stage's layers are cut into equal model chunks, and
// layers are numbered chunk by chunk, stage by stage within a chunk (Megatron's order); the
// embedding (the loss) counts in the first (the last) stage's first (last) chunk.
// --pipeline-model-parallel-layout (parallel/pipeline_layout.h) instead spells out every
// stage's and chunk's layers, and so the chunk count too.
#pragma once

#include <string>
#include <vector>

namespace trident {

// Transformer layers [begin, end).
struct LayerRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};

// Megatron's flags for an uneven pipeline; a count of 0, an empty layout is "not given".
struct UnevenPipeline {
  int first_stage_layers = 0;  // --decoder-first-pipeline-num-layers
  int last_stage_layers = 0;   // --decoder-last-pipeline-num-layers
  bool embedding_as_layer = false;  // --account-for-embedding-in-pipeline-split
  bool loss_as_layer = false;       // --account-for-loss-in-pipeline-split
  std::string layout;               // --pipeline-model-parallel-layout, as given
  bool any() const {
    return first_stage_layers > 0 || last_stage_layers > 0 || embedding_as_layer || loss_as_layer || !layout.empty();
  }
  bool operator==(const UnevenPipeline&) const = default;
};

struct PipelineSplit {
  int num_layers = 1;
  int stages = 1;
  int chunks = 1;  // model chunks a stage (interleaved schedule)
  UnevenPipeline uneven;
};

// A split without Megatron's uneven-stage flags.
inline PipelineSplit plain_split(int num_layers, int stages, int chunks = 1) {
  return PipelineSplit{num_layers, stages, chunks, UnevenPipeline{}};
}

// Why `s` cannot be built, in Megatron's flag names ("" when it can). Zero layers in a
// stage's chunk are allowed where the embedding or the loss takes a layer's place, and
// anywhere a layout puts none.
std::string pipeline_split_error(const PipelineSplit& s);

// counts[stage][chunk]: the transformer layers of each chunk of each stage. `s` must be valid.
std::vector<std::vector<int>> pipeline_layer_counts(const PipelineSplit& s);

// The layers of each chunk of stage `stage`.
std::vector<LayerRange> pipeline_chunk_layers(const PipelineSplit& s, int stage);

// The stage that holds transformer layer `layer`.
int pipeline_stage_of_layer(const PipelineSplit& s, int layer);

// The layers Megatron splits: the transformer layers, and the embedding and the loss where the
// flags count them.
inline int counted_layers(int num_layers, const UnevenPipeline& u) {
  return num_layers + (u.embedding_as_layer ? 1 : 0) + (u.loss_as_layer ? 1 : 0);
}

// What the flags count as layers: "the embedding and the loss", "the embedding", "the loss"
// or "", for messages.
std::string counted_as_layers(const UnevenPipeline& u);

// "stages of 3, 2, 2 and 1 layers" (with chunks: "stages of [1, 2], [2, 1] layers"), for messages.
std::string pipeline_split_text(const PipelineSplit& s);

}  // namespace trident
