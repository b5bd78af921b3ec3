// The pipeline's layer split against Megatron-core's closed forms (get_num_layers_to_build and
// get_transformer_layer_offset, transcribed below as formulas per stage and chunk), and
// trident's own split where Megatron's flags are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "parallel/pipeline_split.h"

namespace trident {
namespace {

std::string describe(const PipelineSplit& s) {
  return std::to_string(s.num_layers) + " layers, pp " + std::to_string(s.stages) + ", " + std::to_string(s.chunks) +
         " chunks, first " + std::to_string(s.uneven.first_stage_layers) + ", last " +
         std::to_string(s.uneven.last_stage_layers) + (s.uneven.embedding_as_layer ? ", embedding" : "") +
         (s.uneven.loss_as_layer ? ", loss" : "");
}

// Megatron-core's layers to build on stage p, chunk v; nullopt where Megatron refuses the
// configuration (its argument and TransformerConfig checks, and the asserts of the function).
std::optional<int> megatron_layers_to_build(const PipelineSplit& s, int p, int v) {
  const int L = s.num_layers, P = s.stages, V = s.chunks, first = s.uneven.first_stage_layers,
            last = s.uneven.last_stage_layers;
  const bool emb = s.uneven.embedding_as_layer, loss = s.uneven.loss_as_layer;
  if (V > 1 && P == 1) return std::nullopt;
  int per_rank = 0;
  if (first > 0 || last > 0) {
    if (emb || loss || P == 1) return std::nullopt;
    const int rest = L - first - last, left = P - (first > 0) - (last > 0);
    if (rest < 0 || (rest != 0) != (left != 0) || (left != 0 && rest % left != 0)) return std::nullopt;
    if (first % V != 0 || last % V != 0) return std::nullopt;
    per_rank = left != 0 ? rest / left : 0;
    if (p == 0 && first > 0) per_rank = first;
    if (p == P - 1 && last > 0) per_rank = last;
  } else {
    const int counted = L + emb + loss;
    if (counted % P != 0) return std::nullopt;
    per_rank = counted / P;
  }
  if (per_rank % V != 0) return std::nullopt;
  int build = per_rank / V;
  if (p == 0 && v == 0 && emb) --build;
  if (p == P - 1 && v == V - 1 && loss) --build;
  if (build < 0) return std::nullopt;
  return build;
}

// Megatron-core's first global layer of stage p, chunk v (for a configuration it accepts).
int megatron_layer_offset(const PipelineSplit& s, int p, int v) {
  const int L = s.num_layers, P = s.stages, V = s.chunks, first = s.uneven.first_stage_layers,
            last = s.uneven.last_stage_layers;
  const bool emb = s.uneven.embedding_as_layer, loss = s.uneven.loss_as_layer;
  if (P == 1) return 0;
  if (first > 0 || last > 0) {
    const int middle_stages = P - (first > 0) - (last > 0), middle_layers = L - first - last;
    const int middle_rank = first > 0 ? p - 1 : p;
    if (V > 1) {
      const int first_chunk = first / V, last_chunk = last / V, middle_chunk = middle_layers / V;
      const int total = first_chunk + middle_chunk + last_chunk;
      if (p == 0) return v * total;
      return v * total + first_chunk + middle_rank * (middle_stages > 0 ? middle_chunk / middle_stages : 0);
    }
    const int per = middle_stages > 0 ? middle_layers / middle_stages : 0;
    return p == 0 ? 0 : middle_rank * per + first;
  }
  const int counted = L + emb + loss, per = counted / P;
  int offset = V > 1 ? v * (counted / V) + p * (per / V) : p * per;
  if (emb && !(p == 0 && v == 0)) --offset;
  return offset;
}

TEST(PipelineSplit, MatchesMegatronWhereItsFlagsAreGiven) {
  int checked = 0, refused = 0;
  for (int L = 1; L <= 16; ++L)
    for (int P = 1; P <= 5; ++P)
      for (int V = 1; V <= 3; ++V)
        for (int first = 0; first <= 6; ++first)
          for (int last = 0; last <= 6; ++last)
            for (int flags = 0; flags < 4; ++flags) {
              const PipelineSplit s{L, P, V, UnevenPipeline{first, last, (flags & 1) != 0, (flags & 2) != 0, {}}};
              if (!s.uneven.any()) continue;
              bool megatron_accepts = true;
              for (int p = 0; p < P; ++p)
                for (int v = 0; v < V; ++v) megatron_accepts &= megatron_layers_to_build(s, p, v).has_value();
              const std::string why = pipeline_split_error(s);
              ASSERT_EQ(why.empty(), megatron_accepts) << describe(s) << ": " << why;
              if (!megatron_accepts) {
                ++refused;
                continue;
              }
              std::vector<int> owner(L, -1);
              for (int p = 0; p < P; ++p) {
                const std::vector<LayerRange> chunks = pipeline_chunk_layers(s, p);
                ASSERT_EQ(static_cast<int>(chunks.size()), V);
                for (int v = 0; v < V; ++v) {
                  EXPECT_EQ(chunks[v].begin, megatron_layer_offset(s, p, v)) << describe(s) << " stage " << p << " chunk " << v;
                  EXPECT_EQ(chunks[v].size(), *megatron_layers_to_build(s, p, v)) << describe(s) << " stage " << p
                                                                                  << " chunk " << v;
                  for (int l = chunks[v].begin; l < chunks[v].end; ++l) {
                    ASSERT_TRUE(l >= 0 && l < L && owner[l] == -1) << describe(s) << ": layer " << l;
                    owner[l] = p;
                  }
                }
              }
              for (int l = 0; l < L; ++l) ASSERT_EQ(pipeline_stage_of_layer(s, l), owner[l]) << describe(s);
              ++checked;
            }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(PipelineSplit, EvenSplitsAreMegatrons) {
  for (int L = 1; L <= 24; ++L)
    for (int P = 1; P <= 6; ++P)
      for (int V = 1; V <= 4; ++V) {
        const PipelineSplit s = plain_split(L, P, V);
        if (L % (P * V) != 0 || (V > 1 && P == 1)) {
          EXPECT_EQ(pipeline_split_error(s).empty(), V == 1 && P <= L) << describe(s);
          continue;
        }
        for (int p = 0; p < P; ++p)
          for (int v = 0; v < V; ++v) {
            const LayerRange r = pipeline_chunk_layers(s, p)[v];
            EXPECT_EQ(r.begin, megatron_layer_offset(s, p, v)) << describe(s);
            EXPECT_EQ(r.size(), *megatron_layers_to_build(s, p, v)) << describe(s);
          }
      }
}

TEST(PipelineSplit, LayersStagesDoNotDivideGoToTheMiddleStagesFirst) {
  for (int L = 1; L <= 40; ++L)
    for (int P = 1; P <= std::min(L, 8); ++P) {
      int next = 0, lo = L, hi = 0;
      for (int p = 0; p < P; ++p) {
        const LayerRange r = pipeline_chunk_layers(plain_split(L, P), p).front();
        EXPECT_EQ(r.begin, next) << L << " layers, " << P << " stages, stage " << p;
        EXPECT_GE(r.size(), 1);
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
        next = r.end;
      }
      EXPECT_EQ(next, L);
      EXPECT_LE(hi - lo, 1) << L << " layers over " << P << " stages";
    }
  const auto size = [](int L, int P, int p) { return pipeline_chunk_layers(plain_split(L, P), p).front().size(); };
  EXPECT_EQ(size(5, 4, 3), 1);  // the last stage (LM head) gets no extra layer
  EXPECT_EQ(size(5, 4, 1), 2);
  EXPECT_EQ(size(3, 2, 0), 2);
  EXPECT_EQ(size(7, 4, 0), 2);  // middle two get one each, then the first
  EXPECT_EQ(pipeline_stage_of_layer(plain_split(7, 4), 1), 0);
  EXPECT_EQ(pipeline_stage_of_layer(plain_split(7, 4), 2), 1);
  EXPECT_EQ(pipeline_stage_of_layer(plain_split(7, 4), 6), 3);
}

TEST(PipelineSplit, WorkedExamples) {
  // 8 layers, 2 stages, 2 chunks: chunk c of stage p is slice 2c + p of four.
  const PipelineSplit interleaved = plain_split(8, 2, 2);
  EXPECT_EQ(pipeline_chunk_layers(interleaved, 0)[1].begin, 4);
  EXPECT_EQ(pipeline_chunk_layers(interleaved, 1)[0].begin, 2);
  EXPECT_EQ(pipeline_split_text(interleaved), "stages of [2, 2] and [2, 2] layers");
  // gpt2-16b's 40 layers on 8 stages with the LM head counted: 41 does not divide by 8.
  EXPECT_NE(pipeline_split_error(PipelineSplit{40, 8, 1, UnevenPipeline{0, 0, false, true, {}}}), "");
  // 38 layers with the embedding and the loss: 5 a stage, the ends 4.
  const PipelineSplit both{38, 8, 1, UnevenPipeline{0, 0, true, true, {}}};
  EXPECT_EQ(pipeline_split_text(both), "stages of 4, 5, 5, 5, 5, 5, 5 and 4 layers");
  // 40 layers, the last stage 2: the other 7 stages share 38, which they cannot.
  EXPECT_NE(pipeline_split_error(PipelineSplit{40, 8, 1, UnevenPipeline{0, 2, false, false, {}}}).find("7 other stages"),
            std::string::npos);
  EXPECT_EQ(pipeline_split_text(PipelineSplit{8, 3, 1, UnevenPipeline{2, 2, false, false, {}}}),
            "stages of 2, 4 and 2 layers");
  // A stage the embedding and the loss leave empty: 2 layers, pp 4.
  EXPECT_EQ(pipeline_split_text(PipelineSplit{2, 4, 1, UnevenPipeline{0, 0, true, true, {}}}),
            "stages of 0, 1, 1 and 0 layers");
  EXPECT_NE(pipeline_split_error(PipelineSplit{8, 1, 1, UnevenPipeline{4, 0, false, false, {}}}), "");
}

}  // namespace
}  // namespace trident
