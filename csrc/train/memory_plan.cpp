#include "train/memory_plan.h"

#include <memory>
#include <ostream>

#include "core/error.h"
#include "kernels/dry_run_backend.h"
#include "parallel/parallel_context.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

namespace trident {

StageMemory plan_stage_memory(const TrainOptions& opt, int world, int stage) {
  const GridShape shape = make_grid_shape(world, opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size);
  TRIDENT_CHECK(stage >= 0 && stage < shape.pp, "plan_stage_memory: stage out of range");
  DryRunBackend backend;
  std::unique_ptr<ParallelContext> par = make_dry_run_context(shape, ProcessGrid(shape, 0).rank_of(0, 0, stage));
  std::ostream quiet(nullptr);
  StageMemory m;
  m.stage = stage;
  {
    TrainOptions o = opt;
    o.tensorboard_dir.clear();  // no files, no comms of rank 0's
    Trainer trainer(o, backend, std::make_unique<SyntheticSource>(o.model.vocab_size, o.model.seq_length, o.seed),
                    quiet, par.get());
    const ParamStore& params = trainer.model().params();
    m.layers = trainer.chunk_layers();
    for (const LocalParam& p : params.list()) m.parameters += p.numel();  // not the buffer's alignment padding
    m.weights = params.flat_params().nbytes();
    m.gradients = params.flat_grads().nbytes();
    m.optimizer = trainer.optimizer().state_bytes();
    m.after_setup = backend.allocator().stats().bytes_in_use;
    trainer.train_iteration();
  }
  m.peak = backend.allocator().stats().peak_bytes_in_use;
  return m;
}

}  // namespace trident
