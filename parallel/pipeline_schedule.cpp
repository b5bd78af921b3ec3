#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace trident {
namespace {

// Builds a stage's step list: forwards, backwards and the exchanges between them.
class StepList {
 public:
  void forward(int chunk, int mb) { steps_.push_back({PipeOp::Forward, chunk, mb, {}}); }
  void backward(int chunk, int mb) { steps_.push_back({PipeOp::Backward, chunk, mb, {}}); }
  // One Exchange of the transfers added since the last one (none: no step).
  void add(TransferKind kind, int chunk, int mb) { pending_.push_back({kind, chunk, mb}); }
  void exchange() {
    if (pending_.empty()) return;
    // The documented order within a step, whatever order the caller added them in.
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const PipeTransfer& a, const PipeTransfer& b) { return a.kind < b.kind; });
    steps_.push_back({PipeOp::Exchange, 0, 0, std::move(pending_)});
    pending_.clear();
  }
  std::vector<PipeStep> take() {
    TRIDENT_CHECK(pending_.empty(), "pipeline schedule: transfers left outside an exchange");
    return std::move(steps_);
  }

 private:
  std::vector<PipeStep> steps_;
  std::vector<PipeTransfer> pending_;
};

// The virtual micro-batches of the interleaved schedule: k = 0 .. chunks x M - 1 in groups
// of P micro-batches per chunk (Megatron's get_model_chunk_id and microbatch ids).
struct VirtualOrder {
  int stages, chunks;
  int chunk(int k, bool forward) const {
    const int group = stages * chunks;
    const int c = (k % group + group) % group / stages;  // k may be negative (Python's %)
    return forward ? c : chunks - 1 - c;
  }
  int micro_batch(int k) const { return k / (stages * chunks) * stages + k % stages; }
};

// The inputs a stage receives, in the order it needs them: virtual micro-batch k's forward
// input unless it is the model's first chunk (stage 0, chunk 0); likewise the output
// gradients unless it is the model's last chunk (computed from the loss).
class Receipts {
 public:
  Receipts(const VirtualOrder& v, int stage, int total, bool forward) {
    const int own = forward ? 0 : v.chunks - 1;
    const bool edge = forward ? stage == 0 : stage == v.stages - 1;
    for (int k = 0; k < total; ++k)
      if (!(edge && v.chunk(k, forward) == own)) order_.push_back({v.chunk(k, forward), v.micro_batch(k)});
  }
  std::pair<int, int> next() {
    TRIDENT_CHECK(next_ < order_.size(), "pipeline schedule: a receive with nothing left to receive");
    return order_[next_++];
  }

 private:
  std::vector<std::pair<int, int>> order_;  // (chunk, micro-batch)
  size_t next_ = 0;
};

}  // namespace

std::vector<PipeStep> one_f_one_b_schedule(int stages, int stage, int micro_batches) {
  TRIDENT_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1, "pipeline schedule arguments");
  const bool first = stage == 0, last = stage == stages - 1;
  const int warmup = std::min(stages - stage - 1, micro_batches);
  const int steady = micro_batches - warmup;
  StepList s;
  int next_forward = 0, next_backward = 0;

  for (int i = 0; i < warmup; ++i, ++next_forward) {
    if (!first) s.add(TransferKind::RecvForward, 0, next_forward);
    s.exchange();
    s.forward(0, next_forward);
    if (!last) s.add(TransferKind::SendForward, 0, next_forward);
    s.exchange();
  }
  // The first steady forward's input arrives alone; later ones come with a gradient send.
  if (steady > 0 && !first) s.add(TransferKind::RecvForward, 0, next_forward);
  s.exchange();
  for (int i = 0; i < steady; ++i) {
    const int f = next_forward++;
    const int b = next_backward++;
    s.forward(0, f);
    if (!last) {  // Megatron's send_forward_recv_backward
      s.add(TransferKind::SendForward, 0, f);
      s.add(TransferKind::RecvBackward, 0, b);
    }
    s.exchange();
    s.backward(0, b);
    if (!first) {  // send_backward_recv_forward, or send_backward after the last forward
      s.add(TransferKind::SendBackward, 0, b);
      if (i + 1 < steady) s.add(TransferKind::RecvForward, 0, next_forward);
    }
    s.exchange();
  }
  for (; next_backward < micro_batches; ++next_backward) {
    if (!last) s.add(TransferKind::RecvBackward, 0, next_backward);
    s.exchange();
    s.backward(0, next_backward);
    if (!first) s.add(TransferKind::SendBackward, 0, next_backward);
    s.exchange();
  }
  return s.take();
}

// Megatron's forward_backward_pipelining_with_interleaving, step for step: which transfers
// each exchange carries is decided by the same rules (recv_prev / recv_next), and what a
// receive carries is the next input the stage needs (Receipts).
std::vector<PipeStep> interleaved_schedule(int stages, int stage, int chunks, int micro_batches) {
  if (chunks == 1) return one_f_one_b_schedule(stages, stage, micro_batches);
  TRIDENT_CHECK(stages >= 2 && stage >= 0 && stage < stages && chunks >= 2 && micro_batches >= 1 &&
                    micro_batches % stages == 0,
                "interleaved pipeline schedule arguments");
  const int P = stages;
  const bool first = stage == 0, last = stage == P - 1;
  const VirtualOrder v{P, chunks};
  const int total = micro_batches * chunks;
  const int warmup = std::min((P - stage - 1) * 2 + (chunks - 1) * P, total);
  const int steady = total - warmup;
  Receipts inputs(v, stage, total, true), grads(v, stage, total, false);
  // Whether virtual micro-batch k's forward output leaves the model's last chunk (no send),
  // and whether its backward's input gradient belongs to the model's first chunk (no send).
  auto model_output = [&](int k) { return last && v.chunk(k, true) == chunks - 1; };
  auto model_input = [&](int k) { return first && v.chunk(k, false) == 0; };
  auto send_forward = [&](StepList& s, int k) {
    if (!model_output(k)) s.add(TransferKind::SendForward, v.chunk(k, true), v.micro_batch(k));
  };
  auto send_backward = [&](StepList& s, int k) {
    if (!model_input(k)) s.add(TransferKind::SendBackward, v.chunk(k, false), v.micro_batch(k));
  };
  auto recv = [](StepList& s, TransferKind kind, Receipts& from) {
    const auto [chunk, mb] = from.next();
    s.add(kind, chunk, mb);
  };
  StepList s;
  if (!first) recv(s, TransferKind::RecvForward, inputs);
  s.exchange();
  for (int k = 0; k < warmup; ++k) {
    s.forward(v.chunk(k, true), v.micro_batch(k));
    send_forward(s, k);
    if (!(first && v.chunk(k + 1, true) == 0) && k != total - 1) recv(s, TransferKind::RecvForward, inputs);
    // The last warm-up exchange also brings the first backward's gradient.
    if (k == warmup - 1 && !last) recv(s, TransferKind::RecvBackward, grads);
    s.exchange();
  }
  for (int k = 0; k < steady; ++k) {
    const int f = k + warmup;
    s.forward(v.chunk(f, true), v.micro_batch(f));
    s.backward(v.chunk(k, false), v.micro_batch(k));
    send_forward(s, f);
    send_backward(s, k);
    // The first stage receives what the last stage sent P - 1 virtual micro-batches ago,
    // nothing when that was the model's output; likewise the last stage's gradients.
    bool recv_prev = !first || v.chunk(f - (P - 1), true) != chunks - 1;
    const bool recv_next = !last || v.chunk(k - (P - 1), false) != 0;
    if (k == steady - 1) recv_prev = false;
    if (recv_prev) recv(s, TransferKind::RecvForward, inputs);
    if (recv_next) recv(s, TransferKind::RecvBackward, grads);
    s.exchange();
  }
  for (int k = steady; k < total; ++k) {
    s.backward(v.chunk(k, false), v.micro_batch(k));
    send_backward(s, k);
    if (!(last && v.chunk(k + 1, false) == chunks - 1) && k != total - 1) recv(s, TransferKind::RecvBackward, grads);
    s.exchange();
  }
  return s.take();
}

std::vector<PipeStep> forward_only_schedule(int stages, int stage, int chunks, int micro_batches) {
  TRIDENT_CHECK(stages >= 1 && stage >= 0 && stage < stages && chunks >= 1 && micro_batches >= 1 &&
                    (chunks == 1 || micro_batches % stages == 0),
                "forward-only pipeline schedule arguments");
  const bool first = stage == 0, last = stage == stages - 1;
  const VirtualOrder v{stages, chunks};
  const int total = micro_batches * chunks;
  Receipts inputs(v, stage, total, true);
  StepList s;
  auto recv = [&] {
    const auto [chunk, mb] = inputs.next();
    s.add(TransferKind::RecvForward, chunk, mb);
  };
  if (!first) recv();
  s.exchange();
  for (int k = 0; k < total; ++k) {
    s.forward(v.chunk(k, true), v.micro_batch(k));
    if (!(last && v.chunk(k, true) == chunks - 1)) s.add(TransferKind::SendForward, v.chunk(k, true), v.micro_batch(k));
    if (!(first && v.chunk(k + 1, true) == 0) && k != total - 1) recv();
    s.exchange();
  }
  return s.take();
}

std::vector<int> pipeline_activation_slots(const std::vector<PipeStep>& steps, int chunks) {
  const bool training = std::any_of(steps.begin(), steps.end(), [](const PipeStep& s) {
    return s.op == PipeOp::Backward;
  });
  std::vector<std::set<int>> alive(chunks);
  std::vector<int> most(chunks, 1);
  auto start = [&](int chunk, int mb) {
    TRIDENT_CHECK(chunk >= 0 && chunk < chunks, "pipeline schedule: chunk out of range");
    alive[chunk].insert(mb);
    most[chunk] = std::max(most[chunk], static_cast<int>(alive[chunk].size()));
  };
  for (const PipeStep& s : steps) {
    if (s.op == PipeOp::Exchange) {
      for (const PipeTransfer& t : s.transfers)
        if (t.kind == TransferKind::RecvForward) start(t.chunk, t.micro_batch);
    } else if (s.op == PipeOp::Forward) {
      start(s.chunk, s.micro_batch);
      if (!training) alive[s.chunk].erase(s.micro_batch);
    } else {
      alive[s.chunk].erase(s.micro_batch);
    }
  }
  return most;
}

std::string to_string(const PipeStep& s) {
  static const char* kinds[] = {"SendForward", "RecvForward", "SendBackward", "RecvBackward"};
  auto item = [](int chunk, int mb) {
    return std::to_string(mb) + (chunk > 0 ? " of chunk " + std::to_string(chunk) : "");
  };
  if (s.op != PipeOp::Exchange)
    return std::string(s.op == PipeOp::Forward ? "Forward(" : "Backward(") + item(s.chunk, s.micro_batch) + ")";
  std::string r = "Exchange(";
  for (size_t i = 0; i < s.transfers.size(); ++i) {
    const PipeTransfer& t = s.transfers[i];
    r += (i ? ", " : "") + std::string(kinds[static_cast<int>(t.kind)]) + " " + item(t.chunk, t.micro_batch);
  }
  return r + ")";
}

}  // namespace trident
