// GPT checkpoints written by Megatron-LM and Megatron-DeepSpeed (torch.save files, read with
// torch_file.h; Megatron-core's distributed checkpoints) -> trident canonical tensors and
// ModelConfig, and trident's weights -> a Megatron-LM checkpoint (export_megatron_gpt2 below).
// Weights, and on request the training state of a Megatron-LM checkpoint
// (MegatronImportOptions::with_optimizer) or of a trident run for Megatron-LM
// (MegatronExportOptions::training); Megatron's RNG states are neither read nor written
// (trident's dropout is keyed by the seed).
//
// Layouts read (DIR is the --save directory, or one iteration folder in it):
//  * Megatron-LM: DIR/latest_checkpointed_iteration.txt ("N" or "release") ->
//    DIR/iter_NNNNNNN (or DIR/release)/mp_rank_TT[_PPP]/model_optim_rng.pt, one per tensor-
//    parallel rank TT and, with a pipeline, stage PPP. The model is under 'model' (with a
//    virtual pipeline 'model0', 'model1', ...: chunk v of stage p holds the layers after
//    those of all chunks < v and of the earlier stages' chunk v). Module names of the legacy
//    model (language_model.embedding/encoder, older 'transformer' and 'attention.', newer
//    '*_norm') and of Megatron-core's GPTModel (embedding, decoder.layers.N with the local or
//    Transformer Engine layer spec, output_layer); '_extra_state' entries are skipped.
//  * Megatron-core's distributed checkpoint (--ckpt-format torch_dist): the same tracker and
//    iter_NNNNNNN folder, holding common.pt (args, iteration), metadata.json (sharded_backend
//    torch_dist) and a PyTorch distributed checkpoint (.metadata, *.distcp; torch_dcp.h) of
//    whole tensors, whatever the layout that saved them (megatron_dist.h).
//  * Megatron-DeepSpeed: DIR/latest ("global_stepN") -> DIR/global_stepN: without a pipeline
//    mp_rank_TT_model_states.pt whose 'module' holds the Megatron-LM model above; with
//    DeepSpeed's pipeline layer_XX-model_TT-model_states.pt, one file per layer with
//    parameters (the embedding, the transformer layers in index order, the final LayerNorm;
//    the tied head is not saved again), and the args in mp_rank_00_model_states.pt.
//
// Tensor-parallel shards are joined as Megatron splits them: word embedding, QKV and
// dense_h_to_4h by rows; attention dense and dense_4h_to_h weights by columns; LayerNorms and
// the row-parallel biases are replicated (rank 0's is taken). QKV rows are per rank
// [heads][q,k,v][head_dim] (checkpoint_version >= 2; version 1.0 [heads][head_dim][q,k,v],
// version 0 [q,k,v][heads][head_dim]) and become trident's [q,k,v][heads][head_dim]. The
// padded vocabulary rows are dropped (trident leaves them out of the softmax; Megatron
// trained them as never-seen tokens). A tied head stored on the last stage must equal the
// word embedding bit for bit.
//
// A checkpoint saved without args (NVIDIA's released GPT-2 345M) takes its shape from the
// tensors (config_from_tensors in the .cpp). Otherwise the shape comes from the saved args
// (argparse.Namespace): num_layers, hidden_size, num_attention_heads, max_position_embeddings,
// seq_length, padded_vocab_size, make_vocab_size_divisible_by, fp16/bf16, init_method_std,
// hidden/attention_dropout, the GELU (bias_gelu_fusion false is the exact erf one, unless
// openai_gelu in the legacy model; args without bias_gelu_fusion are Megatron-LM 1.x's:
// megatron_args.cpp); what trident's GPT-2 cannot represent (untied head, RMSNorm, SwiGLU,
// grouped-query attention, rotary positions, no linear biases, ffn_hidden_size != 4 x hidden,
// eps != 1e-5, post-LayerNorm residuals, ...) is refused in one line naming the arg. Megatron's
// args do not hold the real vocabulary size: it is `vocab_size` when given, else GPT-2's
// 50257 for tokenizer_type GPT2BPETokenizer; it must pad to padded_vocab_size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/canonical_slices.h"
#include "ckpt/pickle_reader.h"
#include "model/config.h"
#include "parallel/pipeline_split.h"

namespace trident {

inline constexpr int64_t kGpt2VocabSize = 50257;  // GPT-2's BPE vocabulary, Megatron's GPT2BPETokenizer

// What a run needs to go on from a Megatron checkpoint (MegatronImportOptions::with_optimizer),
// in trident's terms (ckpt/megatron_optimizer.h reads it).
struct MegatronTrainingState {
  // Canonical names, fp32, wte unpadded, as MegatronGpt2Model::tensors; the moments are zero
  // before the first step.
  TensorMap master, exp_avg, exp_avg_sq;
  int64_t consumed_samples = 0;  // args.consumed_train_samples
  // trident's trainer_state fields (trainer_checkpoint.cpp): optimizer_steps, opt_param_scheduler
  // (Megatron's field names, when saved), loss_scaler (fp16's dynamic scaler), dropout_seed
  // (args.seed: trident's dropout draws are its own, keyed by the seed), consumed_valid_samples,
  // global_batch_size, sample_order (metadata.h: Megatron's), data_seed (args.seed, which
  // ordered its samples), adam (its first param group's betas and eps).
  nlohmann::json trainer_state;
};

struct MegatronGpt2Model {
  ModelConfig config;
  TensorMap tensors;  // canonical names, fp32, wte unpadded
  std::optional<MegatronTrainingState> training;  // with MegatronImportOptions::with_optimizer
  std::filesystem::path dir;  // the iteration folder read
  std::string flavour;        // "Megatron-LM" or "Megatron-DeepSpeed"
  int64_t iteration = 0;      // the checkpoint's own (0 for a release folder)
  int tp = 1, pp = 1, virtual_chunks = 1;
};

struct MegatronImportOptions {
  std::optional<int64_t> iteration;   // else the latest
  std::optional<int64_t> vocab_size;  // the real vocabulary (see above)
  // Checkpoints saved without args (NVIDIA's released GPT-2 345M) do not record the heads;
  // with args it must agree.
  std::optional<int> num_attention_heads;
  std::string iteration_flag = "--iteration";  // the tool's flag that gave `iteration`, for errors
  // Also read the training state (MegatronGpt2Model::training): a Megatron-LM checkpoint saved
  // with args (torch format: ckpt/megatron_optimizer.h; torch_dist: ckpt/megatron_dist.h), its
  // optimizer distributed or not, or a Megatron-DeepSpeed one's ZeRO files
  // (ckpt/megatron_deepspeed_optimizer.h).
  bool with_optimizer = false;
};

// Reads the checkpoint. Throws ConfigError naming --load, the iteration flag, --vocab-size or
// --num-attention-heads for a missing directory or an unsupported model, IoError naming the
// file for a malformed one.
MegatronGpt2Model import_megatron_gpt2(const std::filesystem::path& load, const MegatronImportOptions& options);

// The model shape from Megatron's saved args; `source` names the file in errors.
ModelConfig model_config_from_megatron_args(const pickle::Value& args, const std::string& source,
                                            std::optional<int64_t> vocab_size);

// The Adam a Megatron-LM run steps with: Transformer Engine's or apex's FusedAdam (its first
// choices, the step count in each param group) or torch's (in each parameter's state).
enum class MegatronAdam { kFused, kTorch };

struct MegatronExportOptions {
  int tp = 1, pp = 1;
  // The Megatron run's pipeline split (parallel/pipeline_split.h): its model chunks a stage
  // (--num-virtual-stages-per-pipeline-rank; a layout gives its own) and uneven stages. Without
  // them Megatron splits the layers evenly, so pp x chunks must divide them.
  int chunks = 1;
  UnevenPipeline uneven;
  DType dtype = DType::F32;
  // The LayerNorms' module names: false "input_layernorm", "post_attention_layernorm",
  // "final_layernorm" (Megatron-DeepSpeed, Megatron-LM before its RMSNorm support); true
  // "input_norm", "post_attention_norm", "final_norm" (Megatron-LM's legacy model since).
  // Megatron-LM loads a mismatch non-strictly, leaving its LayerNorms initial: choose right.
  bool norm_names = false;
  // Megatron-core's GPTModel with the local layer spec (Megatron-LM's default model since its
  // legacy one was deprecated, loaded with --transformer-impl local) instead of the legacy
  // model: flat keys embedding.*, decoder.layers.N.{input_layernorm, self_attention.linear_qkv,
  // self_attention.linear_proj, pre_mlp_layernorm, mlp.linear_fc1, mlp.linear_fc2}.*,
  // decoder.final_layernorm.*, output_layer.weight (the tied copy, on a last stage that is not
  // the first), and the '_extra_state' None that its parallel linear layers (output_layer's
  // too) put in a state dict, which a strict load asks for. norm_names does not apply.
  bool mcore = false;
  // args.tokenizer_type, which Megatron compares on load: default GPT2BPETokenizer for GPT-2's
  // 50257 tokens; required for other vocabularies.
  std::string tokenizer_type;
  int64_t iteration = 0;  // the source's, recorded as 'iteration' (a release loads at 0)
  // With the run's training state (trident-convert --to megatron --with-optimizer): the
  // iteration folder iter_<iteration> that Megatron-LM resumes from (megatron_export_state.h),
  // instead of a release.
  const MegatronTrainingState* training = nullptr;
  MegatronAdam adam = MegatronAdam::kFused;  // where the training state keeps Adam's step count
  // Megatron-core's distributed checkpoint (--ckpt-format torch_dist, its default) instead of
  // the torch format: export_megatron_gpt2 below. Megatron-core's model only.
  bool torch_dist = false;
  // With `training` and torch_dist: the optimizer state as Megatron's distributed optimizer
  // (--use-distributed-optimizer) loads it at any data-parallel size, 'fully_reshardable'.
  bool distributed_optimizer = false;
};

// Writes the canonical tensors (stored form: wte unpadded, full shapes) as a Megatron-LM
// release checkpoint of the legacy GPT model, or of Megatron-core's GPTModel (options.mcore):
// DIR/release/mp_rank_TT[_PPP]/model_optim_rng.pt at tp x pp (Megatron's split of the layers:
// even, or as options.uneven says; with model chunks a file holds 'model0', 'model1', ..., each
// chunk's layers numbered from 0) and DIR/latest_checkpointed_iteration.txt "release", which Megatron-LM
// (--use-legacy-models --transformer-impl local; Megatron-core's: --transformer-impl local) and
// Megatron-DeepSpeed (the legacy model, without --deepspeed) load without optimizer or RNG
// state, at iteration 0. Each file holds 'model' (legacy or Megatron-core names in the order
// of the model's named_parameters(), vocabulary padded for tp with zero rows, QKV in
// checkpoint_version 3.0's order), 'args' (the model's shape, tp/pp, num_key_value_heads,
// the split's args, tokenizer_type, use_legacy_models, transformer_impl and consumed_train_samples 0 as
// Megatron's argparse.Namespace, fractions as their shortest decimals), 'checkpoint_version'
// 3.0 and 'iteration'. Tensors are stored as options.dtype. With options.training the folder
// is DIR/iter_<iteration> (the tracker says the iteration), each file holds the optimizer's
// state and the scheduler's too, and the args the run's consumed samples, seed and global
// batch: Megatron-LM continues it with --no-load-rng (no RNG state is written).
// With options.torch_dist the folder is Megatron-core's distributed checkpoint instead, which
// Megatron-LM loads at any tensor and pipeline split (--ckpt-format torch_dist, its default):
// metadata.json (sharded_backend torch_dist), common.pt ('args', 'checkpoint_version',
// 'iteration', 'content_metadata', with the training state 'opt_param_scheduler',
// 'num_floating_point_operations_so_far' and the optimizer's non-tensor part,
// megatron_export_state.h) and a PyTorch distributed checkpoint (torch_dcp_writer.h) of whole
// tensors under GPTModel.sharded_state_dict()'s keys, the layers stacked on a first axis of
// num_layers ('decoder.layers.self_attention.linear_qkv.weight' [L, 3C, C]; the norms under
// Transformer Engine's names, 'self_attention.linear_qkv.layer_norm_weight', as the local spec's
// sharded_state_dict_keys_map has them), each tensor-parallel
// piece saved once by the rank of tp x pp that would hold it (a replicated one by TP rank 0),
// the tied head not saved again, and each local linear layer's '_extra_state' object ([None]
// at 'shard_<layer>_<L>'). With the training state: Adam's moments and the fp32 masters under
// 'optimizer.state.{exp_avg, exp_avg_sq, fp32_param}.<key>' (no masters for fp32, whose weights
// they are) for the non-distributed optimizer, or 'optimizer.state.{exp_avg, exp_avg_sq,
// param}.<key>' with options.distributed_optimizer; the args say no_save_rng (none is written).
// DIR must exist. Throws ConfigError naming --target-pp, --dtype, --tokenizer-type or
// --ckpt-format for what Megatron cannot hold, IoError naming the file.
void export_megatron_gpt2(const std::filesystem::path& dir, const ModelConfig& cfg, const TensorMap& canonical,
                          const MegatronExportOptions& options);
// export_megatron_gpt2's checks of the model and options, without writing anything (a tool
// calls it before reading the tensors). Returns the options with tokenizer_type filled in.
MegatronExportOptions check_megatron_export(const ModelConfig& cfg, const MegatronExportOptions& options);
// The torch_dist folder's contents (export_megatron_gpt2 with options.torch_dist, checked) in
// `folder`, which exists.
void export_megatron_dist_gpt2(const std::filesystem::path& folder, const ModelConfig& cfg, const TensorMap& canonical,
                               const MegatronExportOptions& options);

// Megatron's tensor-parallel split of a canonical parameter (the word embedding and the LM
// head by rows, ...; see above).
enum class MegatronSplit { kReplicated, kRows, kColumns, kQkv };
MegatronSplit megatron_split(const std::string& canonical);
// Trident's QKV row ([q,k,v][heads][head_dim]) of row r of tensor-parallel rank t's shard,
// whose rows are in the order of `checkpoint_version`.
int64_t megatron_qkv_row(int64_t r, int t, int tp, const ModelConfig& cfg, double checkpoint_version);
// Where row r of rank t's shard ([lrows, lcols] of a [rows, cols] tensor split as `split`)
// lies in the full tensor: its row and first column.
struct MegatronShardRow {
  int64_t row, col0;
};
MegatronShardRow megatron_shard_row(MegatronSplit split, int64_t r, int t, int tp, int64_t lrows, int64_t lcols,
                                    const ModelConfig& cfg, double checkpoint_version);
// The legacy model's key inside a layer for a canonical suffix: "attn.qkv.weight" ->
// "self_attention.query_key_value.weight"; LayerNorms per MegatronExportOptions::norm_names.
std::string megatron_layer_key(const std::string& canonical_suffix, bool norm_names);

}  // namespace trident
