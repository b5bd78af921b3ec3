// Generation on the GPU against the same model on the CPU: greedy decoding of prompts of
// different lengths together (generate_tokens, the server's and trident-generate's loop)
// gives the same tokens and log-probabilities within 1e-4, and beam search (whose KV-cache
// rows move between beams, Gpt2Decoder::reorder) the same hypotheses with scores within
// 1e-4. fp32 weights (init std 0.3, far from ties) and fp32 GEMMs (no TF32: with it, an
// H200 gave log-probabilities 7.8e-3 apart); skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "infer/beam_search.h"
#include "infer/generate.h"
#include "model/param_spec.h"
#include "model/param_store.h"

namespace trident::cuda_test {
namespace {

ModelConfig generation_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 24;
  c.max_position_embeddings = 24;
  c.vocab_size = 200;
  c.make_vocab_size_divisible_by = 64;
  c.init_method_std = 0.3f;
  c.dtype = DType::F32;
  return c;
}

TEST(CudaGeneration, GreedyAndBeamSearchMatchTheCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const ModelConfig cfg = generation_config();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, {.allow_tf32 = false});  // TF32 GEMMs would move the logits by ~1e-2
  const auto all = [](const ParamSpec&) { return true; };
  ParamStore on_cpu(*cpu, gpt2_param_specs(cfg, 1), 1, 0, cfg.dtype, cfg.dtype, all);
  ParamStore on_gpu(*gpu, gpt2_param_specs(cfg, 1), 1, 0, cfg.dtype, cfg.dtype, all);
  on_cpu.init(7);
  for (const LocalParam& p : on_cpu.list()) {  // the same bytes on the GPU
    std::vector<unsigned char> bytes(on_cpu.param(p).nbytes());
    cpu->copy_to_host(bytes.data(), on_cpu.param(p));
    gpu->copy_from_host(on_gpu.param(p.spec.name), bytes.data());
  }
  gpu->synchronize();

  DecodeOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = 10;
  o.logprobs = true;
  const std::vector<std::vector<int32_t>> prompts = {{5}, {17, 3, 99}, {1, 2, 3, 4, 5, 6, 7}};
  std::mt19937_64 rng_cpu(1), rng_gpu(1);
  const auto want = generate_tokens(cfg, *cpu, on_cpu, prompts, o, rng_cpu);
  const auto got = generate_tokens(cfg, *gpu, on_gpu, prompts, o, rng_gpu);
  double worst = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(got[b].tokens, want[b].tokens) << "prompt " << b;
    ASSERT_EQ(got[b].logprobs.size(), want[b].logprobs.size());
    for (size_t i = 0; i < want[b].logprobs.size(); ++i)
      worst = std::max(worst, std::fabs(got[b].logprobs[i] - want[b].logprobs[i]));
  }
  EXPECT_LE(worst, 1e-4);

  BeamSearchOptions beam;
  beam.beam_width = 4;
  beam.max_new_tokens = 12;
  beam.stop_token = 0;
  const auto want_beams = beam_search(cfg, *cpu, on_cpu, {17, 3, 99}, beam);
  const auto got_beams = beam_search(cfg, *gpu, on_gpu, {17, 3, 99}, beam);
  ASSERT_EQ(got_beams.size(), want_beams.size());
  double worst_score = 0;
  for (size_t i = 0; i < want_beams.size(); ++i) {
    EXPECT_EQ(got_beams[i].tokens, want_beams[i].tokens) << "hypothesis " << i;
    worst_score = std::max(worst_score, std::fabs(got_beams[i].score - want_beams[i].score));
  }
  EXPECT_LE(worst_score, 1e-4);
  std::printf("greedy logprobs within %.2g, beam scores within %.2g of the CPU\n", worst, worst_score);
}

}  // namespace
}  // namespace trident::cuda_test
