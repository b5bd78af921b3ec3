// The optimizer's data-parallel gradient reductions are asynchronous (optimizer.h): the
// gradients it reduces end up as the sum over the ranks for every ZeRO stage and gradient
// dtype, also when every asynchronous op only completes at its wait and its buffers read
// as NaN until then (parallel/deferred_async_comm.h), which is how a missing wait shows.
// The other rank of the group is a mirror that holds the same gradients, so every reduced
// gradient is twice this rank's. The backward is simulated: each micro-batch adds a known
// value to every layer's gradients, last layer first, then says the layer is ready.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "unit/model/model_test_util.h"
#include "model/gpt2.h"
#include "model/param_spec.h"
#include "parallel/deferred_async_comm.h"
#include "train/optimizer.h"

namespace trident {
namespace {

// Rank 0 of two whose peer holds exactly this rank's buffers (host buffers only).
class MirrorComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce(const Tensor& t, ReduceOp op) override {
    if (op == ReduceOp::Sum) scale_into(t, t, 2.0f);
  }
  void allgather(const Tensor& in, const Tensor& out) override {
    const size_t n = in.nbytes();
    std::memmove(out.data, in.data, n);
    std::memcpy(static_cast<char*>(out.data) + n, out.data, n);
  }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    ASSERT_EQ(in.numel(), 2 * out.numel());
    scale_into(in.flat_slice(0, out.numel()), out, 2.0f);
  }
  void broadcast(const Tensor&, int) override {}
  void exchange(const std::vector<P2pTransfer>&) override { FAIL() << "no point-to-point in these tests"; }
  void barrier() override {}

 private:
  static void scale_into(const Tensor& in, const Tensor& out, float k) {
    for (int64_t i = 0; i < in.numel(); ++i)
      store_from_float(out.data, out.dtype, i, k * load_as_float(in.data, in.dtype, i));
  }
};

ModelConfig three_layers() {
  ModelConfig c = test::tiny_config();
  c.num_layers = 3;  // with two gradient slots, layer 2 reuses layer 0's
  return c;
}

// What micro-batch m adds to every gradient of group g: exact in fp16 and in its sums.
float added(int m, size_t g) { return 0.5f * static_cast<float>(m + 1) + 0.25f * static_cast<float>(g); }

void add_to(const Tensor& t, float v) {
  for (int64_t i = 0; i < t.numel(); ++i) store_from_float(t.data, t.dtype, i, load_as_float(t.data, t.dtype, i) + v);
}

struct Case {
  int zero;
  DType params, grads;
  bool slots;
  std::string name() const {
    return "zero " + std::to_string(zero) + ", " + dtype_name(params) + " parameters, " + dtype_name(grads) +
           " gradients" + (slots ? ", gradient slots" : "");
  }
};

// Runs one iteration of `micro_batches` simulated backwards and returns the optimizer's
// owned squared gradient norm; `expected` gets the sum over the ranks' exact value.
// `late_write`: a buggy backward adds 1 to layer 1's gradients after saying they are ready.
double reduced_norm_sq(const Case& c, bool deferred, int micro_batches, double* expected, bool late_write = false) {
  auto be = make_cpu_backend();
  ModelConfig cfg = three_layers();
  ParamStore params(*be, gpt2_param_specs(cfg, 1), 1, 0, c.params, c.grads, [](const ParamSpec&) { return true; },
                    128, c.slots ? 2 : 0);
  std::unique_ptr<Comm> dp = std::make_unique<MirrorComm>();
  if (deferred) dp = make_deferred_async_comm(std::move(dp));
  AdamWOptimizer opt(*be, params, AdamWConfig{}, dp.get(), c.zero);
  opt.zero_grads();
  for (int m = 0; m < micro_batches; ++m) {
    opt.begin_backward(m == micro_batches - 1);
    for (size_t g = 0; g < params.groups().size(); ++g)  // embeddings, final LayerNorm
      if (params.groups()[g].layer < 0) add_to(params.group_grads(g), added(m, g));
    for (int layer = cfg.num_layers - 1; layer >= 0; --layer) {
      for (size_t g = 0; g < params.groups().size(); ++g)
        if (params.groups()[g].layer == layer) add_to(params.group_grads(g), added(m, g));
      opt.on_layer_gradients_ready(layer);
      if (late_write && layer == 1 && m == micro_batches - 1)
        for (size_t g = 0; g < params.groups().size(); ++g)
          if (params.groups()[g].layer == 1) add_to(params.group_grads(g), 1.0f);
    }
  }
  opt.reduce_gradients();
  *expected = 0;
  for (const LocalParam& p : params.list()) {
    double sum = 0;
    for (int m = 0; m < micro_batches; ++m) sum += added(m, p.group);
    for (const ShardPiece& s : opt.plan().owned_pieces(FlatRange{p.offset, p.offset + p.numel()}))
      *expected += static_cast<double>(s.size()) * (2 * sum) * (2 * sum);
  }
  return opt.owned_grad_sum_squares([](const ParamSpec&) { return true; });
}

const std::vector<Case> kCases = {
    {0, DType::F32, DType::F32, false}, {0, DType::F16, DType::F16, false}, {1, DType::F32, DType::F32, false},
    {1, DType::F16, DType::F16, false}, {1, DType::BF16, DType::F32, false}, {2, DType::F32, DType::F32, false},
    {2, DType::F32, DType::F32, true},  {2, DType::F16, DType::F16, true},  {2, DType::BF16, DType::F32, true},
};

TEST(OptimizerReductions, EveryStageReducesTheSumOverRanks) {
  for (const Case& c : kCases)
    for (int micro_batches : {1, 3}) {
      double expected = 0;
      const double got = reduced_norm_sq(c, false, micro_batches, &expected);
      EXPECT_NEAR(got, expected, 1e-9 * expected) << c.name() << ", " << micro_batches << " micro-batches";
    }
}

TEST(OptimizerReductions, NoBufferIsTouchedBeforeItsReductionIsWaitedFor) {
  for (const Case& c : kCases)
    for (int micro_batches : {1, 3}) {
      const std::string what = c.name() + ", " + std::to_string(micro_batches) + " micro-batches";
      double expected = 0;
      try {
        const double got = reduced_norm_sq(c, true, micro_batches, &expected);
        EXPECT_NEAR(got, expected, 1e-9 * expected) << what;
      } catch (const InternalError& e) {  // a buffer reused or overwritten before its wait
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
}

// --no-overlap-grad-reduce: each reduction is waited for as soon as it is queued, so a
// layer's gradients are reduced (not NaN under the deferred ops) right after it is ready.
TEST(OptimizerReductions, WithoutOverlapEachReductionIsDoneWhenItsLayerIsReady) {
  for (bool overlap : {true, false}) {
    auto be = make_cpu_backend();
    ParamStore params(*be, gpt2_param_specs(three_layers(), 1), 1, 0, DType::F32, DType::F32,
                      [](const ParamSpec&) { return true; }, 128);
    auto dp = make_deferred_async_comm(std::make_unique<MirrorComm>());
    AdamWOptimizer opt(*be, params, AdamWConfig{}, dp.get(), 0);
    opt.set_overlap_grad_reduce(overlap);
    opt.zero_grads();
    opt.begin_backward(true);
    size_t g2 = 0;
    for (size_t g = 0; g < params.groups().size(); ++g)
      if (params.groups()[g].layer == 2) g2 = g;
    add_to(params.group_grads(g2), 1.0f);
    opt.on_layer_gradients_ready(2);
    const Tensor t = params.group_grads(g2);
    EXPECT_EQ(std::isnan(load_as_float(t.data, t.dtype, 0)), overlap) << "overlap " << overlap;
    if (!overlap) {
      EXPECT_EQ(load_as_float(t.data, t.dtype, 0), 2.0f);  // this rank's 1 + the mirror's
    }
    opt.reduce_gradients();
    EXPECT_EQ(load_as_float(t.data, t.dtype, 0), 2.0f);
  }
}

// The check above can fail. A buffer reused or overwritten before its wait throws (the
// wrapper's own test); a gradient accumulated into after its bucket was queued keeps the
// poison's NaN bits, and is lost: the norm differs from the synchronous one (the parity
// tests' serial run), though no exception says so.
TEST(OptimizerReductions, UnderTheDeferredCheckAnAccumulationAfterQueuingIsLost) {
  const Case c{0, DType::F32, DType::F32, false};
  double expected = 0;
  const double synchronous = reduced_norm_sq(c, false, 1, &expected, true);
  const double deferred = reduced_norm_sq(c, true, 1, &expected, true);
  EXPECT_GT(synchronous, expected * (1 + 1e-6));  // the late write counts when ops are immediate
  EXPECT_NEAR(deferred, expected, 1e-9 * expected);  // and is lost when they are not
}

// Records which parameter group each gather fills, in the order the gathers reach it.
class GatherOrder final : public Comm {
 public:
  GatherOrder(std::vector<size_t>& order, const ParamStore& p) : order_(order), params_(p) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce(const Tensor& t, ReduceOp op) override { mirror_.allreduce(t, op); }
  void allgather(const Tensor& in, const Tensor& out) override {
    for (size_t g = 0; g < params_.groups().size(); ++g)
      if (out.data == params_.flat_params().flat_slice(params_.groups()[g].begin, 1).data) order_.push_back(g);
    mirror_.allgather(in, out);
  }
  void reduce_scatter(const Tensor& in, const Tensor& out) override { mirror_.reduce_scatter(in, out); }
  void broadcast(const Tensor&, int) override {}
  void exchange(const std::vector<P2pTransfer>&) override {}
  void barrier() override {}

 private:
  std::vector<size_t>& order_;
  const ParamStore& params_;
  MirrorComm mirror_;
};

// One step with --overlap-param-gather at lr 0 (the owned chunks keep their values) on a
// stage's ParamStore (the whole model by default); `dp` wraps the GatherOrder comm that
// records into `order`.
struct ParamGatherRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore params;
  std::vector<size_t> order;
  std::unique_ptr<Comm> dp;
  std::unique_ptr<AdamWOptimizer> opt;
  ParamGatherRun(int zero, bool deferred, bool first_stage = true, bool last_stage = true)
      : params(*be, gpt2_param_specs(three_layers(), 1), 1, 0, DType::F32, DType::F32,
               [&](const ParamSpec& s) { return stage_holds(s, 0, 3, first_stage, last_stage); }, 128,
               zero == 2 ? 2 : 0) {
    params.init(7);
    dp = std::make_unique<GatherOrder>(order, params);
    if (deferred) dp = make_deferred_async_comm(std::move(dp));
    AdamWConfig ac;
    ac.weight_decay = 0;
    opt = std::make_unique<AdamWOptimizer>(*be, params, ac, dp.get(), zero);
    opt->set_overlap_param_gather(true);
    opt->zero_grads();
    opt->reduce_gradients();
    opt->step(0.0, 0.0);
  }
  size_t group_of(const std::string& param) const { return params.find(param).group; }
  Tensor group_params(size_t g) const {
    return params.flat_params().flat_slice(params.groups()[g].begin, params.groups()[g].size());
  }
  bool all_nan(size_t g) const {
    const Tensor t = group_params(g);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isnan(load_as_float(t.data, t.dtype, i))) return false;
    return true;
  }
  // Every group whole: rank 0's chunk in both halves, the mirror peer holding the same.
  void expect_gathered(const std::string& what) const {
    for (size_t g = 0; g < params.groups().size(); ++g) {
      const Tensor t = group_params(g);
      const int64_t half = t.numel() / 2;
      for (int64_t i = 0; i < half; ++i) {
        const float a = load_as_float(t.data, t.dtype, i), b = load_as_float(t.data, t.dtype, half + i);
        ASSERT_FALSE(std::isnan(a)) << what << " group " << g << " element " << i;
        ASSERT_EQ(a, b) << what << " group " << g << " element " << i;
      }
    }
  }
};

// step() queues the gathers in the order the forward reads the buckets: on the first stage
// the embeddings first, the layers, then the final LayerNorm; on a last stage (pp > 1) the
// layers, then its tied wte copy and the final LayerNorm, which the LM head reads last.
TEST(OptimizerParamGather, QueuedInForwardOrder) {
  for (int zero : {1, 2}) {
    ParamGatherRun whole(zero, false);  // the default async op runs at once: the queue order
    EXPECT_EQ(whole.order, (std::vector<size_t>{whole.group_of("wte"), whole.group_of("h.0.ln_1.weight"),
                                                whole.group_of("h.1.ln_1.weight"), whole.group_of("h.2.ln_1.weight"),
                                                whole.group_of("ln_f.weight")}))
        << "zero " << zero;
    ParamGatherRun last(zero, false, false, true);
    EXPECT_EQ(last.order, (std::vector<size_t>{last.group_of("h.0.ln_1.weight"), last.group_of("h.1.ln_1.weight"),
                                               last.group_of("h.2.ln_1.weight"), last.group_of("wte"),
                                               last.group_of("ln_f.weight")}))
        << "zero " << zero;
  }
}

// Each bucket's parameters read as NaN (deferred ops) until the forward waits for that
// bucket; wait_for_all_params() makes all of them whole.
TEST(OptimizerParamGather, ABucketArrivesWhenTheForwardWaitsForIt) {
  for (int zero : {1, 2}) {
    ParamGatherRun run(zero, true);
    for (size_t g = 0; g < run.params.groups().size(); ++g) EXPECT_TRUE(run.all_nan(g)) << "zero " << zero;
    run.opt->wait_for_params(1);
    EXPECT_FALSE(run.all_nan(run.group_of("h.1.ln_1.weight")));
    EXPECT_TRUE(run.all_nan(run.group_of("h.0.ln_1.weight")));
    EXPECT_TRUE(run.all_nan(run.group_of("wte")));
    run.opt->wait_for_params(Gpt2Model::kParamsBeforeLayers);
    EXPECT_FALSE(run.all_nan(run.group_of("wte")));
    EXPECT_TRUE(run.all_nan(run.group_of("ln_f.weight")));
    run.opt->wait_for_params(Gpt2Model::kParamsAfterLayers);
    EXPECT_FALSE(run.all_nan(run.group_of("ln_f.weight")));
    run.opt->wait_for_all_params();
    run.expect_gathered("zero " + std::to_string(zero));
  }
}

// A step right after another, with no forward in between (a benchmark's loop), waits for
// the previous step's gathers before it updates the parameters and gathers them again.
TEST(OptimizerParamGather, ASecondStepWaitsForTheFirstStepsGathers) {
  ParamGatherRun run(1, true);
  run.opt->zero_grads();
  run.opt->reduce_gradients();
  EXPECT_NO_THROW(run.opt->step(0.0, 0.0));
  run.opt->wait_for_all_params();
  run.expect_gathered("second step");
}

}  // namespace
}  // namespace trident
