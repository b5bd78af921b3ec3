// GPT-2 with explicit forward and backward (no autograd), written against the Backend
// and Comm seams. One instance is one pipeline stage (or one model chunk of an interleaved
// stage) of one tensor-parallel rank; a single process is the stage that is both first and
// last with tp = 1.
//
// Tensor parallelism (Megatron): QKV and MLP-up are column-parallel, attention output
// and MLP-down row-parallel, the word embedding and LM head vocab-parallel. The only
// cross-rank calls are on the TP comm, at the places Megatron's conjugate maps put them:
// all-reduces, or with sequence parallelism all-gathers before the column-parallel GEMMs
// and reduce-scatters after the row-parallel ones. Row-parallel biases and the position
// embedding are added by TP rank 0 alone before the reduction, so the sum adds them once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "model/config.h"
#include "model/param_store.h"
#include "parallel/comm.h"

namespace trident {

// Full activation recomputation (Megatron's --recompute-granularity full): the layers of a
// recomputed group keep only their output (the next layer's input); backward re-runs the
// group's forward from the group's input before going back through it. Dropout masks are
// functions of (seed, sample, layer, element), so the recomputed activations are the
// stored ones bit for bit.
struct RecomputePlan {
  enum class Method { kNone, kUniform, kBlock };
  // kUniform: every layer of the stage, in groups of num_layers consecutive layers.
  // kBlock: the stage's first num_layers layers, one group each; the others keep everything.
  Method method = Method::kNone;
  int num_layers = 1;
};

// Where this instance sits in the parallel layout.
struct StageLayout {
  int tp = 1, tp_rank = 0;
  Comm* tp_comm = nullptr;  // required when tp > 1
  int layer_begin = 0, layer_end = -1;  // transformer layers [begin, end) on this stage; -1: all
  bool first_stage = true;  // holds the embeddings
  bool last_stage = true;   // holds the final LayerNorm and the (tied) LM head
  int zero_shards = 1;      // parameter groups are padded to split evenly into this many shards
  bool fp32_grads = false;  // gradients in fp32 whatever the parameter dtype (bf16 training)
  // ZeRO-2: layer gradients need only exist until the optimizer has reduced them (see
  // ParamStore's gradient slots); requires the layer-gradients-ready hook to reduce them.
  bool layer_grads_in_slots = false;
  RecomputePlan recompute;
  // Megatron's sequence parallelism (tp > 1): LayerNorms, dropouts and residual adds run on
  // this TP rank's 1/tp of the micro-batch's B*T rows (contiguous, in order), which is all
  // the residual stream and the stage's input and output hold; an all-gather before each
  // column-parallel GEMM and a reduce-scatter after each row-parallel one replace the
  // all-reduces. LayerNorm and row-parallel bias gradients are then partial sums over TP
  // ranks (the optimizer sums them: sequence_parallel_partial).
  bool sequence_parallel = false;
  // Megatron's --reset-position-ids (the first stage embeds MicroBatch::positions) and
  // --reset-attention-mask (every stage's attention keeps to MicroBatch::document_starts).
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  // The stage only evaluates (--skip-train, trident-eval): nothing is kept for a backward
  // that never comes (the attention dropout masks a backend would save).
  bool forward_only = false;
};

// Whether `spec`'s gradient is a partial sum over TP ranks under sequence parallelism: the
// replicated parameters applied to this rank's rows only (LayerNorms, row-parallel biases).
// The position embedding is applied before the reduce-scatter, to every row.
bool sequence_parallel_partial(const ParamSpec& spec);

// The parameters of every model chunk a stage runs (one StageLayout each: the interleaved
// pipeline gives a stage several), in one store, so the optimizer, the gradient reductions
// and checkpoints see one flat buffer. tp, zero_shards, fp32_grads and layer_grads_in_slots
// come from the first layout.
std::shared_ptr<ParamStore> make_stage_params(const ModelConfig& cfg, Backend& backend,
                                              const std::vector<StageLayout>& chunks);

// One micro-batch: host token ids [B, T] and targets [B, T] (targets may be null on
// stages that are not last; tokens may be null on stages that are not first).
struct MicroBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  uint64_t sample_base = 0;  // global sample number of row 0 (keys dropout masks)
  // [B, T] host (data/documents.h): each token's position in its document, required on the
  // first stage with StageLayout::reset_position_ids; its document's first position, required
  // on every stage with StageLayout::reset_attention_mask.
  const int32_t* positions = nullptr;
  const int32_t* document_starts = nullptr;
};

// Per-micro-batch results on the last stage.
struct LossStats {
  double loss_sum = 0;   // sum of token losses
  double correct = 0;    // top-1 hits
  double tokens = 0;     // counted (non-ignored) targets
};

class Gpt2Model {
 public:
  // `activation_slots`: micro-batches whose activations can be alive at once (pipeline).
  // `params`: a store that holds this layout's parameters (make_stage_params), shared by the
  // chunks of an interleaved stage; null: the model makes its own. `scratch_from`: a chunk
  // of the same stage (same micro batch, TP and sequence parallelism) whose scratch buffers
  // this one shares, as only one chunk runs at a time.
  Gpt2Model(const ModelConfig& cfg, Backend& backend, const StageLayout& layout, int micro_batch,
            int activation_slots = 1, std::shared_ptr<ParamStore> params = nullptr,
            const Gpt2Model* scratch_from = nullptr);
  ~Gpt2Model();

  ParamStore& params() { return *params_; }
  // Seed of the dropout masks (the run's --seed); masks also depend on the sample number.
  void set_dropout_seed(uint64_t seed) { dropout_seed_ = seed; }
  uint64_t dropout_seed() const { return dropout_seed_; }
  const ModelConfig& config() const { return cfg_; }
  const StageLayout& layout() const { return layout_; }
  int micro_batch() const { return B_; }

  // Forward of micro-batch `mb` into activation slot `slot`. On the last stage this also
  // computes the loss and writes the logits' gradient scaled by `grad_scale` (llm.c
  // style), so backward can follow. `training` enables dropout.
  void forward(int slot, const MicroBatch& mb, bool training, float grad_scale);
  // Backward of the micro-batch in `slot`; parameter gradients accumulate (+=).
  void backward(int slot);
  LossStats loss_stats() const;  // of the last forward on the last stage
  // Called during backward as soon as a layer's parameter gradients for the micro-batch
  // are complete (their data-parallel reduction starts while backward goes on).
  void set_layer_gradients_ready(std::function<void(int layer)> f) { layer_grads_ready_ = std::move(f); }
  // Called during forward before parameters are first read (--overlap-param-gather waits
  // for their gather there): a layer's index, kParamsBeforeLayers before the embeddings
  // (first stage), kParamsAfterLayers before the final LayerNorm and LM head (last stage).
  // A layer's ln_1 is first read by the fused residual LayerNorm at the end of the layer
  // before it, so layer l + 1 is needed there, after layer l's GEMMs.
  static constexpr int kParamsBeforeLayers = -1, kParamsAfterLayers = -2;
  void set_params_needed(std::function<void(int layer)> f) { params_needed_ = std::move(f); }

  // Pipeline hooks: the stage's input ([B*T, C], or this TP rank's B*T / tp rows with
  // sequence parallelism; written by the previous stage's output before forward) and output
  // activations, and the gradients that cross stage borders (the same rows).
  Tensor stage_input(int slot) const;
  Tensor stage_output(int slot) const;
  Tensor input_grad() const;   // d(stage input), valid after backward on a non-first stage
  Tensor output_grad() const;  // d(stage output), to be filled before backward on a non-last stage

 private:
  struct LayerActs;
  struct SlotActs;
  struct Scratch;
  // Where a LayerNorm writes (its parameters, output and saved statistics); empty `out`
  // means there is no such LayerNorm on this stage.
  struct NormOutput {
    Tensor gamma, beta, out, mean, rstd;
  };
  // Rows of this rank's shard that one row-wise dropout call can take: whole samples, or
  // rows within one sample (sample_offset and index_base say where they start in the
  // micro-batch's numbering). Fixed by the layout: cut once, in the constructor.
  struct RowPiece {
    int64_t begin, end;  // local rows
    int rows_per_sample;
    uint64_t sample_offset = 0, index_base = 0;
    DropoutKey key(const DropoutKey& k) const {  // k (of the micro-batch) for these rows
      DropoutKey r = k;
      r.sample_base += sample_offset;
      r.index_base = index_base;
      return r;
    }
  };
  std::vector<RowPiece> cut_row_pieces() const;
  // Sequence parallelism's maps (without it: `rows` itself, an all-reduce of `full`).
  Tensor gathered(const Tensor& rows) const;  // every rank's rows, in the scratch ln_full
  void sum_to_rows(const Tensor& full, const Tensor& rows) const;  // sum over TP onto this rank's rows
  NormOutput ln1_output(int layer, LayerActs& a) const;
  NormOutput lnf_output(SlotActs& s) const;
  void tp_allreduce(const Tensor& t, ReduceOp op) const;
  DropoutKey dropout_key(int layer, DropoutSite site, float p, bool training) const;
  // `next`: the LayerNorm fed by this layer's output, fused with its residual add.
  // `write_output` false: stop after the MLP's GELU, before its output projection and the
  // final residual add (a recomputation that only feeds the backward, which never reads the
  // layer's output).
  void layer_forward(int layer, const Tensor& x_in, LayerActs& a, bool training, const NormOutput& next,
                     bool write_output = true);
  // Re-runs the forward of local layers [begin, end) of `s` into the recompute workspace.
  void recompute_group(SlotActs& s, int begin, int end);
  Tensor layer_input(const SlotActs& s, int local_layer) const;
  void layer_backward(int layer, const Tensor& x_in, LayerActs& a);
  void head_forward(SlotActs& s, float grad_scale);
  void dropout_residual(const Tensor& x, const DropoutKey& key, const Tensor& out, const NormOutput& next);
  const Tensor& dropout_bias_backward(const DropoutKey& key, const Tensor& dbias);
  void head_backward(SlotActs& s, const Tensor& x);

  ModelConfig cfg_;
  Backend& be_;
  StageLayout layout_;
  int B_, T_, C_, Cl_, Fl_, Hl_;
  int64_t rows_, row0_;  // this rank's rows [row0_, row0_ + rows_) of the B*T (all without sequence parallelism)
  std::vector<RowPiece> row_pieces_;  // cut_row_pieces()
  int64_t Vl_, vocab_start_, vocab_valid_;
  std::shared_ptr<ParamStore> params_;
  std::vector<std::unique_ptr<SlotActs>> slots_;
  // Recomputation: the activations of one group's layers (shared by all slots), and each
  // local layer's group [begin, end) (begin -1: the layer keeps its activations).
  std::vector<Buffer> workspace_storage_;
  std::vector<LayerActs> workspace_;
  std::vector<int> group_begin_, group_end_;
  std::shared_ptr<Scratch> scratch_;
  // d(stage output) (received, or from the head) and d(stage input) (sent): each chunk's
  // own, as an exchange may bring one chunk's gradient while another chunk runs.
  Buffer d_resid_, d_input_;  // [R, C]
  // Dropout state of the micro-batch being run (forward and its backward use the same).
  uint64_t dropout_seed_ = 1234;
  uint64_t sample_base_ = 0;
  bool training_ = false;
  Tensor document_starts_;  // the slot's (reset_attention_mask), else empty: AttentionShape's
  std::vector<uint64_t> slot_sample_base_;
  std::vector<char> slot_training_;
  LossStats last_stats_;
  std::function<void(int)> layer_grads_ready_;
  std::function<void(int)> params_needed_;
};

}  // namespace trident
