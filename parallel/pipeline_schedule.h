// Pipeline schedules as plain lists of steps for one stage (Megatron-LM's schedules.py):
// the trainer executes the steps in order; the schedules know nothing of the model.
//
// - one_f_one_b_schedule: the non-interleaved 1F1B schedule (PipeDream-Flush). Stage r of
//   P with M micro-batches runs min(P - r - 1, M) warm-up forwards, then alternates one
//   forward and one backward, then drains the remaining backwards.
// - interleaved_schedule: Megatron's interleaved 1F1B. Each stage holds `chunks` model
//   chunks (virtual stages); chunk c of stage r runs the c * P + r-th of P x chunks equal
//   slices of the layers, so a micro-batch goes round the stages `chunks` times. The
//   pipeline bubble shrinks from (P - 1) / M to (P - 1) / (chunks x M) of an iteration for
//   the price of chunks times as many point-to-point transfers. Forwards run over the
//   "virtual micro-batches" k = 0 .. chunks x M - 1 in groups of P micro-batches per chunk;
//   warm-up is (P - r - 1) x 2 + (chunks - 1) x P forwards. M must be a multiple of P.
// - forward_only_schedule: evaluation; every forward in the order of the training
//   schedule, with no backward.
//
// Communication is folded into Exchange steps: the transfers of one step are posted
// together and complete together (Megatron's batched isend/irecv), so neighbours that both
// send first do not deadlock. Every transfer goes to the next stage (SendForward,
// RecvBackward) or the previous one (RecvForward, SendBackward); with chunks the stages form
// a ring: the last stage's chunk c feeds the first stage's chunk c + 1. Within a step the
// transfers are ordered SendForward, RecvForward, SendBackward, RecvBackward, and the
// schedules keep the order of transfers between any two stages the same on both sides, so
// untagged in-order matching (NCCL) pairs each transfer with its counterpart.
#pragma once

#include <string>
#include <vector>

namespace trident {

enum class PipeOp {
  Forward,   // run chunk `chunk`'s forward of `micro_batch`
  Backward,  // run chunk `chunk`'s backward of `micro_batch`
  Exchange,  // post `transfers` together and wait for all of them
};

enum class TransferKind {
  SendForward,   // send chunk's output of micro_batch to the next stage
  RecvForward,   // receive chunk's input of micro_batch from the previous stage
  SendBackward,  // send d(chunk input) of micro_batch to the previous stage
  RecvBackward,  // receive d(chunk output) of micro_batch from the next stage
};

struct PipeTransfer {
  TransferKind kind;
  int chunk = 0;        // this stage's model chunk the tensor belongs to
  int micro_batch = 0;
};

struct PipeStep {
  PipeOp op;
  int chunk = 0, micro_batch = 0;        // Forward, Backward
  std::vector<PipeTransfer> transfers;  // Exchange
};

// Steps of stage `stage` (0-based) of `stages` for `micro_batches` micro-batches. The first
// stage has no receives of inputs or sends of input gradients; the last stage no sends of
// outputs or receives of output gradients. Every step is of chunk 0.
std::vector<PipeStep> one_f_one_b_schedule(int stages, int stage, int micro_batches);

// Megatron's interleaved schedule, `chunks` >= 2 chunks per stage, micro_batches a
// multiple of stages (InternalError otherwise: the Trainer checks it first). With chunks == 1 it
// is one_f_one_b_schedule.
std::vector<PipeStep> interleaved_schedule(int stages, int stage, int chunks, int micro_batches);

// Forward of every micro-batch through every chunk (no backward), pipelined like the
// training schedule's warm-up.
std::vector<PipeStep> forward_only_schedule(int stages, int stage, int chunks, int micro_batches);

// Activation slots each chunk of a stage needs when running `steps`: the most micro-batches
// of that chunk alive at once, from the receive of a micro-batch's input (or its forward on
// the first stage's first chunk) to its backward (to its forward without backward). Within
// a chunk micro-batches start and finish in order, so micro-batch i may use slot i % slots.
std::vector<int> pipeline_activation_slots(const std::vector<PipeStep>& steps, int chunks);

std::string to_string(const PipeStep& s);

}  // namespace trident
