// The tiny GPT-2 the generation tests decode with: its parameters in a one-process
// ParamStore (CPU) and, for the reference of tests/unit/model/gpt2_reference.h, the same
// stored (rounded) values in double on the host.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "../model/gpt2_reference.h"
#include "../model/model_test_util.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/param_spec.h"
#include "model/param_store.h"

namespace trident::test {

struct TinyModel {
  ModelConfig cfg = tiny_config();
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<ParamStore> params;
  ref::Params host;
  explicit TinyModel(DType dt, Gelu gelu = Gelu::Tanh) {
    cfg.init_method_std = 0.3f;  // attention far from uniform, GELU far from linear
    cfg.dtype = dt;
    cfg.gelu = gelu;
    params = std::make_unique<ParamStore>(*be, gpt2_param_specs(cfg, 1), 1, 0, dt, dt,
                                          [](const ParamSpec&) { return true; });
    params->init(1234);
    for (const LocalParam& p : params->list()) {
      std::vector<float> h = to_host(*be, params->param(p));
      host[p.spec.name] = std::vector<double>(h.begin(), h.end());
    }
  }
  // The reference's logits, [B, T, V], of B sequences of T tokens each (row-major).
  std::vector<double> reference_logits(const std::vector<int>& tokens, int B, int T) const {
    ref::RefConfig rc{cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, T, B,
                      static_cast<int>(cfg.vocab_size), 0.0f, 0.0f, 0, 0};
    rc.gelu = cfg.gelu;
    return ref::gpt2_logits(rc, host, tokens);
  }
  // The reference's log-softmax of the logits after each token of `seq`: [T][V].
  std::vector<std::vector<double>> reference_log_softmax(const std::vector<int32_t>& seq) const {
    const int T = static_cast<int>(seq.size()), V = static_cast<int>(cfg.vocab_size);
    const std::vector<double> logits = reference_logits(std::vector<int>(seq.begin(), seq.end()), 1, T);
    std::vector<std::vector<double>> out(T, std::vector<double>(V));
    for (int t = 0; t < T; ++t) {
      const double* row = logits.data() + static_cast<size_t>(t) * V;
      const double top = *std::max_element(row, row + V);
      double sum = 0;
      for (int v = 0; v < V; ++v) sum += std::exp(row[v] - top);
      for (int v = 0; v < V; ++v) out[t][v] = row[v] - top - std::log(sum);
    }
    return out;
  }
};

}  // namespace trident::test
