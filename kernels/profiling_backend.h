// ProfilingBackend: wraps another backend, forwards every op and records the wall time
// spent in each op family (synchronising after every op, so device time is attributed
// correctly). Used by trident-bench to show where step time goes, e.g. the GEMM share.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace trident {

struct OpTime {
  double seconds = 0;
  int64_t calls = 0;
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);
  ~ProfilingBackend() override;

  const std::map<std::string, OpTime>& times() const { return times_; }
  void reset_times() { times_.clear(); }
  // Off: every op is forwarded as it is, neither synchronised nor timed (a benchmark's
  // timed runs through the same backend). On by default.
  void set_timing(bool on) { timing_ = on; }
  std::string name() const override { return inner_->name() + "+profiling"; }
  std::string device_name() const override { return inner_->device_name(); }
  std::optional<double> energy_joules(std::string* why_none) override { return inner_->energy_joules(why_none); }
  std::optional<uint64_t> device_memory_used() override { return inner_->device_memory_used(); }
  bool saves_attention_dropout_mask() const override { return inner_->saves_attention_dropout_mask(); }

  void* raw_alloc(size_t bytes) override { return inner_->raw_alloc(bytes); }
  void raw_free(void* p) override { inner_->raw_free(p); }
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& t, float value) override;
  void synchronize() override { inner_->synchronize(); }
  bool pin_host_memory(void* p, size_t bytes) override { return inner_->pin_host_memory(p, bytes); }
  void unpin_host_memory(void* p) noexcept override { inner_->unpin_host_memory(p); }
  // --profile's calls are forwarded and noted in order: "start", "stop", "push NAME", "pop".
  bool profiler_start() override {
    profiler_events_.emplace_back("start");
    return inner_->profiler_start();
  }
  void profiler_stop() override {
    profiler_events_.emplace_back("stop");
    inner_->profiler_stop();
  }
  void range_push(const char* name) override {
    profiler_events_.push_back(std::string("push ") + name);
    inner_->range_push(name);
  }
  void range_pop() override {
    profiler_events_.emplace_back("pop");
    inner_->range_pop();
  }
  const std::vector<std::string>& profiler_events() const { return profiler_events_; }
  void cast(const Tensor& src, const Tensor& dst) override;
  void scale(const Tensor& t, float alpha) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void accumulate(const Tensor& dst, const Tensor& src) override;
  void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start, const Tensor& wpe, int T,
                         const Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T, const Tensor& dwte,
                          const Tensor& dwpe) override;
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& out,
                         const Tensor& mean, const Tensor& rstd) override;
  void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) override;
  void matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
              bool accumulate) override;
  void bias_backward(const Tensor& dout, const Tensor& dbias) override;
  void gelu_forward(const Tensor& x, const Tensor& out, Gelu form) override;
  void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form) override;
  void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s,
                         const DropoutKey& drop) override;
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          const Tensor& dqkv, const AttentionShape& s, const DropoutKey& drop) override;
  void attention_decode(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, const DecodePositions& at,
                        const Tensor& out) override;
  void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop) override;
  void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop) override;
  void xent_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                  const Tensor& row_max, const Tensor& target_logit) override;
  void xent_sumexp(const Tensor& logits, int64_t vocab_valid, const Tensor& row_max, const Tensor& sumexp) override;
  void logits_argmax(const Tensor& logits, int64_t vocab_valid, const Tensor& values, const Tensor& ids) override;
  void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                     const std::vector<RowDraw>& draws, const Tensor& ids) override;
  void xent_loss_grad(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                      const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, const Tensor& losses,
                      const Tensor& correct, float grad_scale) override;
  void adamw(const AdamWArgs& a) override;
  double sum_squares(const Tensor& t) override;
  double sum(const Tensor& t) override;
  bool has_inf_or_nan(const Tensor& t) override;
  int64_t count_zeros_multi(const std::vector<Tensor>& list) override;
  MagnitudeStats magnitude_stats_multi(const std::vector<Tensor>& list) override;
  void residual_layernorm_forward(const Tensor& x, const Tensor& branch, const Tensor& resid, const Tensor& gamma,
                                  const Tensor& beta, const Tensor& out, const Tensor& mean,
                                  const Tensor& rstd) override;
  void dropout_residual_layernorm_forward(const Tensor& x, const Tensor& branch, int T, const DropoutKey& drop,
                                          const Tensor& resid, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& out, const Tensor& mean, const Tensor& rstd) override;
  void dropout_bias_backward(const Tensor& dout, int T, const DropoutKey& drop, const Tensor& dx,
                             const Tensor& dbias) override;
  void xent_stats_sumexp(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid,
                         const Tensor& row_max, const Tensor& target_logit, const Tensor& sumexp) override;
  void matmul_bias_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                        bool trans_a, bool trans_b, Gelu form) override;
  void matmul_gelu_backward(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre, bool trans_a,
                            bool trans_b, Gelu form) override;
  void adamw_multi(const std::vector<AdamWArgs>& list) override;
  double sum_squares_multi(const std::vector<Tensor>& list) override;

 private:
  template <typename F>
  auto timed(const char* op, F&& f);
  std::unique_ptr<Backend> inner_;
  std::map<std::string, OpTime> times_;
  bool timing_ = true;
  std::vector<std::string> profiler_events_;
};

}  // namespace trident
