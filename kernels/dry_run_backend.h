// DryRunBackend: a backend that neither allocates nor computes. Its raw_alloc hands out
// addresses that are never touched, and every op does nothing (reductions answer 0), so
// the caching allocator above it sees exactly the requests a real backend's would, in the
// same order, however large the model: trident-plan runs a rank's trainer on it to measure
// that rank's memory without the memory. It poses as a device backend, so that no host code
// writes through its pointers (host fast paths are for CPU tensors only).
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.h"

namespace trident {

class DryRunBackend final : public Backend {
 public:
  DryRunBackend();
  ~DryRunBackend() override;

  std::string name() const override { return "dry-run"; }
  bool dry_run() const override { return true; }

  void* raw_alloc(size_t bytes) override;
  void raw_free(void*) override {}
  void copy_from_host(const Tensor&, const void*) override {}
  void copy_to_host(void*, const Tensor&) override {}
  void copy(const Tensor&, const Tensor&) override {}
  void fill(const Tensor&, float) override {}
  void synchronize() override {}
  void cast(const Tensor&, const Tensor&) override {}
  void scale(const Tensor&, float) override {}
  void add(const Tensor&, const Tensor&, const Tensor&) override {}
  void accumulate(const Tensor&, const Tensor&) override {}
  void embedding_forward(const Tensor&, const Tensor&, int64_t, const Tensor&, int, const Tensor&) override {}
  void embedding_backward(const Tensor&, const Tensor&, int64_t, int, const Tensor&, const Tensor&) override {}
  void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&) override {}
  void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&) override {}
  void matmul(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, bool, bool) override {}
  void bias_backward(const Tensor&, const Tensor&) override {}
  void gelu_forward(const Tensor&, const Tensor&, Gelu) override {}
  void gelu_backward(const Tensor&, const Tensor&, const Tensor&, Gelu) override {}
  void attention_forward(const Tensor&, const Tensor&, const Tensor&, const AttentionShape&,
                         const DropoutKey&) override {}
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const AttentionShape&, const DropoutKey&) override {}
  void attention_decode(const Tensor&, const Tensor&, const Tensor&, const DecodePositions&, const Tensor&) override {}
  void dropout_forward(const Tensor&, const Tensor&, int, const DropoutKey&) override {}
  void dropout_backward(const Tensor&, const Tensor&, int, const DropoutKey&) override {}
  void xent_stats(const Tensor&, const Tensor&, int64_t, int64_t, const Tensor&, const Tensor&) override {}
  void xent_sumexp(const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  void xent_loss_grad(const Tensor&, const Tensor&, int64_t, int64_t, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&, const Tensor&, float) override {}
  void logits_argmax(const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  void sample_logits(const Tensor&, int64_t, double, int, const std::vector<RowDraw>&, const Tensor&) override {}
  void adamw(const AdamWArgs&) override {}
  double sum_squares(const Tensor&) override { return 0; }
  double sum(const Tensor&) override { return 0; }
  bool has_inf_or_nan(const Tensor&) override { return false; }
  int64_t count_zeros_multi(const std::vector<Tensor>&) override { return 0; }
  MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>&) override { return {}; }

 private:
  uintptr_t next_;  // the next address handed out
};

}  // namespace trident
