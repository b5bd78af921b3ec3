// The pipeline schedules, checked by running every stage's step list in a simulator of
// rendezvous transfers: a transfer completes only once its counterpart is posted, and the
// k-th transfer from one stage to another pairs with the other's k-th receive from it,
// whatever its kind (NCCL's untagged in-order matching, stricter than MPI's tags). The
// stages must finish without deadlock; every transfer must carry what its receiver expects;
// each forward must have its input and each backward its gradient; the model's buffers
// must not be overwritten while in use (one output-gradient and one input-gradient buffer
// per chunk, the logits of the model's last chunk shared by its micro-batches, activation
// slots by micro-batch % slots); every chunk must run every micro-batch's forward and
// backward once, in order.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "parallel/pipeline_schedule.h"

namespace trident {
namespace {

// What one transfer carries, named by the receiving stage's chunk.
struct Message {
  char kind;  // 'F' activations, 'B' gradients
  int chunk, mb;
  bool operator==(const Message&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Message& m) {
  return os << m.kind << "(chunk " << m.chunk << ", mb " << m.mb << ")";
}

struct Simulation {
  int stages, chunks, micro_batches;
  bool training;
  std::vector<std::vector<PipeStep>> programs;
  std::vector<std::vector<int>> slots;  // per stage and chunk
  std::vector<size_t> pc;
  std::vector<char> posted;  // the stage's current Exchange has been posted
  // Per (from, to): every send and every receive posted so far, in order.
  std::map<std::pair<int, int>, std::vector<Message>> sends, recvs;
  // Index in sends/recvs of each transfer of the stage's posted Exchange.
  std::vector<std::vector<size_t>> posted_index;
  std::vector<std::set<std::pair<int, int>>> have_input;  // (chunk, mb) received, not yet used
  std::vector<std::map<int, int>> pending_grad;           // chunk -> mb received into its one buffer
  std::vector<std::map<int, int>> unsent_input_grad;      // chunk -> mb whose d(input) awaits its send
  std::vector<std::vector<std::set<int>>> alive;          // per stage and chunk: mbs holding a slot
  std::vector<std::vector<std::vector<int>>> forwards, backwards;  // per stage and chunk, in order
  std::vector<int> loss_chunk_forward;  // last stage: the mb whose logits the buffer holds
  // Timing with free communication: a forward of a whole stage takes 1, a backward 2 (a
  // chunk's 1/chunks of that); an exchange ends when the last of its counterparts is posted.
  std::vector<double> clock;
  std::map<std::pair<int, int>, std::vector<double>> send_times, recv_times;

  Simulation(int P, int v, int M, bool train)
      : stages(P), chunks(v), micro_batches(M), training(train), pc(P, 0), posted(P, 0), posted_index(P),
        have_input(P), pending_grad(P), unsent_input_grad(P), alive(P, std::vector<std::set<int>>(v)),
        forwards(P, std::vector<std::vector<int>>(v)), backwards(P, std::vector<std::vector<int>>(v)),
        loss_chunk_forward(P, -1), clock(P, 0.0) {
    for (int r = 0; r < P; ++r) {
      programs.push_back(train ? interleaved_schedule(P, r, v, M) : forward_only_schedule(P, r, v, M));
      slots.push_back(pipeline_activation_slots(programs.back(), v));
    }
  }

  int next(int r) const { return (r + 1) % stages; }
  int prev(int r) const { return (r + stages - 1) % stages; }
  bool model_first(int r, int c) const { return r == 0 && c == 0; }
  bool model_last(int r, int c) const { return r == stages - 1 && c == chunks - 1; }

  // The peer pair of a transfer and what it carries, named by the receiver's chunk.
  std::pair<std::pair<int, int>, Message> route(int r, const PipeTransfer& t) const {
    switch (t.kind) {
      case TransferKind::SendForward:
        return {{r, next(r)}, {'F', r == stages - 1 ? t.chunk + 1 : t.chunk, t.micro_batch}};
      case TransferKind::RecvForward: return {{prev(r), r}, {'F', t.chunk, t.micro_batch}};
      case TransferKind::SendBackward: return {{r, prev(r)}, {'B', r == 0 ? t.chunk - 1 : t.chunk, t.micro_batch}};
      case TransferKind::RecvBackward: return {{next(r), r}, {'B', t.chunk, t.micro_batch}};
    }
    return {};
  }
  static bool is_send(const PipeTransfer& t) {
    return t.kind == TransferKind::SendForward || t.kind == TransferKind::SendBackward;
  }

  // Keeps micro-batch `mb` of chunk `c` in its slot; no two alive ones may share one.
  void hold_slot(int r, int c, int mb) {
    for (int other : alive[r][c])
      EXPECT_NE(other % slots[r][c], mb % slots[r][c])
          << "stage " << r << " chunk " << c << ": micro-batches " << other << " and " << mb << " share a slot";
    alive[r][c].insert(mb);
  }

  void compute(int r, const PipeStep& s) {
    const int c = s.chunk, mb = s.micro_batch;
    clock[r] += (s.op == PipeOp::Forward ? 1.0 : 2.0) / chunks;
    ASSERT_TRUE(c >= 0 && c < chunks && mb >= 0 && mb < micro_batches) << to_string(s);
    if (s.op == PipeOp::Forward) {
      if (!model_first(r, c)) {
        EXPECT_EQ(have_input[r].erase({c, mb}), 1u) << "stage " << r << ": " << to_string(s) << " without its input";
      } else {
        hold_slot(r, c, mb);
      }
      forwards[r][c].push_back(mb);
      if (model_last(r, c)) loss_chunk_forward[r] = mb;
      if (!training) alive[r][c].erase(mb);
      return;
    }
    EXPECT_EQ(unsent_input_grad[r].count(c), 0u) << "stage " << r << ": " << to_string(s)
                                                 << " overwrites an input gradient not yet sent";
    if (model_last(r, c)) {
      EXPECT_EQ(loss_chunk_forward[r], mb) << "stage " << r << ": " << to_string(s)
                                           << " after another forward overwrote its logits";
    } else {
      auto it = pending_grad[r].find(c);
      EXPECT_TRUE(it != pending_grad[r].end() && it->second == mb)
          << "stage " << r << ": " << to_string(s) << " without its gradient";
      if (it != pending_grad[r].end()) pending_grad[r].erase(it);
    }
    const auto& f = forwards[r][c];
    EXPECT_NE(std::find(f.begin(), f.end(), mb), f.end()) << "stage " << r << ": " << to_string(s) << " before its forward";
    backwards[r][c].push_back(mb);
    alive[r][c].erase(mb);
    if (!model_first(r, c)) unsent_input_grad[r][c] = mb;
  }

  void post(int r, const PipeStep& s) {
    posted[r] = 1;
    for (const PipeTransfer& t : s.transfers) {
      const auto [pair, msg] = route(r, t);
      auto& list = (is_send(t) ? sends : recvs)[pair];
      posted_index[r].push_back(list.size());
      list.push_back(msg);
      (is_send(t) ? send_times : recv_times)[pair].push_back(clock[r]);
      if (t.kind == TransferKind::SendBackward) {
        auto it = unsent_input_grad[r].find(t.chunk);
        EXPECT_TRUE(it != unsent_input_grad[r].end() && it->second == t.micro_batch)
            << "stage " << r << ": " << to_string(s) << " sends an input gradient its backward did not make";
      }
      if (t.kind == TransferKind::RecvForward) hold_slot(r, t.chunk, t.micro_batch);
    }
  }

  // Whether every transfer of stage r's posted exchange has its counterpart posted.
  bool complete(int r, const PipeStep& s) {
    for (size_t i = 0; i < s.transfers.size(); ++i) {
      const PipeTransfer& t = s.transfers[i];
      const auto pair = route(r, t).first;
      const auto& other = (is_send(t) ? recvs : sends)[pair];
      if (other.size() <= posted_index[r][i]) return false;
    }
    for (size_t i = 0; i < s.transfers.size(); ++i) {
      const PipeTransfer& t = s.transfers[i];
      const auto [pair, msg] = route(r, t);
      clock[r] = std::max(clock[r], (is_send(t) ? recv_times : send_times)[pair][posted_index[r][i]]);
      const Message& counterpart = (is_send(t) ? recvs : sends)[pair][posted_index[r][i]];
      EXPECT_EQ(msg, counterpart) << "transfer " << posted_index[r][i] << " from stage " << pair.first << " to "
                                  << pair.second << " (stage " << r << ", " << to_string(s) << ")";
      if (t.kind == TransferKind::RecvForward) have_input[r].insert({t.chunk, t.micro_batch});
      if (t.kind == TransferKind::SendBackward) unsent_input_grad[r].erase(t.chunk);
      if (t.kind == TransferKind::RecvBackward) {
        EXPECT_EQ(pending_grad[r].count(t.chunk), 0u) << "stage " << r << ": " << to_string(s)
                                                      << " overwrites a gradient not yet used";
        pending_grad[r][t.chunk] = t.micro_batch;
      }
    }
    posted[r] = 0;
    posted_index[r].clear();
    return true;
  }

  bool try_advance(int r) {
    if (pc[r] >= programs[r].size()) return false;
    const PipeStep& s = programs[r][pc[r]];
    if (s.op != PipeOp::Exchange) {
      compute(r, s);
      ++pc[r];
      return true;
    }
    if (!posted[r]) {
      post(r, s);
      return true;
    }
    if (!complete(r, s)) return false;
    ++pc[r];
    return true;
  }

  bool run() {
    for (;;) {
      bool progress = false, finished = true;
      for (int r = 0; r < stages; ++r) progress = try_advance(r) || progress;
      for (int r = 0; r < stages; ++r) finished = finished && pc[r] == programs[r].size();
      if (finished) return true;
      if (!progress || ::testing::Test::HasFailure()) return false;
    }
  }

  void check_finished() const {
    std::vector<int> all(micro_batches);
    for (int i = 0; i < micro_batches; ++i) all[i] = i;
    for (int r = 0; r < stages; ++r)
      for (int c = 0; c < chunks; ++c) {
        EXPECT_EQ(forwards[r][c], all) << "stage " << r << " chunk " << c;
        if (training) {
          EXPECT_EQ(backwards[r][c], all) << "stage " << r << " chunk " << c;
        }
      }
    for (const auto& [pair, list] : sends)
      EXPECT_EQ(list.size(), recvs.at(pair).size()) << "stage " << pair.first << " to " << pair.second;
  }
};

void simulate(int P, int v, int M, bool training) {
  SCOPED_TRACE(std::to_string(P) + " stages, " + std::to_string(v) + " chunks, " + std::to_string(M) +
               " micro-batches" + (training ? "" : ", forward only"));
  Simulation sim(P, v, M, training);
  ASSERT_TRUE(sim.run()) << "deadlock or error";
  sim.check_finished();
}

class OneFOneB : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(OneFOneB, RunsWithoutDeadlockInOrderWithinSlots) {
  const auto [P, M] = GetParam();
  simulate(P, 1, M, true);
  simulate(P, 1, M, false);
  for (int r = 0; r < P; ++r)  // 1F1B keeps P - r micro-batches in flight
    EXPECT_EQ(pipeline_activation_slots(one_f_one_b_schedule(P, r, M), 1), std::vector<int>{std::min(P - r, M)});
}

INSTANTIATE_TEST_SUITE_P(Shapes, OneFOneB,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Values(1, 2, 3, 4, 7, 16)));

class Interleaved : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Interleaved, RunsWithoutDeadlockInOrderWithinSlots) {
  const auto [P, v, groups] = GetParam();
  simulate(P, v, P * groups, true);
  simulate(P, v, P * groups, false);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Interleaved,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Values(2, 3, 4),
                                            ::testing::Values(1, 2, 3, 5)));

std::vector<std::string> compute_steps(const std::vector<PipeStep>& steps) {
  std::vector<std::string> ops;
  for (const PipeStep& s : steps)
    if (s.op != PipeOp::Exchange) ops.push_back(to_string(s));
  return ops;
}

TEST(Interleaved, MatchesMegatronsOrderForTwoStagesTwoChunks) {
  // Stage 0 warms up with every forward (2 x (P - 1) + (v - 1) x P = 4 of 4); stage 1 with
  // (v - 1) x P = 2, then alternates; backwards go through the chunks in reverse.
  const std::vector<std::string> stage0 = {"Forward(0)",           "Forward(1)",           "Forward(0 of chunk 1)",
                                           "Forward(1 of chunk 1)", "Backward(0 of chunk 1)", "Backward(1 of chunk 1)",
                                           "Backward(0)",          "Backward(1)"};
  const std::vector<std::string> stage1 = {"Forward(0)",           "Forward(1)",  "Forward(0 of chunk 1)",
                                           "Backward(0 of chunk 1)", "Forward(1 of chunk 1)", "Backward(1 of chunk 1)",
                                           "Backward(0)",          "Backward(1)"};
  EXPECT_EQ(compute_steps(interleaved_schedule(2, 0, 2, 2)), stage0);
  EXPECT_EQ(compute_steps(interleaved_schedule(2, 1, 2, 2)), stage1);
}

TEST(Interleaved, WarmUpAndSlots) {
  // Megatron's warm-up: (P - r - 1) x 2 + (v - 1) x P forwards before the first backward, so
  // the first stage holds more micro-batches than with 1F1B, each of a chunk's fewer layers.
  const int P = 4, v = 2, M = 8;
  for (int r = 0; r < P; ++r) {
    const auto steps = interleaved_schedule(P, r, v, M);
    int forwards = 0;
    for (const PipeStep& s : steps) {
      if (s.op == PipeOp::Backward) break;
      forwards += s.op == PipeOp::Forward;
    }
    EXPECT_EQ(forwards, (P - r - 1) * 2 + (v - 1) * P + 1) << "stage " << r;  // warm-up + the first steady one
  }
  // Stage 0: its first chunk-0 backward (virtual backward 4) comes after forward 14, by which
  // time all 8 micro-batches of chunk 0 and 4 of chunk 1 are alive: 12 half-stage slots, the
  // memory of 6 1F1B micro-batches where 1F1B keeps 4. The last stage's loss chunk needs one.
  EXPECT_EQ(pipeline_activation_slots(interleaved_schedule(P, 0, v, M), v), (std::vector<int>{8, 4}));
  EXPECT_EQ(pipeline_activation_slots(interleaved_schedule(P, P - 1, v, M), v), (std::vector<int>{5, 1}));
  EXPECT_EQ(interleaved_schedule(P, 1, 1, M).size(), one_f_one_b_schedule(P, 1, M).size());
}

double makespan(int P, int v, int M) {
  Simulation sim(P, v, M, true);
  EXPECT_TRUE(sim.run());
  return *std::max_element(sim.clock.begin(), sim.clock.end());
}

TEST(Interleaved, ShrinksTheBubbleAsMegatronsPaperSays) {
  // Narayanan et al. 2021: with forward time tf and backward tb per micro-batch and stage,
  // 1F1B takes (M + P - 1)(tf + tb); interleaving over v chunks shrinks the bubble's
  // (P - 1)(tf + tb) to (P - 1)(tf + tb) / v.
  for (int P : {2, 4, 8})
    for (int M : {P, 2 * P, 4 * P}) {
      EXPECT_DOUBLE_EQ(makespan(P, 1, M), (M + P - 1) * 3.0) << P << " stages, " << M << " micro-batches";
      for (int v : {2, 4})
        EXPECT_DOUBLE_EQ(makespan(P, v, M), M * 3.0 + (P - 1) * 3.0 / v)
            << P << " stages, " << v << " chunks, " << M << " micro-batches";
    }
}

TEST(Interleaved, TwoStagesKeepForwardAndBackwardTransfersApart) {
  // With two stages both neighbours are the same peer: activations and gradients share one
  // in-order channel, and the simulator's untagged matching proves their order agrees.
  for (int M : {2, 4, 6}) simulate(2, 3, M, true);
}

TEST(Schedule, ToStringNamesChunksAndTransfers) {
  const PipeStep s{PipeOp::Exchange, 0, 0,
                   {{TransferKind::SendForward, 1, 3}, {TransferKind::RecvBackward, 0, 2}}};
  EXPECT_EQ(to_string(s), "Exchange(SendForward 3 of chunk 1, RecvBackward 2)");
}

TEST(OneFOneB, LastStageAlternatesForwardAndBackward) {
  // On the last stage each backward directly follows its forward (the model relies on
  // this to share the logits buffer between micro-batches).
  const auto steps = one_f_one_b_schedule(4, 3, 6);
  std::vector<std::string> ops;
  for (const PipeStep& s : steps)
    if (s.op == PipeOp::Forward || s.op == PipeOp::Backward) ops.push_back(to_string(s));
  const std::vector<std::string> expect = {"Forward(0)", "Backward(0)", "Forward(1)", "Backward(1)",
                                           "Forward(2)", "Backward(2)", "Forward(3)", "Backward(3)",
                                           "Forward(4)", "Backward(4)", "Forward(5)", "Backward(5)"};
  EXPECT_EQ(ops, expect);
}

TEST(OneFOneB, FirstStageWarmsUpWithPMinusOneForwards) {
  const auto steps = one_f_one_b_schedule(4, 0, 8);
  int forwards_before_first_backward = 0;
  for (const PipeStep& s : steps) {
    if (s.op == PipeOp::Backward) break;
    forwards_before_first_backward += s.op == PipeOp::Forward;
  }
  EXPECT_EQ(forwards_before_first_backward, 4);  // 3 warm-up + 1 steady
}

}  // namespace
}  // namespace trident
