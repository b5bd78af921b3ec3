// The 1F1B schedule, checked by running every stage's step list in a simulator with
// rendezvous (fully blocking) sends: it must finish without deadlock, every message must
// carry the micro-batch the receiver expects, each micro-batch's forward must precede its
// backward on every stage, and the number in flight must stay within the slots.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <tuple>

#include "parallel/pipeline_schedule.h"

namespace trident {
namespace {

// A posted half of a communication: stage `from` sends micro-batch `mb` of `kind`
// ('F' activations, 'B' gradients) to stage `to`.
struct Half {
  bool is_send;
  char kind;
  int from, to, mb;
  bool done = false;
};

std::vector<Half> halves_of(const PipeStep& s, int stage) {
  switch (s.op) {
    case PipeOp::RecvForward: return {{false, 'F', stage - 1, stage, s.micro_batch}};
    case PipeOp::SendForward: return {{true, 'F', stage, stage + 1, s.micro_batch}};
    case PipeOp::RecvBackward: return {{false, 'B', stage + 1, stage, s.micro_batch}};
    case PipeOp::SendBackward: return {{true, 'B', stage, stage - 1, s.micro_batch}};
    case PipeOp::SendForwardRecvBackward:
      return {{true, 'F', stage, stage + 1, s.micro_batch}, {false, 'B', stage + 1, stage, s.other}};
    case PipeOp::SendBackwardRecvForward:
      return {{true, 'B', stage, stage - 1, s.micro_batch}, {false, 'F', stage - 1, stage, s.other}};
    default: return {};
  }
}

struct Simulation {
  int stages, micro_batches;
  std::vector<std::vector<PipeStep>> programs;
  std::vector<size_t> pc;
  std::vector<std::vector<Half>> posted;             // halves of each stage's current step
  std::vector<std::map<int, int>> have_input, have_grad;  // received but not yet used
  std::vector<std::vector<int>> forwards_done, backwards_done;
  std::vector<int> in_flight, max_in_flight;

  Simulation(int P, int M) : stages(P), micro_batches(M), pc(P, 0), posted(P), have_input(P), have_grad(P),
                             forwards_done(P), backwards_done(P), in_flight(P, 0), max_in_flight(P, 0) {
    for (int r = 0; r < P; ++r) programs.push_back(one_f_one_b_schedule(P, r, M));
  }

  // Advances one step of one stage if it can; returns whether anything happened.
  bool try_advance(int r) {
    if (pc[r] >= programs[r].size()) return false;
    const PipeStep& s = programs[r][pc[r]];
    if (s.op == PipeOp::Forward) {
      if (r > 0) {
        EXPECT_EQ(have_input[r].count(s.micro_batch), 1u) << "stage " << r << " forward " << s.micro_batch
                                                          << " without its input";
        have_input[r].erase(s.micro_batch);
      }
      forwards_done[r].push_back(s.micro_batch);
      max_in_flight[r] = std::max(max_in_flight[r], ++in_flight[r]);
      ++pc[r];
      return true;
    }
    if (s.op == PipeOp::Backward) {
      if (r < stages - 1) {
        EXPECT_EQ(have_grad[r].count(s.micro_batch), 1u) << "stage " << r << " backward " << s.micro_batch
                                                         << " without its gradient";
        have_grad[r].erase(s.micro_batch);
      }
      EXPECT_NE(std::find(forwards_done[r].begin(), forwards_done[r].end(), s.micro_batch), forwards_done[r].end());
      backwards_done[r].push_back(s.micro_batch);
      --in_flight[r];
      ++pc[r];
      return true;
    }
    if (posted[r].empty()) {
      posted[r] = halves_of(s, r);
      return true;
    }
    return false;
  }

  // Matches a posted send with the peer's posted receive of the same kind.
  bool match() {
    bool any = false;
    for (int r = 0; r < stages; ++r)
      for (Half& snd : posted[r]) {
        if (!snd.is_send || snd.done) continue;
        for (Half& rcv : posted[snd.to]) {
          if (rcv.is_send || rcv.done || rcv.kind != snd.kind || rcv.from != r) continue;
          EXPECT_EQ(rcv.mb, snd.mb) << "stage " << snd.to << " expected micro-batch " << rcv.mb << " of kind "
                                    << snd.kind << " but stage " << r << " sent " << snd.mb;
          snd.done = rcv.done = true;
          (snd.kind == 'F' ? have_input : have_grad)[snd.to][rcv.mb] = 1;
          any = true;
        }
      }
    for (int r = 0; r < stages; ++r) {
      bool all = !posted[r].empty();
      for (const Half& h : posted[r]) all = all && h.done;
      if (all) {
        posted[r].clear();
        ++pc[r];
        any = true;
      }
    }
    return any;
  }

  bool run() {
    for (;;) {
      bool progress = false;
      for (int r = 0; r < stages; ++r) progress = try_advance(r) || progress;
      progress = match() || progress;
      bool finished = true;
      for (int r = 0; r < stages; ++r) finished = finished && pc[r] == programs[r].size();
      if (finished) return true;
      if (!progress) return false;  // deadlock
    }
  }
};

class Schedule : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Schedule, RunsWithoutDeadlockInOrderWithinSlots) {
  const auto [P, M] = GetParam();
  Simulation sim(P, M);
  ASSERT_TRUE(sim.run()) << "deadlock with " << P << " stages and " << M << " micro-batches";
  for (int r = 0; r < P; ++r) {
    std::vector<int> expect(M);
    for (int i = 0; i < M; ++i) expect[i] = i;
    EXPECT_EQ(sim.forwards_done[r], expect) << "stage " << r;
    EXPECT_EQ(sim.backwards_done[r], expect) << "stage " << r << ": backwards must run in forward order";
    EXPECT_LE(sim.max_in_flight[r], pipeline_activation_slots(P, r, M)) << "stage " << r;
    EXPECT_EQ(sim.max_in_flight[r], std::min(P - r, M)) << "stage " << r << ": 1F1B keeps P - r in flight";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Schedule,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Values(1, 2, 3, 4, 7, 16)));

TEST(Schedule, LastStageAlternatesForwardAndBackward) {
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

TEST(Schedule, FirstStageWarmsUpWithPMinusOneForwards) {
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

namespace trident {
namespace {

TEST(LayerPartition, CoversAllLayersOnceAndBalances) {
  for (int L = 1; L <= 40; ++L)
    for (int P = 1; P <= std::min(L, 8); ++P) {
      int next = 0, lo = L, hi = 0;
      for (int s = 0; s < P; ++s) {
        const LayerRange r = pipeline_layer_range(L, P, s);
        EXPECT_EQ(r.begin, next) << L << " layers, " << P << " stages, stage " << s;
        EXPECT_GE(r.end - r.begin, 1);
        lo = std::min(lo, r.end - r.begin);
        hi = std::max(hi, r.end - r.begin);
        next = r.end;
      }
      EXPECT_EQ(next, L);
      EXPECT_LE(hi - lo, 1) << L << " layers over " << P << " stages";
    }
  // The extra layers avoid the last stage (LM head) and prefer the middle.
  EXPECT_EQ(pipeline_layer_range(5, 4, 3).end - pipeline_layer_range(5, 4, 3).begin, 1);
  EXPECT_EQ(pipeline_layer_range(5, 4, 1).end - pipeline_layer_range(5, 4, 1).begin, 2);
  EXPECT_EQ(pipeline_layer_range(3, 2, 0).end, 2);
  EXPECT_EQ(pipeline_layer_range(7, 4, 0).end, 2);   // middle two get one each, then the first
  EXPECT_EQ(pipeline_layer_range(7, 4, 3).begin, 6);
}

}  // namespace
}  // namespace trident
