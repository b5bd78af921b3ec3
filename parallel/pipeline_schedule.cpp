#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace trident {

int pipeline_activation_slots(int stages, int stage, int micro_batches) {
  // Warm-up forwards plus the one steady-state forward before its backward.
  return std::min(stages - stage, micro_batches);
}

std::vector<PipeStep> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  TRIDENT_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1, "pipeline schedule arguments");
  const bool first = stage == 0, last = stage == stages - 1;
  const int warmup = std::min(stages - stage - 1, micro_batches);
  const int steady = micro_batches - warmup;
  std::vector<PipeStep> s;
  int next_forward = 0, next_backward = 0;

  for (int i = 0; i < warmup; ++i, ++next_forward) {
    if (!first) s.push_back({PipeOp::RecvForward, next_forward});
    s.push_back({PipeOp::Forward, next_forward});
    if (!last) s.push_back({PipeOp::SendForward, next_forward});
  }
  // The first steady forward's input arrives alone; later ones come with a gradient send.
  if (steady > 0 && !first) s.push_back({PipeOp::RecvForward, next_forward});
  for (int i = 0; i < steady; ++i) {
    const int f = next_forward++;
    const int b = next_backward++;
    s.push_back({PipeOp::Forward, f});
    if (!last) s.push_back({PipeOp::SendForwardRecvBackward, f, b});
    s.push_back({PipeOp::Backward, b});
    if (!first) {
      if (i + 1 < steady)
        s.push_back({PipeOp::SendBackwardRecvForward, b, next_forward});
      else
        s.push_back({PipeOp::SendBackward, b});
    }
  }
  for (; next_backward < micro_batches; ++next_backward) {
    if (!last) s.push_back({PipeOp::RecvBackward, next_backward});
    s.push_back({PipeOp::Backward, next_backward});
    if (!first) s.push_back({PipeOp::SendBackward, next_backward});
  }
  return s;
}

LayerRange pipeline_layer_range(int num_layers, int stages, int stage) {
  TRIDENT_CHECK(stages >= 1 && stage >= 0 && stage < stages && num_layers >= stages, "layer partition arguments");
  std::vector<int> count(stages, num_layers / stages);
  int extra = num_layers % stages;
  std::vector<int> order;  // who gets an extra layer first
  for (int r = 1; r + 1 < stages; ++r) order.push_back(r);
  order.push_back(0);
  if (stages > 1) order.push_back(stages - 1);
  for (int i = 0; extra > 0; ++i, --extra) ++count[order[i]];
  LayerRange r;
  for (int s = 0; s < stage; ++s) r.begin += count[s];
  r.end = r.begin + count[stage];
  return r;
}

std::string to_string(const PipeStep& s) {
  static const char* names[] = {"RecvForward",  "Forward",  "SendForward",  "SendForwardRecvBackward",
                                "RecvBackward", "Backward", "SendBackward", "SendBackwardRecvForward"};
  std::string r = std::string(names[static_cast<int>(s.op)]) + "(" + std::to_string(s.micro_batch);
  if (s.other >= 0) r += ", " + std::to_string(s.other);
  return r + ")";
}

}  // namespace trident
