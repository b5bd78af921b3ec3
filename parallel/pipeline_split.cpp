#include "parallel/pipeline_split.h"

#include "core/error.h"
#include "parallel/pipeline_layout.h"

namespace trident {
namespace {

std::string n(int v) { return std::to_string(v); }

// Without Megatron's flags and chunks: as even as possible; layers that do not divide go to
// the middle stages first, then to the first stage, and to the last only when nothing else is
// left, because the first stage also runs the embedding and the last the LM head and loss
// (the costliest part).
std::vector<int> default_stage_layer_counts(int num_layers, int stages) {
  std::vector<int> count(stages, num_layers / stages);
  int extra = num_layers % stages;
  std::vector<int> order;  // who gets an extra layer first
  for (int r = 1; r + 1 < stages; ++r) order.push_back(r);
  order.push_back(0);
  if (stages > 1) order.push_back(stages - 1);
  for (int i = 0; extra > 0; ++i, --extra) ++count[order[i]];
  return count;
}

// Each stage's layers, the embedding and loss counted as layers where the flags say so.
// Empty with `why` set when the flags cannot be met.
std::vector<int> stage_totals(const PipelineSplit& s, std::string& why) {
  const UnevenPipeline& u = s.uneven;
  const int P = s.stages, L = s.num_layers;
  if (!u.any()) {
    if (P > L) why = "--pipeline-model-parallel-size (" + n(P) + ") must not exceed --num-layers (" + n(L) + ")";
    else if (s.chunks > 1 && L % (P * s.chunks) != 0)
      why = "--num-layers (" + n(L) + ") must be a multiple of --pipeline-model-parallel-size (" + n(P) + ") x " +
            n(s.chunks) + " model chunks";
    return why.empty() ? default_stage_layer_counts(L, P) : std::vector<int>{};
  }
  if (u.first_stage_layers > 0 || u.last_stage_layers > 0) {
    if (u.embedding_as_layer || u.loss_as_layer) {
      why = "--decoder-first/last-pipeline-num-layers and --account-for-embedding/loss-in-pipeline-split are "
            "alternatives: give one kind";
      return {};
    }
    if (P == 1) {
      why = "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size above 1";
      return {};
    }
    int rest = L, middle = P;
    if (u.first_stage_layers > 0) rest -= u.first_stage_layers, --middle;
    if (u.last_stage_layers > 0) rest -= u.last_stage_layers, --middle;
    const std::string ends = (u.first_stage_layers > 0 && u.last_stage_layers > 0 ? "the first and last stages' "
                              : u.first_stage_layers > 0                          ? "the first stage's "
                                                                                  : "the last stage's ") +
                             n(u.first_stage_layers + u.last_stage_layers);
    if (rest < 0)
      why = ends + " layers exceed --num-layers (" + n(L) + ")";
    else if (middle == 0 && rest > 0)
      why = "with no stage between the first and the last, " + ends + " layers must be --num-layers (" + n(L) + ")";
    else if (middle > 0 && (rest == 0 || rest % middle != 0))
      why = "--num-layers (" + n(L) + ") less " + ends + " leaves " + n(rest) + " layers for " + n(middle) +
            " other stage" + (middle == 1 ? "" : "s") + ": they must share them equally, a layer at least each";
    if (!why.empty()) return {};
    std::vector<int> totals(P, middle > 0 ? rest / middle : 0);
    if (u.first_stage_layers > 0) totals.front() = u.first_stage_layers;
    if (u.last_stage_layers > 0) totals.back() = u.last_stage_layers;
    return totals;
  }
  const int counted = counted_layers(L, u);
  if (counted % P != 0) {
    why = "--num-layers (" + n(L) + ") and " + counted_as_layers(u) + ", counted as layers (" + n(counted) +
          " in all), must be a multiple of --pipeline-model-parallel-size (" + n(P) + ")";
    return {};
  }
  return std::vector<int>(P, counted / P);
}

// A layout's counts[stage][chunk]; empty with `why` set where it cannot be the split of `s`.
std::vector<std::vector<int>> layout_counts(const PipelineSplit& s, std::string& why) {
  const UnevenPipeline& u = s.uneven;
  if (u.first_stage_layers > 0 || u.last_stage_layers > 0 || u.embedding_as_layer || u.loss_as_layer) {
    why = "--pipeline-model-parallel-layout cannot be given with --decoder-first/last-pipeline-num-layers or "
          "--account-for-embedding/loss-in-pipeline-split";
    return {};
  }
  std::vector<std::vector<int>> counts = pipeline_layout_counts(u.layout, s.stages, s.num_layers, why);
  if (!why.empty()) return {};
  const int chunks = static_cast<int>(counts.front().size());
  if (chunks > 1 && s.stages == 1)
    why = pipeline_layout_flag(u.layout) + ": its " + n(chunks) +
          " stages would be model chunks of one stage: they need --pipeline-model-parallel-size above 1";
  else if (chunks != s.chunks)
    why = pipeline_layout_flag(u.layout) + " makes " + n(chunks) + " model chunk" + (chunks == 1 ? "" : "s") +
          " a stage, not " + n(s.chunks);
  return why.empty() ? counts : std::vector<std::vector<int>>{};
}

}  // namespace

std::string counted_as_layers(const UnevenPipeline& u) {
  if (u.embedding_as_layer && u.loss_as_layer) return "the embedding and the loss";
  if (u.embedding_as_layer) return "the embedding";
  return u.loss_as_layer ? "the loss" : "";
}

std::string pipeline_split_error(const PipelineSplit& s) {
  if (s.num_layers < 1 || s.stages < 1 || s.chunks < 1) return "the layers, stages and chunks must be positive";
  std::string why;
  if (!s.uneven.layout.empty()) {
    layout_counts(s, why);
    return why;
  }
  if (s.chunks > 1 && s.stages == 1) return "model chunks need --pipeline-model-parallel-size above 1";
  const std::vector<int> totals = stage_totals(s, why);
  if (!why.empty()) return why;
  // Every stage's total is positive, so the chunk that gives a layer's place to the
  // embedding (the loss) keeps zero layers or more.
  for (int p = 0; p < s.stages; ++p)
    if (totals[p] % s.chunks != 0) {
      const std::string stage = p == 0 && s.uneven.first_stage_layers > 0                ? "the first stage's"
                                : p == s.stages - 1 && s.uneven.last_stage_layers > 0 ? "the last stage's"
                                                                                       : "a stage's";
      const std::string counted = counted_as_layers(s.uneven);
      return stage + " " + n(totals[p]) + " layers" + (counted.empty() ? "" : " (" + counted + " counted)") +
             " must be a multiple of the " + n(s.chunks) + " model chunks a stage";
    }
  return "";
}

std::vector<std::vector<int>> pipeline_layer_counts(const PipelineSplit& s) {
  if (!s.uneven.layout.empty() && s.num_layers >= 1 && s.stages >= 1 && s.chunks >= 1) {  // parsed once
    std::string why;
    std::vector<std::vector<int>> counts = layout_counts(s, why);
    TRIDENT_CHECK(why.empty(), "pipeline split: " + why);
    return counts;
  }
  const std::string why = pipeline_split_error(s);
  TRIDENT_CHECK(why.empty(), "pipeline split: " + why);
  std::string unused;
  const std::vector<int> totals = stage_totals(s, unused);
  std::vector<std::vector<int>> counts(s.stages);
  for (int p = 0; p < s.stages; ++p) counts[p].assign(s.chunks, totals[p] / s.chunks);
  if (s.uneven.embedding_as_layer) --counts.front().front();
  if (s.uneven.loss_as_layer) --counts.back().back();
  return counts;
}

std::vector<LayerRange> pipeline_chunk_layers(const PipelineSplit& s, int stage) {
  TRIDENT_CHECK(stage >= 0 && stage < s.stages, "pipeline stage out of range");
  const std::vector<std::vector<int>> counts = pipeline_layer_counts(s);
  std::vector<LayerRange> mine(s.chunks);
  int next = 0;
  for (int c = 0; c < s.chunks; ++c)
    for (int p = 0; p < s.stages; ++p) {
      if (p == stage) mine[c] = {next, next + counts[p][c]};
      next += counts[p][c];
    }
  return mine;
}

int pipeline_stage_of_layer(const PipelineSplit& s, int layer) {
  TRIDENT_CHECK(layer >= 0 && layer < s.num_layers, "layer out of range");
  const std::vector<std::vector<int>> counts = pipeline_layer_counts(s);
  int next = 0;
  for (int c = 0; c < s.chunks; ++c)
    for (int p = 0; p < s.stages; ++p) {
      next += counts[p][c];
      if (layer < next) return p;
    }
  TRIDENT_CHECK(false, "layer beyond the split");
  return -1;
}

std::string pipeline_split_text(const PipelineSplit& s) {
  const std::vector<std::vector<int>> counts = pipeline_layer_counts(s);
  std::string r = "stages of ";
  for (int p = 0; p < s.stages; ++p) {
    r += p == 0 ? "" : p + 1 == s.stages ? " and " : ", ";
    if (s.chunks > 1) r += "[";
    for (int c = 0; c < s.chunks; ++c) r += (c ? ", " : "") + n(counts[p][c]);
    if (s.chunks > 1) r += "]";
  }
  return r + " layers";
}

}  // namespace trident
