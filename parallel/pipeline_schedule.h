// The non-interleaved 1F1B pipeline schedule (PipeDream-Flush, as Megatron-LM runs it),
// as a plain list of steps for one stage. The trainer executes the steps in order; the
// schedule knows nothing of the model.
//
// Stage r of P with M micro-batches runs min(P - r - 1, M) warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards. At most
// warm-up + 1 micro-batches are in flight, so that many activation slots suffice, and
// backwards run in forward order (micro-batch i uses slot i % slots).
//
// Communication is folded into the steps in the pairs that keep neighbours from
// deadlocking with blocking sends: in the steady state a stage sends its output and
// receives the next gradient in one exchange (and vice versa), as Megatron's
// send_forward_recv_backward / send_backward_recv_forward do.
#pragma once

#include <string>
#include <vector>

namespace trident {

enum class PipeOp {
  RecvForward,              // receive this micro-batch's stage input from the previous stage
  Forward,                  // run the stage's forward
  SendForward,              // send the stage output to the next stage
  SendForwardRecvBackward,  // send output of `micro_batch`, receive d(output) of `other`
  RecvBackward,             // receive d(stage output) from the next stage
  Backward,                 // run the stage's backward
  SendBackward,             // send d(stage input) to the previous stage
  SendBackwardRecvForward,  // send d(input) of `micro_batch`, receive the input of `other`
};

struct PipeStep {
  PipeOp op;
  int micro_batch;     // the micro-batch this step runs or sends
  int other = -1;      // for the combined exchanges: the micro-batch received
};

// Steps of stage `stage` (0-based) of `stages` for `micro_batches` micro-batches. The first
// stage has no receives of inputs or sends of input gradients; the last stage no sends of
// outputs or receives of output gradients.
std::vector<PipeStep> one_f_one_b_schedule(int stages, int stage, int micro_batches);

// Activation slots stage `stage` needs (micro-batches in flight at once).
int pipeline_activation_slots(int stages, int stage, int micro_batches);

std::string to_string(const PipeStep& s);

// Transformer layers [begin, end) of stage `stage`. Layers are split as evenly as possible;
// when they do not divide, the extra layers go to the middle stages first, then to the
// first stage, and to the last stage only when nothing else is left, because the first
// stage also runs the embedding and the last the LM head and loss (the costliest part).
struct LayerRange {
  int begin = 0, end = 0;
};
LayerRange pipeline_layer_range(int num_layers, int stages, int stage);

}  // namespace trident
