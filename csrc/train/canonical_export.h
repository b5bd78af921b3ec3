// Writes a model's parameters, whatever the layout it was trained under, as canonical full
// fp32 tensors (ARCHITECTURE.md invariant 1) in one safetensors file: the word embedding
// without its vocabulary padding, every other tensor at its canonical shape. The slices are
// gathered on world rank 0, which writes the file; two runs under different layouts that
// train the same model therefore write files that compare element by element.
#pragma once

#include <string>

#include "model/gpt2.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline_split.h"

namespace trident {

// Collective over the world: every rank calls it after the same iteration. `model` is the
// stage's model (its params() hold all of the stage's), `split` the run's pipeline split.
void save_canonical_params(Gpt2Model& model, ParallelContext& parallel, const PipelineSplit& split,
                           const std::string& path);

}  // namespace trident
