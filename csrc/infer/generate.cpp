#include "infer/generate.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "infer/decoder.h"

namespace trident {
namespace {

// Records the log-probability of `token` (and the k most likely tokens) under `row`.
void record_logprobs(const float* row, int64_t n, int32_t token, int k, Generation& g) {
  const double lse = log_sum_exp(row, n);
  g.logprobs.push_back(static_cast<double>(row[token]) - lse);
  if (k == 0) return;
  std::vector<std::pair<int32_t, double>> top;
  for (int32_t id : most_likely(row, n, k)) top.emplace_back(id, static_cast<double>(row[id]) - lse);
  g.top_logprobs.push_back(std::move(top));
}

}  // namespace

int64_t room_after(const ModelConfig& cfg, int64_t context_length) {
  return std::max<int64_t>(0, cfg.seq_length - context_length);
}

std::vector<Generation> generate_tokens(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                        const std::vector<std::vector<int32_t>>& prompts, const DecodeOptions& o,
                                        std::mt19937_64& rng, Comm* tp_comm) {
  TRIDENT_CHECK(!prompts.empty(), "generate_tokens: no prompt");
  TRIDENT_CHECK(o.max_new_tokens >= 0, "generate_tokens: max_new_tokens ", o.max_new_tokens);
  TRIDENT_CHECK(o.top_logprobs >= 0 && o.top_logprobs <= cfg.vocab_size, "generate_tokens: top_logprobs ",
                o.top_logprobs);
  const int top_k_logprobs = o.logprobs ? o.top_logprobs : 0;
  const int B = static_cast<int>(prompts.size());
  std::vector<Generation> out(B);
  std::vector<int64_t> total(B);  // each sequence's length limit
  int64_t longest = 0, shortest = INT64_MAX;
  for (int b = 0; b < B; ++b) {
    const int64_t n = static_cast<int64_t>(prompts[b].size());
    TRIDENT_CHECK(n >= 1 && n <= cfg.seq_length && (o.max_new_tokens == 0 || n < cfg.seq_length),
                  "generate_tokens: a prompt of ", n, " tokens for a sequence length of ", cfg.seq_length);
    out[b].tokens = prompts[b];
    out[b].prompt_length = n;
    total[b] = n + std::min(o.max_new_tokens, room_after(cfg, n));
    longest = std::max(longest, total[b]);
    shortest = std::min(shortest, n);
  }
  // The last token of a sequence is never fed: the cache holds one position less.
  const int64_t steps = longest - 1;
  bool any = o.logprobs;  // anything to score or draw
  for (int b = 0; b < B; ++b) any = any || total[b] > out[b].prompt_length;
  if (steps == 0 || !any) return out;
  // Every prompt goes through the model in passes of up to `chunk` positions (B x chunk rows
  // a pass), the shorter ones padded with their last token up to the longest (those rows'
  // logits are not used, and their cache rows are overwritten by the sequence's draws). The
  // LM head sees the positions whose logits are used: each prompt's end (its first draw)
  // and, with `logprobs`, every prompt position. Then each sequence feeds its draws one
  // position a step at its own length (the decoder's per-row positions).
  int64_t prefill_end = 0;  // one past the last prompt position whose logits are used
  for (int b = 0; b < B; ++b) {
    const int64_t length = out[b].prompt_length;
    if (total[b] > length) prefill_end = std::max(prefill_end, length);
    else if (o.logprobs) prefill_end = std::max(prefill_end, length - 1);
  }
  const int chunk = prefill_chunk(B, prefill_end, o.logprobs, o.prefill_chunk);
  Gpt2Decoder dec(cfg, backend, params, B, static_cast<int>(steps), tp_comm, chunk);
  // Whether sequence b draws no more: ended, cancelled, or at its length limit.
  const auto drawn_all = [&](int b) {
    return out[b].finished || out[b].cancelled || static_cast<int64_t>(out[b].tokens.size()) == total[b];
  };
  // Megatron's top-p decay: the top-p of a draw after position pos, decayed once for each
  // position from the shortest prompt's last to pos - 1 (its generation loop decays after
  // every step from the shortest prompt's end on).
  std::vector<double> top_p_after(static_cast<size_t>(steps), o.sampling.top_p);
  for (int64_t pos = 1; pos < steps; ++pos) {
    double p = top_p_after[pos - 1];
    if (pos >= shortest && p > 0 && o.top_p_decay > 0) {
      p *= o.top_p_decay;
      if (o.top_p_bound > 0) p = std::max(p, o.top_p_bound);
    }
    top_p_after[pos] = p;
  }

  const int64_t V = cfg.vocab_size;
  std::vector<float> row(static_cast<size_t>(V));
  SamplingOptions sampling = o.sampling;
  const auto append = [&](int b, int32_t token) {  // a drawn token; `ends` may finish the sequence
    Generation& g = out[b];
    g.tokens.push_back(token);
    g.finished = o.ends && o.ends(g.tokens, g.prompt_length);
    if (o.on_token) o.on_token(static_cast<size_t>(b), g, drawn_all(b));
  };
  // Scores the prompt token after position pos of sequence b, or draws the token after it,
  // from its logits.
  const auto score_or_draw = [&](int b, int64_t pos, const float* logits) {
    Generation& g = out[b];
    std::copy_n(logits, V, row.data());
    if (o.adjust_logits && pos + 1 >= shortest) o.adjust_logits(g.tokens[pos], row.data());
    if (pos + 1 < g.prompt_length) {
      record_logprobs(row.data(), V, g.tokens[pos + 1], top_k_logprobs, g);
      return;
    }
    sampling.top_p = top_p_after[pos];
    const int32_t token = sample_token(row.data(), V, sampling, rng);
    if (o.logprobs) record_logprobs(row.data(), V, token, top_k_logprobs, g);
    append(b, token);
  };

  std::vector<int32_t> feed;
  std::vector<int64_t> kept;      // rows of a pass whose logits are used
  std::vector<int64_t> kept_row;  // [B x n]: row b * n + t's index among them, or -1
  for (int64_t pos = 0; pos < prefill_end;) {
    const int n = static_cast<int>(std::min<int64_t>(chunk, prefill_end - pos));
    feed.clear();
    kept.clear();
    kept_row.assign(static_cast<size_t>(B) * n, -1);
    for (int b = 0; b < B; ++b) {
      const int64_t length = out[b].prompt_length;
      for (int t = 0; t < n; ++t) {
        const int64_t at = pos + t;
        feed.push_back(prompts[b][static_cast<size_t>(std::min(at, length - 1))]);
        const bool scored = o.logprobs && at + 1 < length, drawn = at + 1 == length && total[b] > length;
        if (!scored && !drawn) continue;
        kept_row[static_cast<size_t>(b) * n + t] = static_cast<int64_t>(kept.size());
        kept.push_back(static_cast<int64_t>(b) * n + t);
      }
    }
    const std::vector<float>& logits = dec.forward(feed, n, kept);
    // Position by position, sequences in order at each (the draws' order).
    for (int t = 0; t < n; ++t)
      for (int b = 0; b < B; ++b)
        if (const int64_t k = kept_row[static_cast<size_t>(b) * n + t]; k >= 0)
          score_or_draw(b, pos + t, logits.data() + k * V);
    pos += n;
  }
  // Decoding: every sequence feeds its last token at its own position. One that draws no
  // more feeds it at the furthest drawing sequence's (its logits and cache unused from then
  // on), so that a batch of one prompt length stays at one position when some sequences end
  // early. Draws that need nothing else of the logits are taken on the device (step_greedy,
  // step_sampled: B ids to the host instead of B rows of logits), the same tokens: the
  // sampled ones from the same uniforms, drawn here in the same order (on a GPU up to float
  // rounding at a boundary between two tokens).
  const bool on_device = !o.logprobs && !o.adjust_logits;
  const bool greedy_on_device = on_device && draws_greedily(o.sampling);
  const bool sampled_on_device = on_device && !greedy_on_device;
  std::vector<RowDraw> draws(static_cast<size_t>(B));
  std::vector<int32_t> cancel(static_cast<size_t>(B), 0);
  feed.resize(B);
  for (;;) {
    if (o.poll_cancel) {
      o.poll_cancel(cancel);
      for (int b = 0; b < B; ++b)
        if (cancel[b] && !drawn_all(b)) out[b].cancelled = true;
    }
    int64_t lead = -1;  // the furthest position a drawing sequence feeds
    for (int b = 0; b < B; ++b)
      if (!drawn_all(b)) lead = std::max(lead, static_cast<int64_t>(out[b].tokens.size()) - 1);
    if (lead < 0) break;
    for (int b = 0; b < B; ++b) {
      const int64_t at = drawn_all(b) ? lead : static_cast<int64_t>(out[b].tokens.size()) - 1;
      dec.set_position(b, static_cast<int>(at));
      feed[b] = out[b].tokens.back();
    }
    if (greedy_on_device || sampled_on_device) {
      for (int b = 0; b < B; ++b)  // one uniform a drawing sequence, in order, as sample_token takes them
        if (sampled_on_device && !drawn_all(b))
          draws[b] = RowDraw{uniform_draw(rng), top_p_after[out[b].tokens.size() - 1]};
      const std::vector<int32_t>& ids =
          greedy_on_device ? dec.step_greedy(feed) : dec.step_sampled(feed, draw_rule(o.sampling), draws);
      for (int b = 0; b < B; ++b)
        if (!drawn_all(b)) append(b, ids[b]);
      continue;
    }
    const std::vector<float>& logits = dec.step(feed);
    for (int b = 0; b < B; ++b)
      if (!drawn_all(b))
        score_or_draw(b, static_cast<int64_t>(out[b].tokens.size()) - 1, logits.data() + static_cast<int64_t>(b) * V);
  }
  return out;
}

std::vector<Continuation> continue_sequences(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                             const std::vector<std::vector<int32_t>>& contexts,
                                             const GenerationOptions& o, std::mt19937_64& rng, Comm* tp_comm) {
  TRIDENT_CHECK(!contexts.empty(), "continue_sequences: no context");
  TRIDENT_CHECK(o.max_new_tokens >= 1, "continue_sequences: max_new_tokens ", o.max_new_tokens);
  const int64_t ctx = static_cast<int64_t>(contexts[0].size());
  for (const auto& c : contexts)
    TRIDENT_CHECK(static_cast<int64_t>(c.size()) == ctx, "continue_sequences: contexts of different lengths");
  TRIDENT_CHECK(ctx >= 1 && room_after(cfg, ctx) >= 1, "continue_sequences: a context of ", ctx,
                " tokens for a sequence length of ", cfg.seq_length);
  DecodeOptions d;
  d.sampling = o.sampling;
  d.max_new_tokens = o.max_new_tokens;
  const int32_t eod = o.eod;
  if (o.stop_at_eod) d.ends = [eod](const std::vector<int32_t>& seq, int64_t) { return seq.back() == eod; };
  std::vector<Continuation> out;
  for (Generation& g : generate_tokens(cfg, backend, params, contexts, d, rng, tp_comm)) {
    Continuation c;
    c.finished = g.finished;
    c.tokens.assign(g.tokens.begin() + g.prompt_length, g.tokens.end() - (g.finished ? 1 : 0));
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace trident
