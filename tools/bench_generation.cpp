#include "tools/bench_generation.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "infer/decoder.h"
#include "infer/generate.h"
#include "infer/sampler.h"
#include "kernels/backends.h"
#include "kernels/profiling_backend.h"
#include "model/param_spec.h"
#include "model/param_store.h"
#include "tools/with_env.h"

namespace trident {
namespace {

struct Timings {
  double prefill_s = 0, decode_s = 0;
  int chunk = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One generation: the prompts in prefill passes (only the last position's logits), then
// `new_tokens` - 1 greedy steps (the last token drawn is never fed back, as in
// generate_tokens), each sequence fed its most likely token, drawn on the device as
// generate_tokens draws greedy tokens (step_greedy). With `profile`, its timing is on for
// the steps alone.
Timings generate_once(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                      const std::vector<int32_t>& prompts, int B, int64_t P, int64_t new_tokens,
                      ProfilingBackend* profile = nullptr) {
  Timings t;
  t.chunk = prefill_chunk(B, P, false);
  Gpt2Decoder dec(cfg, backend, params, B, static_cast<int>(P + new_tokens - 1), nullptr, t.chunk);
  const int64_t V = cfg.vocab_size;
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<float>& logits = dec.prefill(prompts, P);  // the logits come to the host: synchronous
  t.prefill_s = seconds_since(t0);
  if (profile) {
    profile->reset_times();
    profile->set_timing(true);
  }
  t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> feed(B);
  for (int b = 0; b < B; ++b) feed[b] = most_likely(logits.data() + b * V, V, 1)[0];
  for (int64_t step = 0; step + 1 < new_tokens; ++step) feed = dec.step_greedy(feed);
  t.decode_s = seconds_since(t0);
  if (profile) profile->set_timing(false);
  return t;
}

// The "decode profile:" line: the steps of one more generation with every op synchronised
// and timed, by op family (ms and calls a step, largest first), and the rest of the step's
// wall time ("outside the ops": the host's own work, e.g. the decoder's bookkeeping).
void decode_profile(const ModelConfig& cfg, ProfilingBackend& profile, const ParamStore& params,
                    const std::vector<int32_t>& prompts, int B, int64_t P, int64_t new_tokens) {
  const int64_t steps = new_tokens - 1;
  if (steps < 1) return;
  const Timings t = generate_once(cfg, profile, params, prompts, B, P, new_tokens, &profile);
  std::vector<std::pair<std::string, OpTime>> ops(profile.times().begin(), profile.times().end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double in_ops = 0;
  std::string line;
  for (const auto& [name, op] : ops) {
    in_ops += op.seconds;
    char part[96];
    std::snprintf(part, sizeof part, "%s%s %.3f ms x%lld", line.empty() ? "" : ", ", name.c_str(),
                  op.seconds * 1e3 / steps, static_cast<long long>(op.calls / steps));
    line += part;
  }
  std::printf("decode profile (every op synchronised): %.2f ms a step: %s; outside the ops %.3f ms\n",
              t.decode_s * 1e3 / steps, line.c_str(), (t.decode_s - in_ops) * 1e3 / steps);
}

// Ragged prompts (prompts[b] of its own length), `new_tokens` greedy draws each, through
// generate_tokens: every prompt in padded passes, then each sequence at its own length.
double ragged_per_row(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                      const std::vector<std::vector<int32_t>>& prompts, int64_t new_tokens) {
  DecodeOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = new_tokens;
  std::mt19937_64 rng(1);
  const auto t0 = std::chrono::steady_clock::now();
  generate_tokens(cfg, backend, params, prompts, o, rng);
  return seconds_since(t0);
}

// The same through the schedule generate_tokens had before 2026-12-04: passes up to the
// shortest prompt's end, then every sequence one position a step (its prompt's tokens while
// it has them, then its greedy draws, taken on the device as generate_tokens takes them),
// up to the longest prompt's end + new_tokens - 1.
// Returns the time; it takes longest + new_tokens - 1 - shortest steps.
double ragged_lockstep(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                       const std::vector<std::vector<int32_t>>& prompts, int64_t new_tokens) {
  const int B = static_cast<int>(prompts.size());
  int64_t shortest = INT64_MAX, longest = 0;
  for (const auto& p : prompts) {
    shortest = std::min<int64_t>(shortest, static_cast<int64_t>(p.size()));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  const int64_t end = longest + new_tokens - 1;  // positions fed
  const auto t0 = std::chrono::steady_clock::now();  // as generate_tokens, the decoder's set-up included
  Gpt2Decoder dec(cfg, backend, params, B, static_cast<int>(end), nullptr, prefill_chunk(B, shortest, false));
  std::vector<std::vector<int32_t>> seqs = prompts;
  std::vector<int32_t> heads;
  for (const auto& p : prompts) heads.insert(heads.end(), p.begin(), p.begin() + shortest);
  const int64_t V = cfg.vocab_size;
  const std::vector<float>& logits = dec.prefill(heads, shortest);
  std::vector<int32_t> drawn(B), feed(B);  // each sequence's most likely next token
  for (int b = 0; b < B; ++b) drawn[b] = most_likely(logits.data() + b * V, V, 1)[0];
  for (int64_t pos = shortest; pos < end; ++pos) {
    for (int b = 0; b < B; ++b) {
      std::vector<int32_t>& s = seqs[b];
      const int64_t total = static_cast<int64_t>(prompts[b].size()) + new_tokens;
      if (static_cast<int64_t>(s.size()) == pos && pos < total) s.push_back(drawn[b]);  // past its prompt
      feed[b] = s[static_cast<size_t>(std::min<int64_t>(pos, static_cast<int64_t>(s.size()) - 1))];
    }
    drawn = dec.step_greedy(feed);
  }
  return seconds_since(t0);
}

// The "ragged:" line: B prompts of P (b + 1) / B tokens (the first tokens of each random
// prompt), both schedules after an untimed run of each.
void ragged_bench(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                  const std::vector<int32_t>& tokens, int B, int64_t P, int64_t new_tokens) {
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < B; ++b) {
    const int64_t n = std::max<int64_t>(1, P * (b + 1) / B);
    prompts.emplace_back(tokens.begin() + b * P, tokens.begin() + b * P + n);
  }
  ragged_per_row(cfg, backend, params, prompts, new_tokens);
  ragged_lockstep(cfg, backend, params, prompts, new_tokens);
  const double per_row = ragged_per_row(cfg, backend, params, prompts, new_tokens);
  const double lockstep = ragged_lockstep(cfg, backend, params, prompts, new_tokens);
  const int64_t steps = static_cast<int64_t>(prompts.back().size() + new_tokens - 1 - prompts.front().size());
  const int chunk = prefill_chunk(B, P, false);
  const int64_t passes = (P + chunk - 1) / chunk;
  std::printf("ragged: prompts of %zu..%zu tokens, %lld new: each at its own length %.1f ms (%lld pass%s + %lld "
              "steps) | every sequence a step from the shortest prompt %.1f ms (%lld steps) | %.2fx\n",
              prompts.front().size(), prompts.back().size(), static_cast<long long>(new_tokens), per_row * 1e3,
              static_cast<long long>(passes), passes == 1 ? "" : "es", static_cast<long long>(new_tokens - 1),
              lockstep * 1e3, static_cast<long long>(steps), lockstep / per_row);
}

// Seconds a step of `steps` sampled decoding steps after the prompts' prefill, each sequence
// fed its draw: on the device (step_sampled, B ids to the host) or, as generate_tokens draws
// when it needs the logits, on the host (step()'s B rows of logits, sample_token per row).
double sampled_step_seconds(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                            const std::vector<int32_t>& prompts, int B, int64_t P, int64_t steps,
                            const SamplingOptions& sampling, bool on_device) {
  Gpt2Decoder dec(cfg, backend, params, B, static_cast<int>(P + steps), nullptr, prefill_chunk(B, P, false));
  const int64_t V = cfg.vocab_size;
  const std::vector<float>& first = dec.prefill(prompts, P);
  std::vector<int32_t> feed(B);
  for (int b = 0; b < B; ++b) feed[b] = most_likely(first.data() + b * V, V, 1)[0];
  std::mt19937_64 rng(7);
  std::vector<RowDraw> draws(static_cast<size_t>(B));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    if (on_device) {
      for (RowDraw& d : draws) d = RowDraw{uniform_draw(rng), sampling.top_p};
      feed = dec.step_sampled(feed, draw_rule(sampling), draws);
    } else {
      const std::vector<float>& logits = dec.step(feed);
      for (int b = 0; b < B; ++b) feed[b] = sample_token(logits.data() + b * V, V, sampling, rng);
    }
  }
  return seconds_since(t0) / static_cast<double>(steps);
}

// The "sampled decode:" line: 16 steps (fewer when the positions end sooner) drawn on the
// device and on the host, under top-k 50 (a few candidates) and top-p 0.9 alone (the whole
// vocabulary is a candidate: the host sorts it), each after an untimed run.
void sampled_bench(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                   const std::vector<int32_t>& prompts, int B, int64_t P, int64_t new_tokens) {
  const int64_t steps = std::min<int64_t>(16, new_tokens - 1);
  if (steps < 1) return;
  std::string line;
  for (const SamplingOptions& sampling : {SamplingOptions{false, 1.0, 50, 0.0}, SamplingOptions{false, 1.0, 0, 0.9}}) {
    double ms[2];
    for (bool on_device : {true, false}) {
      sampled_step_seconds(cfg, backend, params, prompts, B, P, steps, sampling, on_device);
      ms[on_device] = 1e3 * sampled_step_seconds(cfg, backend, params, prompts, B, P, steps, sampling, on_device);
    }
    char part[160];
    std::snprintf(part, sizeof part, "%s%s: drawn on the device %.2f ms a step | on the host %.2f ms | %.2fx",
                  line.empty() ? "" : "; ", sampling.top_k > 0 ? "top-k 50" : "top-p 0.9", ms[1], ms[0],
                  ms[0] / ms[1]);
    line += part;
  }
  std::printf("sampled decode (temperature 1, %lld steps): %s\n", static_cast<long long>(steps), line.c_str());
}

}  // namespace

int run_generation_bench(const TrainOptions& opt, const GenerationBenchOptions& g) {
  const ModelConfig& cfg = opt.model;
  if (opt.tensor_model_parallel_size != 1 || opt.pipeline_model_parallel_size != 1)
    throw ConfigError("--generate times one process: no --tensor-model-parallel-size or "
                      "--pipeline-model-parallel-size");
  const int64_t P = g.prompt > 0 ? g.prompt : std::max<int64_t>(1, cfg.seq_length / 2);
  const int64_t new_tokens =
      g.new_tokens > 0 ? g.new_tokens : std::min<int64_t>(128, cfg.max_position_embeddings - P);
  const std::string prompt_flag =  // the flags as given (a default said as one)
      g.prompt > 0 ? "--generate-prompt " + std::to_string(P) : "a prompt of " + std::to_string(P) + " (seq-length / 2)";
  if (g.new_tokens == 0 && new_tokens < 1)
    throw ConfigError(prompt_flag + ": no position left for a new token (--max-position-embeddings " +
                      std::to_string(cfg.max_position_embeddings) + ")");
  if (P + new_tokens > cfg.max_position_embeddings)
    throw ConfigError(prompt_flag + " + --generate-tokens " + std::to_string(new_tokens) + ": past " +
                      std::to_string(cfg.max_position_embeddings) + " positions (--max-position-embeddings)");
  if (g.ragged && P + new_tokens > cfg.seq_length)  // generate_tokens' length rule: all new tokens drawn
    throw ConfigError("--generate-ragged: --generate-prompt " + std::to_string(P) + " + --generate-tokens " +
                      std::to_string(new_tokens) + " past --seq-length " + std::to_string(cfg.seq_length));
  const int B = opt.micro_batch_size;
  // Through a profiling wrapper whose timing is off but for decode_profile's steps.
  auto inner = make_backend(opt.device, backend_options(opt));
  const std::string backend_name = inner->name();
  auto backend = std::make_unique<ProfilingBackend>(std::move(inner));
  backend->set_timing(false);
  ParamStore params(*backend, gpt2_param_specs(cfg, 1), 1, 0, cfg.dtype, cfg.dtype,
                    [](const ParamSpec&) { return true; });
  params.init(opt.seed);
  std::mt19937 rng(static_cast<uint32_t>(opt.seed));
  std::vector<int32_t> prompts(static_cast<size_t>(B * P));
  for (int32_t& t : prompts) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
  generate_once(cfg, *backend, params, prompts, B, P, new_tokens);  // warm-up: caches, cuBLASLt plans
  const Timings t = generate_once(cfg, *backend, params, prompts, B, P, new_tokens);
  const int64_t steps = new_tokens - 1;
  std::printf("trident-bench --generate: %s, %s, %d layers, hidden %d, heads %d, %d sequence%s, prompt %lld, "
              "%lld new tokens\n",
              backend_name.c_str(), dtype_name(cfg.dtype), cfg.num_layers, cfg.hidden_size,
              cfg.num_attention_heads, B, B == 1 ? "" : "s", static_cast<long long>(P),
              static_cast<long long>(new_tokens));
  std::printf("prefill: %lld tokens in %.1f ms | %.1f tokens/s (passes of %d positions)\n",
              static_cast<long long>(B * P), t.prefill_s * 1e3, B * P / t.prefill_s, t.chunk);
  if (steps > 0)
    std::printf("decode: %lld steps in %.1f ms | %.2f ms a step | %.1f tokens/s\n", static_cast<long long>(steps),
                t.decode_s * 1e3, t.decode_s * 1e3 / steps, B * steps / t.decode_s);
  // The opt-ins for decoding's small-M GEMMs, each after an untimed run (which times
  // TRIDENT_GEMM_AUTOTUNE's candidates), against the decode line above.
  struct Variant {
    const char* label;
    const char* env;
  };
  if (steps > 0 && backend_name.find("cuda") != std::string::npos)
    for (const Variant& v : {Variant{"GEMMs autotuned", "TRIDENT_GEMM_AUTOTUNE=1"},
                             Variant{"small-M GEMV", "TRIDENT_GEMM_GEMV=1"}})
      with_env(v.env, [&] {
        generate_once(cfg, *backend, params, prompts, B, P, new_tokens);
        const Timings other = generate_once(cfg, *backend, params, prompts, B, P, new_tokens);
        std::printf("decode, %s (%s): %.2f ms a step | %.1f tokens/s | %.2fx; prefill %.1f ms\n", v.label, v.env,
                    other.decode_s * 1e3 / steps, B * steps / other.decode_s, t.decode_s / other.decode_s,
                    other.prefill_s * 1e3);
      });
  if (g.ragged) ragged_bench(cfg, *backend, params, prompts, B, P, new_tokens);
  sampled_bench(cfg, *backend, params, prompts, B, P, new_tokens);
  decode_profile(cfg, *backend, params, prompts, B, P, new_tokens);
  return 0;
}

}  // namespace trident
