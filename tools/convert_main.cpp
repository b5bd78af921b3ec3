// trident-convert: checkpoint conversion on one process (no MPI, no model, no backend).
//
//   trident-convert --load DIR --save OUT [--iteration N] [--target-tp T] [--target-pp P] [--no-optimizer]
//                   [--overwrite]
//       a checkpoint written under any layout -> OUT/iter_NNNNNNN at tp T x pp P (default 1 x 1),
//       dp 1, zero 0, with its optimizer state (unless --no-optimizer: a release checkpoint);
//   trident-convert --to hf --load DIR --save OUT [--iteration N] [--dtype fp32|fp16|bf16]
//       -> a Hugging Face GPT2LMHeadModel folder (config.json, model.safetensors);
//   trident-convert --to megatron --load DIR --save OUT [--iteration N] [--dtype ...] [--target-tp T] [--target-pp P]
//                   [--tokenizer-type NAME] [--megatron-model legacy|mcore] [--megatron-norm-names]
//                   [--with-optimizer [--megatron-adam fused|torch]] [--ckpt-format torch|torch_dist
//                   [--use-distributed-optimizer]]
//       -> a Megatron-LM release checkpoint of the weights (ckpt/megatron_gpt2.h), tp T x pp P; with
//       --with-optimizer OUT/iter_<its iteration> with the optimizer state, consumed samples,
//       scheduler and loss scale, which Megatron-LM resumes (--no-load-rng); --ckpt-format
//       torch_dist writes Megatron-core's distributed checkpoint instead (any split loads it);
//   trident-convert --from hf --load HFDIR --save OUT [--target-tp T] [--target-pp P] [--overwrite]
//       a Hugging Face GPT-2 folder -> OUT/iter_0000000 without optimizer state (load it with
//       trident-train --load OUT --finetune, or --no-load-optim --no-load-rng);
//   trident-convert --from megatron --load DIR --save OUT [--iteration N] [--vocab-size V] [--target-tp T]
//                   [--target-pp P] [--num-attention-heads H] [--with-optimizer] [--overwrite]
//       a Megatron-LM (torch or torch_dist format) or Megatron-DeepSpeed GPT checkpoint (any tp x pp,
//       ckpt/megatron_gpt2.h)
//       -> OUT/iter_0000000, its weights without optimizer state, as for --from hf; with
//       --with-optimizer (a Megatron-LM checkpoint, torch or torch_dist, distributed optimizer or not;
//       a Megatron-DeepSpeed one)
//       OUT/iter_<its iteration> with its optimizer state, consumed samples, scheduler and loss
//       scale, which trident-train --load resumes.
// Every output appears atomically under its final name (a checkpoint through the
// iter_NNNNNNN.tmp-* protocol, an exported folder renamed from OUT.tmp-*); an error prints one line
// naming the file or flag and exits 2, leaving nothing under the final name. A checkpoint is
// written only into an OUT that holds none yet: committing into a training run's directory
// would move its latest pointer (and replace its iter_NNNNNNN of the same number), so that
// takes --overwrite.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "ckpt/atomic_file.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/hf_gpt2.h"
#include "ckpt/megatron_export_state.h"
#include "ckpt/megatron_gpt2.h"
#include "ckpt/offline_checkpoint.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "core/flag_value.h"
#include "parallel/pipeline_layout.h"
#include "tool_main.h"
#include "tools/integer_flag.h"

namespace trident {
namespace {
namespace fs = std::filesystem;

constexpr const char* kUsage =
    "Usage:\n"
    "  trident-convert --load DIR --save OUT [--iteration N] [--target-tp T] [--target-pp P] [--no-optimizer]\n"
    "                  [--overwrite]\n"
    "      consolidate or reshard a trident checkpoint (any layout) to tp T x pp P (default 1 x 1), dp 1\n"
    "  trident-convert --to hf --load DIR --save OUT [--iteration N] [--dtype fp32|fp16|bf16]\n"
    "      export a Hugging Face GPT2LMHeadModel folder (config.json, model.safetensors)\n"
    "  trident-convert --to megatron --load DIR --save OUT [--iteration N] [--dtype fp32|fp16|bf16] [--target-tp T]\n"
    "                  [--target-pp P] [--tokenizer-type NAME] [--megatron-model legacy|mcore] [--megatron-norm-names]\n"
    "                  [--with-optimizer [--megatron-adam fused|torch]] [Megatron's pipeline split flags]\n"
    "                  [--ckpt-format torch|torch_dist [--use-distributed-optimizer]]\n"
    "      export the weights as a Megatron-LM release checkpoint (OUT/release/mp_rank_*/model_optim_rng.pt) of its\n"
    "      legacy GPT model; --megatron-norm-names for Megatron-LM's input_norm/post_attention_norm/final_norm (its\n"
    "      legacy model since RMSNorm support) instead of *_layernorm (Megatron-DeepSpeed, older Megatron-LM);\n"
    "      --tokenizer-type (args.tokenizer_type) is required unless the vocabulary is GPT-2's; --megatron-model mcore\n"
    "      writes Megatron-core's GPTModel (local layer spec: load with --transformer-impl local) instead;\n"
    "      --with-optimizer writes OUT/iter_<its iteration> with the training state (Adam's moments and steps, the\n"
    "      fp32 master weights, the consumed samples, the learning-rate schedule, the loss scale) for Megatron-LM's\n"
    "      non-distributed optimizer, which it resumes with --no-load-rng; --megatron-adam torch keeps Adam's step\n"
    "      count as torch's Adam does (in each parameter's state), not as Transformer Engine's and apex's FusedAdam\n"
    "      (in each param group, the default); the Megatron run's pipeline split, by its flags: model chunks\n"
    "      (--num-virtual-stages-per-pipeline-rank V: each file holds model0 ... model<V-1>), uneven stages\n"
    "      (--decoder-first-pipeline-num-layers N, --decoder-last-pipeline-num-layers N,\n"
    "      --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split) or\n"
    "      --pipeline-model-parallel-layout LAYOUT (these with --megatron-model mcore: Megatron-LM's legacy model\n"
    "      splits evenly); without them pp x chunks must divide the layers; --ckpt-format torch_dist (with\n"
    "      --megatron-model mcore) writes Megatron-core's distributed checkpoint instead (common.pt, .metadata,\n"
    "      *.distcp: whole tensors by name, which Megatron-LM loads at any tensor and pipeline split, its default\n"
    "      --ckpt-format), its optimizer state by name for the non-distributed optimizer, or with\n"
    "      --use-distributed-optimizer in the distributed optimizer's fully_reshardable format (any data-parallel\n"
    "      size; Megatron-core 0.14 on): the Megatron run must use the same optimizer\n"
    "  trident-convert --from hf --load HFDIR --save OUT [--target-tp T] [--target-pp P]\n"
    "                  [--make-vocab-size-divisible-by N] [--overwrite]\n"
    "      import a Hugging Face GPT-2 folder as OUT/iter_0000000 without optimizer state\n"
    "  trident-convert --from megatron --load DIR --save OUT [--iteration N] [--vocab-size V] [--target-tp T]\n"
    "                  [--target-pp P] [--num-attention-heads H] [--with-optimizer] [--overwrite]\n"
    "      import the weights of a Megatron-LM (mp_rank_*/model_optim_rng.pt, or Megatron-core's torch_dist:\n"
    "      common.pt, .metadata, *.distcp) or Megatron-DeepSpeed (global_stepN/) GPT checkpoint of any layout\n"
    "      as OUT/iter_0000000 without optimizer state; --vocab-size is the real\n"
    "      vocabulary (default GPT-2's 50257 for tokenizer_type GPT2BPETokenizer); --num-attention-heads for a\n"
    "      checkpoint saved without args (default 16 for NVIDIA's released 24-layer, 1024-wide GPT-2 345M);\n"
    "      --with-optimizer also imports the training state of a Megatron-LM checkpoint (--ckpt-format torch or\n"
    "      torch_dist, with or without --use-distributed-optimizer) or of a Megatron-DeepSpeed one (DeepSpeed\n"
    "      ZeRO stage 0, 1 or 2): Adam's moments and steps, the fp32 master weights, the consumed samples, the\n"
    "      learning-rate schedule, the loss scale, at its iteration, for trident-train --load\n"
    "--load DIR may also name one iter_NNNNNNN folder (with --from megatron also release/ or global_stepN/).\n"
    "The latest iteration is read unless --iteration N\n"
    "(or Megatron's --ckpt-step N).\n"
    "A checkpoint OUT must hold no checkpoint yet (no latest_checkpointed_iteration.txt, no iter_* folder)\n"
    "unless --overwrite: then OUT's iteration of the same number is replaced and its latest pointer moves\n"
    "to the converted checkpoint.\n";

struct ConvertFlags {
  std::string load, save, to, from, dtype, tokenizer_type;
  std::optional<int64_t> iteration, vocab_size;
  std::optional<int> num_attention_heads;
  int target_tp = 1, target_pp = 1, vocab_divisible_by = 128;
  // --to megatron: the Megatron run's split (Megatron's flag names).
  int chunks = 1;  // --num-virtual-stages-per-pipeline-rank
  UnevenPipeline uneven;
  std::string megatron_model = "legacy";  // --megatron-model
  std::string megatron_adam = "fused";    // --megatron-adam
  std::string ckpt_format = "torch";      // --ckpt-format (Megatron's flag)
  bool distributed_optimizer = false;     // --use-distributed-optimizer
  bool no_optimizer = false, with_optimizer = false, overwrite = false, norm_names = false, help = false;
  std::map<std::string, bool> given;
};

constexpr long long kMaxInt = std::numeric_limits<int>::max();

// The flag that chose the iteration, for errors about it.
const char* iteration_flag(const ConvertFlags& f) {
  const auto it = f.given.find("ckpt-step");
  return it != f.given.end() && it->second ? "--ckpt-step" : "--iteration";
}

// Whether `inner` is `outer` or lies inside it, links resolved as far as the paths exist.
bool nested(const std::string& inner, const std::string& outer) {
  std::error_code ec;
  const fs::path in = fs::weakly_canonical(fs::absolute(inner), ec), out = fs::weakly_canonical(fs::absolute(outer), ec);
  if (ec) return false;
  auto i = in.begin();
  for (auto o = out.begin(); o != out.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing slash
    if (i == in.end() || *i != *o) return false;
  }
  return true;
}

ConvertFlags parse_flags(int argc, char** argv) {
  ConvertFlags f;
  const std::map<std::string, bool> known = {  // name -> takes a value
      {"load", true},      {"save", true},         {"iteration", true}, {"ckpt-step", true}, {"target-tp", true},
      {"target-pp", true}, {"no-optimizer", false}, {"to", true},        {"from", true},
      {"dtype", true},     {"make-vocab-size-divisible-by", true},      {"overwrite", false},
      {"vocab-size", true}, {"num-attention-heads", true}, {"tokenizer-type", true},
      {"megatron-norm-names", false}, {"megatron-model", true}, {"megatron-adam", true}, {"with-optimizer", false}, {"help", false},
      {"ckpt-format", true}, {"use-distributed-optimizer", false},
      // --to megatron: the split of the Megatron run that loads it.
      {"num-virtual-stages-per-pipeline-rank", true}, {"decoder-first-pipeline-num-layers", true},
      {"decoder-last-pipeline-num-layers", true}, {"account-for-embedding-in-pipeline-split", false},
      {"account-for-loss-in-pipeline-split", false}, {"pipeline-model-parallel-layout", true}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw ConfigError("unexpected argument '" + a + "' (see --help)");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = known.find(name);
    if (it == known.end()) throw ConfigError("unknown flag --" + name + " (see --help)");
    if (f.given[name]) throw ConfigError("--" + name + " given twice");
    f.given[name] = true;
    check_flag_word("--" + name, !it->second, has_value, i + 1 < argc ? argv[i + 1] : nullptr);
    if (!it->second) {
      if (name == "help") f.help = true;
      if (name == "no-optimizer") f.no_optimizer = true;
      if (name == "with-optimizer") f.with_optimizer = true;
      if (name == "overwrite") f.overwrite = true;
      if (name == "megatron-norm-names") f.norm_names = true;
      if (name == "use-distributed-optimizer") f.distributed_optimizer = true;
      if (name == "account-for-embedding-in-pipeline-split") f.uneven.embedding_as_layer = true;
      if (name == "account-for-loss-in-pipeline-split") f.uneven.loss_as_layer = true;
      continue;
    }
    if (!has_value) value = argv[++i];
    if (value.empty()) throw ConfigError("--" + name + ": expected a value");
    if (name == "load") f.load = value;
    else if (name == "save") f.save = value;
    else if (name == "to") f.to = value;
    else if (name == "from") f.from = value;
    else if (name == "dtype") f.dtype = value;
    else if (name == "tokenizer-type") f.tokenizer_type = value;
    else if (name == "megatron-model") f.megatron_model = value;
    else if (name == "megatron-adam") f.megatron_adam = value;
    else if (name == "ckpt-format") f.ckpt_format = value;
    else if (name == "pipeline-model-parallel-layout") f.uneven.layout = value;
    else if (name == "num-virtual-stages-per-pipeline-rank")
      f.chunks = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
    else if (name == "decoder-first-pipeline-num-layers")
      f.uneven.first_stage_layers = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
    else if (name == "decoder-last-pipeline-num-layers")
      f.uneven.last_stage_layers = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
    else if (name == "iteration" || name == "ckpt-step") {  // --ckpt-step: Megatron's name, as trident-train's
      check_one_iteration_flag(true, f.iteration.has_value());
      f.iteration = parse_integer_flag(name, value, 0, kMaxIterationFlag);
    }
    else if (name == "target-tp") f.target_tp = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
    else if (name == "target-pp") f.target_pp = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
    else if (name == "vocab-size") f.vocab_size = parse_integer_flag(name, value, 1, kMaxInt);
    else if (name == "num-attention-heads")
      f.num_attention_heads = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
    else if (name == "make-vocab-size-divisible-by")
      f.vocab_divisible_by = static_cast<int>(parse_integer_flag(name, value, 1, kMaxInt));
  }
  if (f.help) return f;
  if (f.load.empty()) throw ConfigError("--load: required (the checkpoint to convert)");
  if (f.save.empty()) throw ConfigError("--save: required (where to write)");
  if (!f.to.empty() && f.to != "hf" && f.to != "megatron")
    throw ConfigError("--to: '" + f.to + "' is not a known format (hf, megatron)");
  if (!f.from.empty() && f.from != "hf" && f.from != "megatron")
    throw ConfigError("--from: '" + f.from + "' is not a known format (hf, megatron)");
  if (!f.to.empty() && !f.from.empty()) throw ConfigError("--to and --from are mutually exclusive");
  const auto refuse = [&](std::initializer_list<const char*> flags, const std::string& where, const char* why = "") {
    for (const char* g : flags)
      if (f.given[g]) throw ConfigError(std::string("--") + g + " does not apply to " + where + why);
  };
  if (!f.to.empty()) refuse({"no-optimizer", "overwrite"}, "--to " + f.to);
  if (f.to == "hf") refuse({"target-tp", "target-pp"}, "--to hf");
  if (!f.from.empty())
    refuse({"no-optimizer"}, "--from " + f.from,
           " (an import holds weights only; --from megatron --with-optimizer adds the optimizer state)");
  if (f.given["dtype"] && f.to.empty()) throw ConfigError("--dtype applies to --to hf and --to megatron only");
  for (const char* g : {"tokenizer-type", "megatron-norm-names", "megatron-model", "ckpt-format"})
    if (f.given[g] && f.to != "megatron") throw ConfigError(std::string("--") + g + " applies to --to megatron only");
  for (const char* g : {"num-virtual-stages-per-pipeline-rank", "decoder-first-pipeline-num-layers",
                        "decoder-last-pipeline-num-layers", "account-for-embedding-in-pipeline-split",
                        "account-for-loss-in-pipeline-split", "pipeline-model-parallel-layout"})
    if (f.given[g] && f.to != "megatron")
      throw ConfigError(std::string("--") + g + " applies to --to megatron only (a trident checkpoint loads at any "
                        "pipeline split)");
  if (f.given["pipeline-model-parallel-layout"] && f.given["num-virtual-stages-per-pipeline-rank"])
    throw ConfigError("--pipeline-model-parallel-layout gives the model chunks a stage itself: "
                      "--num-virtual-stages-per-pipeline-rank goes without it");
  if (f.given["megatron-adam"] && !(f.to == "megatron" && f.with_optimizer))
    throw ConfigError("--megatron-adam applies to --to megatron --with-optimizer only");
  if (f.ckpt_format != "torch" && f.ckpt_format != "torch_dist")
    throw ConfigError("--ckpt-format: '" + f.ckpt_format + "' is not a format the export writes (torch, torch_dist)");
  if (f.distributed_optimizer && !(f.to == "megatron" && f.with_optimizer))
    throw ConfigError("--use-distributed-optimizer applies to --to megatron --with-optimizer only");
  if (f.megatron_adam != "fused" && f.megatron_adam != "torch")
    throw ConfigError("--megatron-adam: '" + f.megatron_adam + "' is neither fused nor torch");
  if (f.megatron_model != "legacy" && f.megatron_model != "mcore")
    throw ConfigError("--megatron-model: '" + f.megatron_model + "' is neither legacy nor mcore");
  if (f.megatron_model == "mcore" && f.norm_names)
    throw ConfigError("--megatron-norm-names applies to --megatron-model legacy only (Megatron-core names its norms "
                      "input_layernorm and pre_mlp_layernorm)");
  if (f.given["make-vocab-size-divisible-by"] && f.from != "hf")
    throw ConfigError("--make-vocab-size-divisible-by applies to --from hf only (a checkpoint keeps its own)");
  for (const char* g : {"vocab-size", "num-attention-heads"})
    if (f.given[g] && f.from != "megatron")
      throw ConfigError(std::string("--") + g + " applies to --from megatron only (other sources record it)");
  if (f.with_optimizer && f.from != "megatron" && f.to != "megatron")
    throw ConfigError("--with-optimizer applies to --from megatron and --to megatron only (a trident checkpoint "
                      "converts with its optimizer state unless --no-optimizer; a Hugging Face folder holds weights "
                      "only)");
  if (f.from == "hf" && f.iteration) throw ConfigError(std::string(iteration_flag(f)) + " does not apply to --from hf");
  std::error_code ec;
  if (fs::exists(f.save, ec) && fs::exists(f.load, ec) && fs::equivalent(f.save, f.load, ec))
    throw ConfigError("--save: must not be the --load directory (" + f.save + ")");
  // Nor inside it or around it: the conversion would write into its own source (an
  // iteration folder replaced while read, or a checkpoint nested in one).
  if (nested(f.save, f.load) || nested(f.load, f.save))
    throw ConfigError("--save (" + f.save + ") and --load (" + f.load + ") must not be inside one another");
  return f;
}

// A checkpoint committed into --save moves its latest pointer: refuse a directory that holds
// checkpoints already (a training run's) unless --overwrite says so.
void check_save_holds_no_checkpoint(const ConvertFlags& f) {
  if (f.overwrite) return;
  const fs::path save = f.save;
  std::error_code ec;
  const bool pointer = fs::exists(fs::symlink_status(latest_file(save), ec));
  if (pointer || !list_iterations(save).empty())
    throw ConfigError("--save: " + f.save + " already holds checkpoints (" +
                      (pointer ? std::string(kLatestFileName) : "iter_* folders") +
                      "): converting into it would move its latest pointer; give another directory, or "
                      "--overwrite to replace its iteration of the same number and point its latest there");
}

OfflineLayout target_layout(const ModelConfig& cfg, int tp, int pp) {
  try {
    cfg.validate(tp);
  } catch (const ConfigError& e) {
    throw ConfigError("--target-tp " + std::to_string(tp) + ": " + e.what());
  }
  if (pp > cfg.num_layers)
    throw ConfigError("--target-pp (" + std::to_string(pp) + ") must not exceed the model's " +
                      std::to_string(cfg.num_layers) + " layers");
  return OfflineLayout{tp, pp, {}};
}

// A trident checkpoint -> a trident checkpoint at another layout.
int convert_checkpoint(const ConvertFlags& f) {
  check_save_holds_no_checkpoint(f);
  const fs::path dir = resolve_checkpoint_dir(f.load, f.iteration, iteration_flag(f));
  ShardedCheckpointReader ckpt(dir);
  const CheckpointMetadata& m = ckpt.metadata();
  const bool with_optimizer = !f.no_optimizer;
  if (with_optimizer && !ckpt.has_optimizer_state())
    throw ConfigError("--load: " + dir.string() + " has no optimizer state (add --no-optimizer)");
  const OfflineLayout L = target_layout(m.model, f.target_tp, f.target_pp);
  const fs::path out = write_offline_checkpoint(f.save, m, L, with_optimizer, [&](const std::string& name, const char* state) {
    return state ? ckpt.optimizer_tensor(name, state) : ckpt.model_tensor(name);
  });
  std::cout << "trident-convert: " << dir.string() << " (iteration " << m.iteration << ", " << layout_text(m.layout)
            << ") -> " << out.string() << " (" << layout_text(ParallelLayout{L.tp, L.pp, 1, 0, 1, L.uneven}) << ", "
            << (with_optimizer ? "with" : "without") << " optimizer state)" << std::endl;
  return 0;
}

// The export's dtype: --dtype, else the checkpoint's.
DType export_dtype(const ConvertFlags& f, DType checkpoint_dtype) {
  if (f.dtype.empty()) return checkpoint_dtype;
  if (f.dtype == "fp32") return DType::F32;
  if (f.dtype == "fp16") return DType::F16;
  if (f.dtype == "bf16") return DType::BF16;
  throw ConfigError("--dtype: '" + f.dtype + "' is not fp32, fp16 or bf16");
}

// Every parameter of the checkpoint in the stored form, to be exported as `dtype`. As the
// trainer loads across dtypes: another dtype than a 16-bit checkpoint's is rounded from its
// fp32 master weights when it has them (an fp32 export is then the masters), not from the
// rounded model files.
TensorMap export_tensors(ShardedCheckpointReader& ckpt, DType dtype) {
  const DType own = ckpt.metadata().model.dtype;
  const bool from_masters = ckpt.has_optimizer_state() && own != DType::F32 && dtype != own;
  TensorMap canonical;
  for (const ParamSpec& s : ckpt.specs())
    canonical[s.name] = HostTensor{shape_vec(stored_shape(s)),
                                   from_masters ? ckpt.optimizer_tensor(s.name, "master") : ckpt.model_tensor(s.name)};
  return canonical;
}

// Makes the folder --save (absent or empty) atomically: `write` fills OUT.tmp-* (its files
// made durable), which is synced and renamed to OUT; a failure leaves neither the temporary
// nor the folders made for it.
// The folder --save names; ConfigError unless it is absent or an empty directory. The exports
// call it before reading the checkpoint too, so that a wrong --save fails at once.
fs::path check_new_folder(const ConvertFlags& f) {
  const fs::path out = fs::path(f.save).lexically_normal();
  const fs::path final_dir = out.filename().empty() ? out.parent_path() : out;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(final_dir, ec))) {
    if (!fs::is_directory(final_dir, ec) || !fs::is_empty(final_dir, ec))
      throw ConfigError("--save: " + final_dir.string() + " already exists and is not an empty directory");
  }
  return final_dir;
}

fs::path write_new_folder(const ConvertFlags& f, const std::function<void(const fs::path& temp)>& write) {
  const fs::path final_dir = check_new_folder(f);
  std::error_code ec;
  const fs::path parent = final_dir.parent_path().empty() ? fs::path(".") : final_dir.parent_path();
  OutputWriteGuard guard;
  guard.created = missing_directories(parent);
  fs::create_directories(parent, ec);
  if (ec) throw_write_failure(parent.string() + ": cannot create directory: " + ec.message(), ec.value());
  for (const fs::path& stale : remove_dead_writers_output_temporaries(final_dir))
    std::cout << "trident-convert: removed " << stale.string() << ", left by an export whose process is gone"
              << std::endl;
  guard.temp = parent / (final_dir.filename().string() + ".tmp-" + make_save_token());
  write(guard.temp);
  fsync_dir(guard.temp.string());
  if (fs::exists(final_dir, ec)) fs::remove(final_dir, ec);  // the empty directory checked above
  if (::rename(guard.temp.c_str(), final_dir.c_str()) != 0) {
    const int err = errno;
    throw_write_failure(final_dir.string() + ": cannot rename " + guard.temp.string() + " to it: " + std::strerror(err),
                        err);
  }
  guard.released = true;
  fsync_dir(parent.string());
  return final_dir;
}

// A trident checkpoint -> a Hugging Face folder.
int export_hf(const ConvertFlags& f) {
  check_new_folder(f);
  const fs::path dir = resolve_checkpoint_dir(f.load, f.iteration, iteration_flag(f));
  ShardedCheckpointReader ckpt(dir);
  const ModelConfig& cfg = ckpt.metadata().model;
  const DType dtype = export_dtype(f, cfg.dtype);
  const TensorMap canonical = export_tensors(ckpt, dtype);
  const fs::path out = write_new_folder(f, [&](const fs::path& temp) {
    export_hf_gpt2(temp.string(), cfg, canonical, to_st_dtype(dtype));
  });
  std::cout << "trident-convert: " << dir.string() << " (iteration " << ckpt.metadata().iteration
            << ") -> Hugging Face GPT2LMHeadModel " << out.string() << " (" << st_dtype_name(to_st_dtype(dtype)) << ")"
            << std::endl;
  return 0;
}

// The samples a run's --skip-train-iteration-range read past, which Megatron's checkpoints have
// no place for: its data position is its consumed samples alone.
std::string read_past_note(const nlohmann::json& trainer_state) {
  const uint64_t past = trainer_state.value(kSkippedRangeSamplesKey, uint64_t{0});
  if (past == 0) return "";
  return "; note: the run read " + std::to_string(past) + " samples past (--skip-train-iteration-range), which "
         "Megatron does not count: it reads its data from the consumed samples, " + std::to_string(past) +
         " behind";
}

// A trident checkpoint -> a Megatron-LM release checkpoint (weights) at --target-tp x --target-pp.
int export_megatron(const ConvertFlags& f) {
  check_new_folder(f);
  const fs::path dir = resolve_checkpoint_dir(f.load, f.iteration, iteration_flag(f));
  ShardedCheckpointReader ckpt(dir);
  const CheckpointMetadata& m = ckpt.metadata();
  MegatronExportOptions o;
  o.tp = f.target_tp;
  o.pp = f.target_pp;
  o.uneven = f.uneven;
  o.chunks = f.chunks;
  if (!f.uneven.layout.empty()) o.chunks = pipeline_layout_chunks(f.uneven.layout, o.pp);
  o.dtype = export_dtype(f, m.model.dtype);
  o.norm_names = f.norm_names;
  o.mcore = f.megatron_model == "mcore";
  o.adam = f.megatron_adam == "torch" ? MegatronAdam::kTorch : MegatronAdam::kFused;
  o.torch_dist = f.ckpt_format == "torch_dist";
  o.distributed_optimizer = f.distributed_optimizer;
  o.tokenizer_type = f.tokenizer_type;
  o.iteration = m.iteration;
  o = check_megatron_export(m.model, o);  // before reading the tensors
  if (f.with_optimizer && !ckpt.has_optimizer_state())
    throw ConfigError("--with-optimizer: " + dir.string() + " holds no optimizer state (saved with --no-save-optim, "
                      "or a conversion without it)");
  if (f.with_optimizer) megatron::check_exportable_state(m.trainer_state, o.mcore);
  const TensorMap canonical = export_tensors(ckpt, o.dtype);
  std::optional<MegatronTrainingState> training;
  if (f.with_optimizer) {
    training.emplace();
    for (const ParamSpec& s : ckpt.specs()) {
      const std::vector<int64_t> shape = shape_vec(stored_shape(s));
      training->master[s.name] = HostTensor{shape, ckpt.optimizer_tensor(s.name, "master")};
      training->exp_avg[s.name] = HostTensor{shape, ckpt.optimizer_tensor(s.name, "exp_avg")};
      training->exp_avg_sq[s.name] = HostTensor{shape, ckpt.optimizer_tensor(s.name, "exp_avg_sq")};
    }
    training->consumed_samples = m.consumed_samples;
    training->trainer_state = m.trainer_state;
    o.training = &*training;
  }
  const fs::path out = write_new_folder(f, [&](const fs::path& temp) { export_megatron_gpt2(temp, m.model, canonical, o); });
  std::cout << "trident-convert: " << dir.string() << " (iteration " << m.iteration << ") -> Megatron-LM "
            << (training ? iteration_dir(out, m.iteration) : out / "release").string() << " ("
            << (o.mcore ? "Megatron-core GPTModel, local layers" : "legacy model")
            << (o.torch_dist ? ", --ckpt-format torch_dist" : "") << ", tp " << o.tp << " x pp "
            << o.pp << ", " << pipeline_split_text(PipelineSplit{m.model.num_layers, o.pp, o.chunks, o.uneven}) << ", "
            << dtype_name(o.dtype) << ", "
            << (m.model.gelu == Gelu::Erf ? "the erf GELU: train with --no-bias-gelu-fusion, " : "")
            << (training ? "with the optimizer state after " + std::to_string(m.trainer_state.value("optimizer_steps",
                                                                                                   int64_t{0})) +
                               " Adam steps, " + std::to_string(m.consumed_samples) +
                               " samples consumed" +
                               (o.distributed_optimizer ? std::string(" (distributed optimizer, fully_reshardable)") : "") +
                               ": resume with --no-load-rng" + read_past_note(m.trainer_state)
                         : std::string("weights only"))
            << ")" << std::endl;
  return 0;
}

// Writes an import (iteration 0, no optimizer state) at --target-tp x --target-pp; returns its
// folder and layout.
// Writes an import at `target`: at iteration 0 without optimizer state, or, given `training`
// (a Megatron import's), at the source's iteration with its optimizer state.
std::pair<fs::path, OfflineLayout> write_import(const ConvertFlags& f, const ModelConfig& model, const TensorMap& tensors,
                                                nlohmann::json source, int64_t iteration = 0,
                                                const MegatronTrainingState* training = nullptr) {
  CheckpointMetadata m;
  m.model = model;
  m.iteration = training ? iteration : 0;
  m.consumed_samples = training ? training->consumed_samples : 0;
  m.trainer_state = std::move(source);
  if (training) m.trainer_state.update(training->trainer_state);
  const OfflineLayout L = target_layout(m.model, f.target_tp, f.target_pp);
  const auto tensor_of = [&](const std::string& name, const char* state) {
    if (!state) return tensors.at(name).data;
    if (!training) throw InternalError("import has no optimizer state");
    const std::string s = state;
    const TensorMap& from =
        s == "master" ? training->master : s == "exp_avg" ? training->exp_avg : training->exp_avg_sq;
    return from.at(name).data;
  };
  const fs::path out = write_offline_checkpoint(f.save, m, L, training != nullptr, tensor_of);
  return {out, L};
}

// A Hugging Face folder -> a trident checkpoint at iteration 0 without optimizer state.
int import_hf(const ConvertFlags& f) {
  check_load_is_directory(f.load);
  check_save_holds_no_checkpoint(f);
  const HfGpt2Model hf = import_hf_gpt2(f.load, f.vocab_divisible_by);
  const auto [out, L] = write_import(f, hf.config, hf.tensors, {{"imported_from", "hf"}});
  std::cout << "trident-convert: Hugging Face " << f.load << " (" << hf.config.num_layers << " layers, hidden "
            << hf.config.hidden_size << ", vocab " << hf.config.vocab_size
            << (hf.config.gelu == Gelu::Erf ? ", erf GELU" : "") << ") -> " << out.string() << " ("
            << layout_text(ParallelLayout{L.tp, L.pp, 1, 0, 1, L.uneven}) << ", without optimizer state)" << std::endl;
  return 0;
}

// A Megatron-LM or Megatron-DeepSpeed checkpoint -> a trident checkpoint at iteration 0 without
// optimizer state, or (--with-optimizer) at its iteration with it.
int import_megatron(const ConvertFlags& f) {
  check_save_holds_no_checkpoint(f);
  MegatronImportOptions o;
  o.iteration = f.iteration;
  o.vocab_size = f.vocab_size;
  o.num_attention_heads = f.num_attention_heads;
  o.iteration_flag = iteration_flag(f);
  o.with_optimizer = f.with_optimizer;
  const MegatronGpt2Model mg = import_megatron_gpt2(f.load, o);
  const ModelConfig& cfg = mg.config;
  const MegatronTrainingState* training = mg.training ? &*mg.training : nullptr;
  const auto [out, L] = write_import(
      f, cfg, mg.tensors,
      {{"imported_from", "megatron"}, {"source_format", mg.flavour}, {"source_iteration", mg.iteration}},
      mg.iteration, training);
  std::cout << "trident-convert: " << mg.flavour << " " << mg.dir.string() << " (iteration " << mg.iteration << ", tp "
            << mg.tp << " x pp " << mg.pp << (mg.virtual_chunks > 1 ? " x " + std::to_string(mg.virtual_chunks) + " virtual" : "")
            << "; " << cfg.num_layers << " layers, hidden " << cfg.hidden_size << ", heads " << cfg.num_attention_heads
            << ", vocab " << cfg.vocab_size << ", " << dtype_name(cfg.dtype)
            << (cfg.gelu == Gelu::Erf ? ", erf GELU" : "") << ") -> "
            << out.string() << " (" << layout_text(ParallelLayout{L.tp, L.pp, 1, 0, 1, L.uneven})
            << (training ? ", iteration " + std::to_string(mg.iteration) + " with the optimizer state after " +
                               training->trainer_state["optimizer_steps"].dump() + " Adam steps"
                         : ", without optimizer state")
            << ")" << std::endl;
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_tool("trident-convert", [&] {
    const trident::ConvertFlags f = trident::parse_flags(argc, argv);
    if (f.help) {
      std::cout << trident::kUsage;
      return 0;
    }
    if (f.to == "hf") return trident::export_hf(f);
    if (f.to == "megatron") return trident::export_megatron(f);
    if (f.from == "hf") return trident::import_hf(f);
    if (f.from == "megatron") return trident::import_megatron(f);
    return trident::convert_checkpoint(f);
  });
}
