#include "infer/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "infer/decoder.h"
#include "infer/generate.h"
#include "infer/sampler.h"

namespace trident {
namespace {

// Megatron's BeamHypotheses with early_stopping off: the best `size` finished sequences.
class FinishedHypotheses {
 public:
  FinishedHypotheses(int size, double length_penalty) : size_(size), length_penalty_(length_penalty) {}

  void add(std::vector<int32_t> tokens, double sum_logprobs, int64_t length) {
    const double score = sum_logprobs / std::pow(static_cast<double>(length), length_penalty_);
    if (static_cast<int>(best_.size()) == size_ && score <= best_.back().score) return;
    const auto at = std::upper_bound(best_.begin(), best_.end(), score,
                                     [](double s, const BeamHypothesis& h) { return s > h.score; });
    best_.insert(at, BeamHypothesis{std::move(tokens), score});
    if (static_cast<int>(best_.size()) > size_) best_.pop_back();
  }

  // Whether the search is over: `size` hypotheses, the worst of them at least the best
  // candidate's summed log-probability over the current length.
  bool done(double best_sum_logprobs, int64_t length) const {
    return static_cast<int>(best_.size()) == size_ &&
           best_.back().score >= best_sum_logprobs / std::pow(static_cast<double>(length), length_penalty_);
  }

  std::vector<BeamHypothesis> take() { return std::move(best_); }

 private:
  int size_;
  double length_penalty_;
  std::vector<BeamHypothesis> best_;  // best first
};

struct Candidate {
  double score;  // the beam's summed log-probability with this token
  int beam;
  int32_t token;
};

}  // namespace

std::vector<BeamHypothesis> beam_search(const ModelConfig& cfg, Backend& backend, const ParamStore& params,
                                        const std::vector<int32_t>& prompt, const BeamSearchOptions& o,
                                        Comm* tp_comm) {
  const int W = o.beam_width;
  const int64_t P = static_cast<int64_t>(prompt.size());
  TRIDENT_CHECK(W >= 1 && P >= 1 && o.max_new_tokens >= 1 && o.max_new_tokens <= room_after(cfg, P),
                "beam_search: ", W, " beams, a prompt of ", P, " tokens and ", o.max_new_tokens,
                " new ones for a sequence length of ", cfg.seq_length);
  const int64_t V = cfg.vocab_size;
  TRIDENT_CHECK(o.stop_token >= 0 && o.stop_token < V, "beam_search: stop token ", o.stop_token);
  // 2 x W candidates hold at most W stop tokens (one per beam): W beams always go on.
  TRIDENT_CHECK(2 * static_cast<int64_t>(W) <= V, "beam_search: ", W, " beams over ", V, " tokens");
  // The prompt goes through in chunks of up to `chunk` positions (W x chunk rows a pass),
  // only the last position's logits computed.
  Gpt2Decoder dec(cfg, backend, params, W, static_cast<int>(P + o.max_new_tokens - 1), tp_comm,
                  prefill_chunk(W, P, false, o.prefill_chunk));
  std::vector<int32_t> prompts;
  for (int w = 0; w < W; ++w) prompts.insert(prompts.end(), prompt.begin(), prompt.end());
  const std::vector<float>* logits = &dec.prefill(prompts, P);

  std::vector<std::vector<int32_t>> beams(W, prompt);
  std::vector<double> sums(W, 0.0);
  FinishedHypotheses finished(W, o.length_penalty);
  std::vector<float> row(static_cast<size_t>(V));
  std::vector<Candidate> candidates;
  for (int64_t generated = 1;; ++generated) {
    // Every beam's continuations; at the first step the beams are the same: the first's. The
    // best 2W of them overall are among each beam's best 2W, so only those are kept (W x V
    // candidates would be gigabytes for a wide beam).
    candidates.clear();
    const int searched = generated == 1 ? 1 : W;
    const size_t best = static_cast<size_t>(2 * W);
    for (int b = 0; b < searched; ++b) {
      std::copy_n(logits->data() + b * V, V, row.data());
      if (o.adjust_logits) o.adjust_logits(beams[b].back(), row.data());
      const double lse = log_sum_exp(row.data(), V);
      for (int32_t v : most_likely(row.data(), V, static_cast<int>(best)))
        candidates.push_back({sums[b] + (static_cast<double>(row[v]) - lse), b, v});
    }
    // Best first; ties by beam, then token (a deterministic order on every rank).
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      if (a.score != b.score) return a.score > b.score;
      return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
    });
    std::vector<Candidate> next;
    for (size_t rank = 0; rank < best && static_cast<int>(next.size()) < W; ++rank) {
      const Candidate& c = candidates[rank];
      if (c.token != o.stop_token) {
        next.push_back(c);
      } else if (static_cast<int>(rank) < W) {  // a stop among the worse half is passed over
        std::vector<int32_t> tokens = beams[c.beam];
        tokens.push_back(c.token);
        finished.add(std::move(tokens), c.score, generated);
      }
    }
    // Megatron's test: the best candidate, a stop or not, against the worst hypothesis kept.
    if (finished.done(candidates.front().score, generated)) break;
    std::vector<std::vector<int32_t>> grown;
    std::vector<int> rows;
    std::vector<int32_t> feed;
    for (const Candidate& c : next) {
      grown.push_back(beams[c.beam]);
      grown.back().push_back(c.token);
      sums[grown.size() - 1] = c.score;
      rows.push_back(c.beam);
      feed.push_back(c.token);
    }
    beams = std::move(grown);
    if (generated == o.max_new_tokens) {  // the length limit: the open beams are hypotheses too
      for (int b = 0; b < W; ++b) finished.add(beams[b], sums[b], generated);
      break;
    }
    dec.reorder(rows);
    logits = &dec.step(feed);
  }
  return finished.take();
}

}  // namespace trident
