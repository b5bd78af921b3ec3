#include "infer/generate.h"

#include <algorithm>

#include "core/error.h"
#include "infer/decoder.h"

namespace trident {

int64_t room_after(const ModelConfig& cfg, int64_t context_length) {
  return std::max<int64_t>(0, cfg.seq_length - context_length);
}

std::vector<Continuation> continue_sequences(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                             const std::vector<std::vector<int32_t>>& contexts,
                                             const GenerationOptions& o, std::mt19937_64& rng, Comm* tp_comm) {
  TRIDENT_CHECK(!contexts.empty(), "continue_sequences: no context");
  TRIDENT_CHECK(o.max_new_tokens >= 1, "continue_sequences: max_new_tokens ", o.max_new_tokens);
  const int B = static_cast<int>(contexts.size());
  const int64_t ctx = static_cast<int64_t>(contexts[0].size());
  for (const auto& c : contexts)
    TRIDENT_CHECK(static_cast<int64_t>(c.size()) == ctx, "continue_sequences: contexts of different lengths");
  const int64_t room = room_after(cfg, ctx);
  TRIDENT_CHECK(ctx >= 1 && room >= 1, "continue_sequences: a context of ", ctx, " tokens for a sequence length of ",
                cfg.seq_length);
  const int64_t new_tokens = std::min(o.max_new_tokens, room);
  Gpt2Decoder dec(cfg, backend, params, B, static_cast<int>(ctx + new_tokens - 1), tp_comm);

  std::vector<int32_t> feed(B);
  const std::vector<float>* logits = nullptr;
  for (int64_t t = 0; t < ctx; ++t) {
    for (int b = 0; b < B; ++b) feed[b] = contexts[b][t];
    logits = &dec.step(feed);
  }
  std::vector<Continuation> out(B);
  for (int64_t n = 0; n < new_tokens; ++n) {
    for (int b = 0; b < B; ++b) {
      if (out[b].finished) {
        feed[b] = o.eod;  // a finished sequence keeps step() fed; its tokens are dropped
        continue;
      }
      feed[b] = sample_token(logits->data() + static_cast<int64_t>(b) * cfg.vocab_size, cfg.vocab_size, o.sampling,
                             rng);
      if (feed[b] == o.eod && o.stop_at_eod)
        out[b].finished = true;
      else
        out[b].tokens.push_back(feed[b]);
    }
    const bool all_finished = std::all_of(out.begin(), out.end(), [](const Continuation& c) { return c.finished; });
    if (all_finished || n + 1 == new_tokens) break;
    logits = &dec.step(feed);
  }
  return out;
}

}  // namespace trident
