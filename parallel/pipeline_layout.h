// Megatron-core's --pipeline-model-parallel-layout: the layers of every pipeline stage and
// model chunk spelled out, e.g. "Et*3|(tt|)*5,L" (PipelineParallelLayerLayout).
//  * '|' separates virtual stages, listed chunk by chunk, stage by stage within a chunk:
//    virtual stage i is chunk i / pp of stage i % pp, so the count of virtual stages over pp
//    is the model chunks a stage (the interleaved schedule when above 1);
//  * 'E' is the embedding, 't' a transformer layer, 'L' the LM head with its loss; ',' is
//    cosmetic; "X*n" repeats the character X and "(...)*n" the parenthesised text n times
//    (unrolled as Megatron's two regular expressions do: parentheses do not nest);
//  * the layout must begin with 'E' and end with 'L', each once, and hold --num-layers 't's.
//    A virtual stage may be empty. Megatron's 'm' (multi-token prediction) is not GPT-2's.
#pragma once

#include <string>
#include <vector>

namespace trident {

// The virtual stages of `text`, each the characters of its layers, unrolled; empty with
// `why` set when it does not parse (an unknown character, an unrolling too long).
std::vector<std::string> pipeline_layout_virtual_stages(const std::string& text, std::string& why);

// "--pipeline-model-parallel-layout \"TEXT\"" for messages, a long TEXT cut short.
std::string pipeline_layout_flag(const std::string& text);

// The model chunks a stage that `text` makes over `stages` pipeline stages (Megatron's
// virtual_pipeline_model_parallel_size): its virtual stages over `stages`; 1 where it does not
// parse or they do not divide, which pipeline_layout_counts then reports.
int pipeline_layout_chunks(const std::string& text, int stages);

// counts[stage][chunk]: the transformer layers of each model chunk of each of `stages`
// pipeline stages. Empty with `why` set, in the flag's words, when the layout does not fit
// `stages` and `num_layers` or breaks Megatron's rules.
std::vector<std::vector<int>> pipeline_layout_counts(const std::string& text, int stages, int num_layers,
                                                     std::string& why);

}  // namespace trident
