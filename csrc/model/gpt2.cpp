#include "model/gpt2.h"

#include <string>

#include "core/attn_dropout_mask.h"
#include "core/error.h"

namespace trident {

// Activations of one transformer layer for one micro-batch, kept for its backward. Views:
// the memory belongs to the slot, or to the recompute workspace (all but `out`) for the
// layers that are recomputed. R: this rank's rows (BT / tp with sequence parallelism, else BT).
struct Gpt2Model::LayerActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // [R, C], [R], [R]
  Tensor qkv;                      // [BT, 3Cl]
  Tensor att, lse;                 // [BT, Cl], [B, Hl, T]
  Tensor dropout_mask;             // I32 [attn_mask_words(B, Hl, T)] where the backend saves it, else empty
  Tensor resid_mid;                // [R, C]  x + dropout(attn proj)
  Tensor ln2, ln2_mean, ln2_rstd;  // [R, C], [R], [R]
  Tensor fc, gelu;                 // [BT, Fl] pre- and post-activation
  Tensor out;                      // [R, C]  resid_mid + dropout(mlp proj): the next layer's input
};

// Everything one in-flight micro-batch needs.
struct Gpt2Model::SlotActs {
  Buffer tokens, targets;  // I32 [BT]
  Buffer positions, document_starts;  // I32 [BT] where the layout resets them (MicroBatch)
  Buffer input;            // [R, C] stage input (embedding output on the first stage)
  std::vector<LayerActs> layers;
  std::vector<Buffer> storage;  // the memory of `layers`' own tensors
  Buffer lnf, lnf_mean, lnf_rstd;  // last stage: [R, C], [R], [R]
};

// Buffers shared by all slots, and by the model chunks of an interleaved stage: only one
// forward or backward runs at a time, and on the last stage each micro-batch's backward
// follows its forward before the next forward (1F1B and interleaved), so the logits buffer
// can be shared too. The gradients that cross stage borders are the model's own.
struct Gpt2Model::Scratch {
  Buffer proj;  // [BT, C] output of a row-parallel projection (partial sums over TP ranks)
  Buffer logits;  // [BT, Vl], overwritten by its gradient
  Buffer row_max, sumexp, target_logit, losses, correct;  // f32 [BT]
  Buffer d_tmp;           // [R, C]
  Buffer d_ln;            // [BT, C] gradient of a LayerNorm's output (partial sums over TP ranks)
  Buffer d_qkv;           // [BT, 3Cl]
  Buffer d_att;           // [BT, Cl]
  Buffer d_fc;            // [BT, Fl]
  // proj and d_ln summed onto this rank's rows, and d_tmp gathered from every rank's: own
  // buffers with sequence parallelism ([R, C], [R, C], [BT, C]), else proj, d_ln, d_tmp.
  Buffer sp_proj, sp_d_ln, sp_d_tmp;
  Tensor proj_rows, d_ln_rows, d_tmp_full;
  // Sequence parallelism: a LayerNorm output gathered from every rank's rows for the GEMM
  // that reads it, forward and again in backward (Megatron's trade: activations keep only
  // this rank's rows).
  Buffer ln_full;  // [BT, C]
  // reset_position_ids: the position embeddings of the micro-batch's positions, added to the
  // word embeddings (a lookup of its own, so the backward scatters by position).
  Buffer position_rows;  // [BT, C]
};

std::shared_ptr<ParamStore> make_stage_params(const ModelConfig& cfg, Backend& backend,
                                              const std::vector<StageLayout>& chunks) {
  TRIDENT_CHECK(!chunks.empty(), "make_stage_params: no layout");
  const StageLayout& L = chunks.front();
  auto holds = [&](const ParamSpec& s) {
    for (const StageLayout& c : chunks)
      if (stage_holds(s, c.layer_begin, c.layer_end < 0 ? cfg.num_layers : c.layer_end, c.first_stage, c.last_stage))
        return true;
    return false;
  };
  return std::make_shared<ParamStore>(backend, gpt2_param_specs(cfg, L.tp), L.tp, L.tp_rank, cfg.dtype,
                                      L.fp32_grads ? DType::F32 : cfg.dtype, holds,
                                      64 * static_cast<int64_t>(L.zero_shards), L.layer_grads_in_slots ? 2 : 0);
}

Gpt2Model::Gpt2Model(const ModelConfig& cfg, Backend& backend, const StageLayout& layout,
                     int micro_batch, int activation_slots, std::shared_ptr<ParamStore> params,
                     const Gpt2Model* scratch_from)
    : cfg_(cfg), be_(backend), layout_(layout), B_(micro_batch), T_(cfg.seq_length), params_(std::move(params)) {
  const int tp = layout_.tp;
  cfg_.validate(tp);
  if (layout_.layer_end < 0) layout_.layer_end = cfg_.num_layers;
  TRIDENT_CHECK(tp == 1 || layout_.tp_comm != nullptr, "tp > 1 needs a TP comm");
  C_ = cfg_.hidden_size;
  Cl_ = C_ / tp;
  Fl_ = cfg_.ffn_hidden_size() / tp;
  Hl_ = cfg_.num_attention_heads / tp;
  Vl_ = cfg_.padded_vocab_size(tp) / tp;
  vocab_start_ = Vl_ * layout_.tp_rank;
  vocab_valid_ = std::max<int64_t>(0, std::min<int64_t>(Vl_, cfg_.vocab_size - vocab_start_));

  const StageLayout& L = layout_;
  if (!params_) params_ = make_stage_params(cfg_, be_, {L});

  const int64_t BT = static_cast<int64_t>(B_) * T_;
  const bool sp = L.sequence_parallel && tp > 1;
  // Options check these first with the flags' names.
  TRIDENT_CHECK(!sp || (BT % tp == 0 && C_ % 4 == 0), "sequence parallelism: B*T ", BT, " or hidden ", C_, " vs tp ",
                tp);
  layout_.sequence_parallel = sp;
  rows_ = sp ? BT / tp : BT;
  row0_ = sp ? rows_ * L.tp_rank : 0;
  row_pieces_ = cut_row_pieces();
  const int64_t R = rows_;
  const DType dt = cfg_.dtype;
  auto act = [&](Shape s) { return be_.empty(s, dt); };
  auto f32 = [&](Shape s) { return be_.empty(s, DType::F32); };
  auto own = [&](std::vector<Buffer>& store, Shape s, DType t) {
    store.push_back(be_.empty(s, t));
    return store.back().t();
  };
  // The attention dropout mask kept from each layer's forward for its backward, where the
  // backend would rather keep it than draw it again.
  const bool save_attention_mask =
      !L.forward_only && cfg_.attention_dropout > 0.0f && be_.saves_attention_dropout_mask();
  // Every activation of a layer but its output.
  auto inner_acts = [&](std::vector<Buffer>& store) {
    LayerActs a;
    a.ln1 = own(store, {R, C_}, dt);
    a.ln1_mean = own(store, {R}, DType::F32);
    a.ln1_rstd = own(store, {R}, DType::F32);
    a.qkv = own(store, {BT, 3 * Cl_}, dt);
    a.att = own(store, {BT, Cl_}, dt);
    a.lse = own(store, {static_cast<int64_t>(B_) * Hl_ * T_}, DType::F32);
    if (save_attention_mask) a.dropout_mask = own(store, {attn_mask_words(B_, Hl_, T_)}, DType::I32);
    a.resid_mid = own(store, {R, C_}, dt);
    a.ln2 = own(store, {R, C_}, dt);
    a.ln2_mean = own(store, {R}, DType::F32);
    a.ln2_rstd = own(store, {R}, DType::F32);
    a.fc = own(store, {BT, Fl_}, dt);
    a.gelu = own(store, {BT, Fl_}, dt);
    return a;
  };
  const int n_layers = L.layer_end - L.layer_begin;
  group_begin_.assign(n_layers, -1);
  group_end_.assign(n_layers, -1);
  int group_size = 0;
  for (int i = 0; i < n_layers; ++i) {
    const int k = std::max(1, L.recompute.num_layers);
    if (L.recompute.method == RecomputePlan::Method::kUniform) {
      group_begin_[i] = i / k * k;
      group_end_[i] = std::min(n_layers, group_begin_[i] + k);
    } else if (L.recompute.method == RecomputePlan::Method::kBlock && i < k) {
      group_begin_[i] = i;
      group_end_[i] = i + 1;
    }
    if (group_begin_[i] >= 0) group_size = std::max(group_size, group_end_[i] - group_begin_[i]);
  }
  for (int k = 0; k < group_size; ++k) workspace_.push_back(inner_acts(workspace_storage_));
  for (int i = 0; i < activation_slots; ++i) {
    auto s = std::make_unique<SlotActs>();
    s->tokens = be_.empty({BT}, DType::I32);
    s->targets = be_.empty({BT}, DType::I32);
    if (L.first_stage && L.reset_position_ids) s->positions = be_.empty({BT}, DType::I32);
    if (L.reset_attention_mask) s->document_starts = be_.empty({BT}, DType::I32);
    s->input = act({R, C_});
    for (int l = 0; l < n_layers; ++l) {
      LayerActs a = group_begin_[l] >= 0 ? workspace_[l - group_begin_[l]] : inner_acts(s->storage);
      a.out = own(s->storage, {R, C_}, dt);
      s->layers.push_back(a);
    }
    if (L.last_stage) {
      s->lnf = act({R, C_});
      s->lnf_mean = f32({R});
      s->lnf_rstd = f32({R});
    }
    slots_.push_back(std::move(s));
  }
  slot_sample_base_.assign(activation_slots, 0);
  slot_training_.assign(activation_slots, 0);

  d_resid_ = act({R, C_});
  if (!L.first_stage) d_input_ = act({R, C_});
  if (scratch_from) {
    scratch_ = scratch_from->scratch_;
  } else {
    scratch_ = std::make_shared<Scratch>();
    Scratch& x = *scratch_;
    x.proj = act({BT, C_});
    x.d_ln = act({BT, C_});
    x.d_tmp = act({R, C_});
    x.d_qkv = act({BT, 3 * Cl_});
    x.d_att = act({BT, Cl_});
    x.d_fc = act({BT, Fl_});
    if (sp) {
      x.sp_proj = act({R, C_});
      x.sp_d_ln = act({R, C_});
      x.sp_d_tmp = act({BT, C_});
      x.ln_full = act({BT, C_});
    }
    x.proj_rows = sp ? x.sp_proj.t() : x.proj.t();
    x.d_ln_rows = sp ? x.sp_d_ln.t() : x.d_ln.t();
    x.d_tmp_full = sp ? x.sp_d_tmp.t() : x.d_tmp.t();
  }
  Scratch& x = *scratch_;
  if (L.first_stage && L.reset_position_ids && x.position_rows.empty()) x.position_rows = act({BT, C_});
  if (L.last_stage && x.logits.empty()) {
    x.logits = act({BT, Vl_});
    x.row_max = f32({BT});
    x.sumexp = f32({BT});
    x.target_logit = f32({BT});
    x.losses = f32({BT});
    x.correct = f32({BT});
  }
}

Gpt2Model::~Gpt2Model() = default;

void Gpt2Model::tp_allreduce(const Tensor& t, ReduceOp op) const {
  if (layout_.tp > 1) layout_.tp_comm->allreduce(t, op);
}

bool sequence_parallel_partial(const ParamSpec& spec) {
  return spec.shard == ShardRule::Replicated && spec.name != "wpe";
}

namespace {

// Rows [begin, end) of a [N, ...] tensor (empty stays empty).
Tensor row_range(const Tensor& t, int64_t begin, int64_t end) {
  if (t.empty()) return t;
  const int64_t per_row = t.numel() / t.shape.dims[0];
  Shape s = t.shape;
  s.dims[0] = end - begin;
  return t.flat_slice(begin * per_row, (end - begin) * per_row).view(s);
}

}  // namespace

Tensor Gpt2Model::gathered(const Tensor& rows) const {
  if (!layout_.sequence_parallel) return rows;
  layout_.tp_comm->allgather(rows, scratch_->ln_full);
  return scratch_->ln_full;
}

void Gpt2Model::sum_to_rows(const Tensor& full, const Tensor& rows) const {
  if (layout_.sequence_parallel)
    layout_.tp_comm->reduce_scatter(full, rows);
  else
    tp_allreduce(full, ReduceOp::Sum);  // rows is full
}

// A dropout draws element (sample, (t x C + c)) of row t of a sample; kernels number a
// tensor's rows from its first sample on. A shard that starts or ends inside a sample is
// cut there: its whole samples go in one call, each partial sample in its own, with that
// sample's number and the index of its first row.
std::vector<Gpt2Model::RowPiece> Gpt2Model::cut_row_pieces() const {
  std::vector<RowPiece> pieces;
  for (int64_t g = row0_, end = row0_ + rows_; g < end;) {
    const int64_t sample = g / T_, t = g % T_;
    RowPiece p{g - row0_, 0, T_, static_cast<uint64_t>(sample), 0};
    if (t == 0 && end - g >= T_) {  // whole samples (without sequence parallelism: all of them)
      g += (end - g) / T_ * T_;
    } else {  // part of one sample
      const int64_t stop = std::min(end, (sample + 1) * T_);
      p.rows_per_sample = static_cast<int>(stop - g);
      p.index_base = static_cast<uint64_t>(t) * static_cast<uint64_t>(C_);
      g = stop;
    }
    p.end = g - row0_;
    pieces.push_back(p);
  }
  return pieces;
}

DropoutKey Gpt2Model::dropout_key(int layer, DropoutSite site, float p, bool training) const {
  DropoutKey k;
  k.p = training ? p : 0.0f;
  k.seed = dropout_seed_;
  k.site = static_cast<uint32_t>(layer) * kSitesPerLayer + site;
  k.sample_base = sample_base_;
  return k;
}

Tensor Gpt2Model::stage_input(int slot) const { return slots_[slot]->input; }
Tensor Gpt2Model::stage_output(int slot) const {
  const SlotActs& s = *slots_[slot];
  return s.layers.empty() ? s.input.t() : s.layers.back().out;
}
Tensor Gpt2Model::layer_input(const SlotActs& s, int local_layer) const {
  return local_layer == 0 ? s.input.t() : s.layers[local_layer - 1].out;
}
Tensor Gpt2Model::input_grad() const { return d_input_; }
Tensor Gpt2Model::output_grad() const { return d_resid_; }

LossStats Gpt2Model::loss_stats() const { return last_stats_; }

// ---- forward ----------------------------------------------------------------------------

void Gpt2Model::forward(int slot, const MicroBatch& mb, bool training, float grad_scale) {
  SlotActs& s = *slots_[slot];
  sample_base_ = slot_sample_base_[slot] = mb.sample_base;
  slot_training_[slot] = training;
  training_ = training;
  if (layout_.reset_attention_mask) {
    TRIDENT_CHECK(mb.document_starts != nullptr, "Gpt2Model::forward: the layout resets the attention mask, "
                                                 "the micro-batch has no document starts");
    be_.copy_from_host(s.document_starts, mb.document_starts);
  }
  document_starts_ = s.document_starts.t();
  const int n = static_cast<int>(s.layers.size());
  if (layout_.first_stage) {
    be_.copy_from_host(s.tokens, mb.tokens);
    if (layout_.reset_position_ids) {  // every TP rank: the backward scatters wpe's gradient by them
      TRIDENT_CHECK(mb.positions != nullptr, "Gpt2Model::forward: the layout resets position ids, the "
                                             "micro-batch has none");
      be_.copy_from_host(s.positions, mb.positions);
    }
    if (params_needed_) params_needed_(kParamsBeforeLayers);
    const ParamStore& P = *params_;
    // Vocab-parallel lookup; rank 0 adds positions so the all-reduce adds them once.
    // Positions restarted in each document are a lookup of their own, added after: the
    // same single rounding of word + position as the fused lookup's.
    const Tensor no_wpe;
    const bool add_positions = layout_.tp_rank == 0;
    const bool reset_positions = layout_.reset_position_ids;
    be_.embedding_forward(s.tokens, P.param("wte"), vocab_start_,
                          add_positions && !reset_positions ? P.param("wpe") : no_wpe, T_, scratch_->proj);
    if (reset_positions && add_positions) {
      be_.embedding_forward(s.positions, P.param("wpe"), 0, no_wpe, T_, scratch_->position_rows);
      be_.accumulate(scratch_->proj, scratch_->position_rows);
    }
    sum_to_rows(scratch_->proj, scratch_->proj_rows);
    const DropoutKey key = dropout_key(0, kDropEmbedding, cfg_.hidden_dropout, training);
    for (const RowPiece& p : row_pieces_)
      be_.dropout_forward(row_range(scratch_->proj_rows, p.begin, p.end), row_range(s.input, p.begin, p.end),
                          p.rows_per_sample, p.key(key));
  }
  // Pre-LN: only the stage's first LayerNorm reads the stage input on its own; every later
  // one (the next layer's ln_1, or ln_f) is fused with the residual add that makes its input.
  const NormOutput first = n > 0 ? ln1_output(layout_.layer_begin, s.layers[0]) : lnf_output(s);
  if (params_needed_ && !first.out.empty()) params_needed_(n > 0 ? layout_.layer_begin : kParamsAfterLayers);
  if (!first.out.empty()) be_.layernorm_forward(s.input, first.gamma, first.beta, first.out, first.mean, first.rstd);
  Tensor x = s.input;
  for (int i = 0; i < n; ++i) {
    const NormOutput next = i + 1 < n ? ln1_output(layout_.layer_begin + i + 1, s.layers[i + 1]) : lnf_output(s);
    layer_forward(layout_.layer_begin + i, x, s.layers[i], training, next);
    x = s.layers[i].out;
  }
  if (layout_.last_stage) {
    be_.copy_from_host(s.targets, mb.targets);
    head_forward(s, grad_scale);
    // Ignored (negative) targets do not count as tokens.
    double n = 0;
    for (int64_t i = 0, e = static_cast<int64_t>(B_) * T_; i < e; ++i) n += mb.targets[i] >= 0;
    last_stats_.tokens = n;
  }
}

Gpt2Model::NormOutput Gpt2Model::ln1_output(int layer, LayerActs& a) const {
  const std::string h = "h." + std::to_string(layer) + ".";
  return NormOutput{params_->param(h + "ln_1.weight"), params_->param(h + "ln_1.bias"), a.ln1, a.ln1_mean,
                    a.ln1_rstd};
}

Gpt2Model::NormOutput Gpt2Model::lnf_output(SlotActs& s) const {
  if (!layout_.last_stage) return NormOutput{};
  return NormOutput{params_->param("ln_f.weight"), params_->param("ln_f.bias"), s.lnf, s.lnf_mean, s.lnf_rstd};
}

// The residual add of a row-parallel branch (scratch proj_rows) into `x`, through the
// hidden dropout, fused with the LayerNorm `next` reads when there is one.
void Gpt2Model::dropout_residual(const Tensor& x, const DropoutKey& key, const Tensor& out, const NormOutput& next) {
  const Tensor branch = scratch_->proj_rows;
  for (const RowPiece& p : row_pieces_) {
    auto rows = [&p](const Tensor& t) { return row_range(t, p.begin, p.end); };
    if (next.out.empty()) {
      be_.dropout_forward(rows(branch), rows(branch), p.rows_per_sample, p.key(key));
      be_.add(rows(x), rows(branch), rows(out));
    } else {
      be_.dropout_residual_layernorm_forward(rows(x), rows(branch), p.rows_per_sample, p.key(key), rows(out),
                                             next.gamma, next.beta, rows(next.out), rows(next.mean), rows(next.rstd));
    }
  }
}

// a.ln1 has been computed (by the previous layer's residual add, or from the stage input).
void Gpt2Model::layer_forward(int layer, const Tensor& x, LayerActs& a, bool training, const NormOutput& next,
                              bool write_output) {
  const ParamStore& P = *params_;
  const std::string h = "h." + std::to_string(layer) + ".";
  const bool rank0 = layout_.tp_rank == 0;
  const Tensor none;
  if (params_needed_) params_needed_(layer);  // already, when the layer before read its ln_1
  // Attention: (LN) -> column-parallel QKV -> causal attention -> row-parallel projection.
  be_.matmul(a.qkv, gathered(a.ln1), P.param(h + "attn.qkv.weight"), P.param(h + "attn.qkv.bias"), false, true,
             false);
  AttentionShape as{B_, T_, Hl_, cfg_.head_dim(), layout_.tp_rank * Hl_, cfg_.num_attention_heads,
                    document_starts_, a.dropout_mask};
  be_.attention_forward(a.qkv, a.att, a.lse, as, dropout_key(layer, kDropAttnProbs, cfg_.attention_dropout, training));
  be_.matmul(scratch_->proj, a.att, P.param(h + "attn.proj.weight"), rank0 ? P.param(h + "attn.proj.bias") : none,
             false, true, false);
  sum_to_rows(scratch_->proj, scratch_->proj_rows);
  // resid_mid = x + dropout(branch), and ln_2 of it, in one pass (the branch is consumed).
  const NormOutput ln2{P.param(h + "ln_2.weight"), P.param(h + "ln_2.bias"), a.ln2, a.ln2_mean, a.ln2_rstd};
  dropout_residual(x, dropout_key(layer, kDropAttnOut, cfg_.hidden_dropout, training), a.resid_mid, ln2);
  // MLP: LN -> column-parallel fc with GELU (one GEMM with a GELU epilogue) -> row-parallel projection.
  be_.matmul_bias_gelu(a.fc, a.gelu, gathered(a.ln2), P.param(h + "mlp.fc.weight"), P.param(h + "mlp.fc.bias"), false,
                       true, cfg_.gelu);
  // A recomputation that stops here has what the backward reads (fc, gelu): the MLP's
  // output projection and its tensor-parallel reduction would be thrown away. Every rank
  // of the TP group stops at the same layer, so none waits in that reduction.
  if (!write_output) return;
  be_.matmul(scratch_->proj, a.gelu, P.param(h + "mlp.proj.weight"), rank0 ? P.param(h + "mlp.proj.bias") : none,
             false, true, false);
  sum_to_rows(scratch_->proj, scratch_->proj_rows);
  // out = resid_mid + dropout(branch), fused with the LayerNorm that reads it when it is on
  // this stage: the next layer's ln_1 (or ln_f), whose parameters must be here by now.
  if (params_needed_ && !next.out.empty())
    params_needed_(layer + 1 < layout_.layer_end ? layer + 1 : kParamsAfterLayers);
  dropout_residual(a.resid_mid, dropout_key(layer, kDropMlpOut, cfg_.hidden_dropout, training), a.out, next);
}

// s.lnf has been computed (fused with the last layer's residual add).
void Gpt2Model::head_forward(SlotActs& s, float grad_scale) {
  const ParamStore& P = *params_;
  Scratch& k = *scratch_;
  // Tied, vocab-parallel LM head: logits shard = lnf @ wte_shard^T.
  be_.matmul(k.logits, gathered(s.lnf), P.param("wte"), Tensor(), false, true, false);
  if (layout_.tp == 1) {  // nothing to all-reduce between the phases: one pass for both
    be_.xent_stats_sumexp(k.logits, s.targets, vocab_start_, vocab_valid_, k.row_max, k.target_logit, k.sumexp);
  } else {
    be_.xent_stats(k.logits, s.targets, vocab_start_, vocab_valid_, k.row_max, k.target_logit);
    tp_allreduce(k.row_max, ReduceOp::Max);
    tp_allreduce(k.target_logit, ReduceOp::Sum);
    be_.xent_sumexp(k.logits, vocab_valid_, k.row_max, k.sumexp);
    tp_allreduce(k.sumexp, ReduceOp::Sum);
  }
  be_.xent_loss_grad(k.logits, s.targets, vocab_start_, vocab_valid_, k.row_max, k.sumexp, k.target_logit,
                     k.losses, k.correct, grad_scale);
  last_stats_.loss_sum = be_.sum(k.losses);
  last_stats_.correct = be_.sum(k.correct);
}

// ---- backward ---------------------------------------------------------------------------

void Gpt2Model::backward(int slot) {
  SlotActs& s = *slots_[slot];
  sample_base_ = slot_sample_base_[slot];
  document_starts_ = s.document_starts.t();
  training_ = slot_training_[slot] != 0;
  const ParamStore& P = *params_;
  // d_resid holds d(stage output): from the head on the last stage, else received.
  if (layout_.last_stage) head_backward(s, stage_output(slot));
  for (int i = static_cast<int>(s.layers.size()) - 1; i >= 0; --i) {
    if (group_begin_[i] >= 0 && i == group_end_[i] - 1) recompute_group(s, group_begin_[i], group_end_[i]);
    layer_backward(layout_.layer_begin + i, layer_input(s, i), s.layers[i]);
    if (layer_grads_ready_) layer_grads_ready_(layout_.layer_begin + i);
  }
  if (layout_.first_stage) {
    const Tensor& d_embed =
        dropout_bias_backward(dropout_key(0, kDropEmbedding, cfg_.hidden_dropout, training_), Tensor());
    if (layout_.reset_position_ids) {  // positions scattered as tokens are (in row order: deterministic)
      be_.embedding_backward(d_embed, s.tokens, vocab_start_, T_, P.grad("wte"), Tensor());
      be_.embedding_backward(d_embed, s.positions, 0, T_, P.grad("wpe"), Tensor());
    } else {
      be_.embedding_backward(d_embed, s.tokens, vocab_start_, T_, P.grad("wte"), P.grad("wpe"));
    }
  } else {
    be_.copy(d_input_, d_resid_);
  }
}

// The group's first LayerNorm reads its input on its own (the fused one that made it in the
// forward belonged to the layer before); the last layer stops before its output, which is
// stored. The TP all-reduces run again, on every TP rank alike.
void Gpt2Model::recompute_group(SlotActs& s, int begin, int end) {
  const NormOutput first = ln1_output(layout_.layer_begin + begin, s.layers[begin]);
  be_.layernorm_forward(layer_input(s, begin), first.gamma, first.beta, first.out, first.mean, first.rstd);
  for (int i = begin; i < end; ++i) {
    const bool last = i + 1 == end;
    const NormOutput next = last ? NormOutput{} : ln1_output(layout_.layer_begin + i + 1, s.layers[i + 1]);
    layer_forward(layout_.layer_begin + i, layer_input(s, i), s.layers[i], training_, next, !last);
  }
}

void Gpt2Model::head_backward(SlotActs& s, const Tensor& x) {
  const ParamStore& P = *params_;
  Scratch& k = *scratch_;
  // logits now hold d(logits). wte grad += dlogits^T @ lnf; d(lnf) = dlogits @ wte.
  be_.matmul(P.grad("wte"), k.logits, gathered(s.lnf), Tensor(), true, false, true);
  be_.matmul(k.d_ln, k.logits, P.param("wte"), Tensor(), false, false, false);
  sum_to_rows(k.d_ln, k.d_ln_rows);
  be_.fill(d_resid_, 0.0f);
  be_.layernorm_backward(k.d_ln_rows, x, P.param("ln_f.weight"), s.lnf_mean, s.lnf_rstd, d_resid_,
                         P.grad("ln_f.weight"), P.grad("ln_f.bias"));
}

void Gpt2Model::layer_backward(int layer, const Tensor& x, LayerActs& a) {
  const ParamStore& P = *params_;
  Scratch& k = *scratch_;
  const std::string h = "h." + std::to_string(layer) + ".";
  // d_resid = d(layer output) = d(resid_mid) through the skip connection.
  // MLP branch.
  // The projection output's gradient through the dropout, with its bias gradient (over this
  // rank's rows), from every rank's rows.
  const Tensor& d_mlp_out = dropout_bias_backward(dropout_key(layer, kDropMlpOut, cfg_.hidden_dropout, training_),
                                                  P.grad(h + "mlp.proj.bias"));
  be_.matmul(P.grad(h + "mlp.proj.weight"), d_mlp_out, a.gelu, Tensor(), true, false, true);
  be_.matmul_gelu_backward(k.d_fc, d_mlp_out, P.param(h + "mlp.proj.weight"), a.fc, false, false, cfg_.gelu);
  be_.linear_param_grads(k.d_fc, gathered(a.ln2), P.grad(h + "mlp.fc.weight"), P.grad(h + "mlp.fc.bias"));
  be_.matmul(k.d_ln, k.d_fc, P.param(h + "mlp.fc.weight"), Tensor(), false, false, false);
  sum_to_rows(k.d_ln, k.d_ln_rows);
  be_.layernorm_backward(k.d_ln_rows, a.resid_mid, P.param(h + "ln_2.weight"), a.ln2_mean, a.ln2_rstd, d_resid_,
                         P.grad(h + "ln_2.weight"), P.grad(h + "ln_2.bias"));
  // Attention branch.
  const Tensor& d_attn_out = dropout_bias_backward(dropout_key(layer, kDropAttnOut, cfg_.hidden_dropout, training_),
                                                   P.grad(h + "attn.proj.bias"));
  be_.matmul(P.grad(h + "attn.proj.weight"), d_attn_out, a.att, Tensor(), true, false, true);
  be_.matmul(k.d_att, d_attn_out, P.param(h + "attn.proj.weight"), Tensor(), false, false, false);
  AttentionShape as{B_, T_, Hl_, cfg_.head_dim(), layout_.tp_rank * Hl_, cfg_.num_attention_heads,
                    document_starts_, a.dropout_mask};
  be_.attention_backward(k.d_att, a.qkv, a.att, a.lse, k.d_qkv, as,
                         dropout_key(layer, kDropAttnProbs, cfg_.attention_dropout, training_));
  be_.linear_param_grads(k.d_qkv, gathered(a.ln1), P.grad(h + "attn.qkv.weight"), P.grad(h + "attn.qkv.bias"));
  be_.matmul(k.d_ln, k.d_qkv, P.param(h + "attn.qkv.weight"), Tensor(), false, false, false);
  sum_to_rows(k.d_ln, k.d_ln_rows);
  be_.layernorm_backward(k.d_ln_rows, x, P.param(h + "ln_1.weight"), a.ln1_mean, a.ln1_rstd, d_resid_,
                         P.grad(h + "ln_1.weight"), P.grad(h + "ln_1.bias"));
}

// d_resid through the hidden dropout `key` (d_tmp), dbias (unless empty) += its column sums
// over this rank's rows; returned from every rank's rows (d_tmp_full). With the dropout off
// (p = 0: not training, or --hidden-dropout 0) d_tmp would be a copy of d_resid: d_resid
// itself is summed and returned (gathered into d_tmp_full with sequence parallelism), the
// same values without writing them again. The callers read it before the next LayerNorm
// backward adds onto d_resid.
const Tensor& Gpt2Model::dropout_bias_backward(const DropoutKey& key, const Tensor& dbias) {
  Scratch& k = *scratch_;
  const bool copy = !key.enabled();
  for (const RowPiece& p : row_pieces_) {
    const Tensor rows = row_range(d_resid_, p.begin, p.end), tmp = row_range(k.d_tmp, p.begin, p.end);
    if (copy) {
      if (!dbias.empty()) be_.bias_backward(rows, dbias);
    } else if (!dbias.empty()) {
      be_.dropout_bias_backward(rows, p.rows_per_sample, p.key(key), tmp, dbias);
    } else {
      be_.dropout_backward(rows, tmp, p.rows_per_sample, p.key(key));
    }
  }
  if (!layout_.sequence_parallel) return copy ? d_resid_.t() : k.d_tmp_full;
  layout_.tp_comm->allgather(copy ? d_resid_.t() : k.d_tmp.t(), k.d_tmp_full);
  return k.d_tmp_full;
}

}  // namespace trident
