// The model trident-generate and trident-text-generation-server decode with: the
// checkpoint (--load, --iteration or Megatron's --ckpt-step), the tokenizer (GPT-2's
// --vocab-file and --merge-file, or NullTokenizer's --vocab-size), the device (--device) and the tensor-parallel layout (one
// process per TP rank, generate_model_flags.h), loaded the same way for both.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/offline_checkpoint.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "kernels/backends.h"
#include "model/param_spec.h"
#include "model/param_store.h"
#include "parallel/parallel_context.h"
#include "tools/cxxopts_flags.h"
#include "tools/generate_model_flags.h"
#include "tools/integer_flag.h"
#include "tools/mpi_tool_main.h"

namespace trident {

// `seq_length_default`: --seq-length's default, in words.
inline void add_generation_model_flags(cxxopts::Options& o, const std::string& seq_length_default) {
  o.add_options()
      ("load", "checkpoint directory (its latest iteration) or one iter_NNNNNNN folder", cxxopts::value<std::string>())
      ("iteration", "use DIR/iter_N instead of the latest", cxxopts::value<std::string>())
      ("ckpt-step", "the same as --iteration (Megatron's name)", cxxopts::value<std::string>())
      ("vocab-file", "GPT-2's vocabulary (gpt2-vocab.json; required for GPT2BPETokenizer)",
       cxxopts::value<std::string>())
      ("merge-file", "GPT-2's merges (gpt2-merges.txt; required for GPT2BPETokenizer)", cxxopts::value<std::string>())
      ("seed", "random seed (1234)", cxxopts::value<std::string>()->default_value("1234"))
      ("device", "auto, cpu or cuda", cxxopts::value<std::string>()->default_value("auto"));
  add_model_flags(o, seq_length_default);
  o.add_options("Megatron's, accepted (the model's shape and only its weights come from the checkpoint)")
      ("use-checkpoint-args", "the shape from the checkpoint (always)")
      ("no-load-optim", "no optimizer state (never loaded)")
      ("no-load-rng", "no RNG state (never loaded)");
}

// The model flags, checked against the job before anything is read: one process per
// tensor-parallel rank, or a lone process, never N copies of one run (`tool` names the
// command in the error).
inline ModelFlags read_generation_model_flags(const cxxopts::ParseResult& r, const char* tool) {
  ModelFlags f = read_model_flags(r, tool);
  if (job_world_size() != f.tp)
    throw ConfigError("--tensor-model-parallel-size " + std::to_string(f.tp) + ": the job has " +
                      std::to_string(job_world_size()) + (job_world_size() == 1 ? " process" : " processes") +
                      "; " + tool + " runs one per tensor-parallel rank (mpirun -np N ... "
                      "--tensor-model-parallel-size N)");
  required_flag(r, "load");
  if (f.tokenizer_type == "GPT2BPETokenizer") {  // (NullTokenizer reads no files: given ones are ignored, as by Megatron)
    required_flag(r, "vocab-file");
    required_flag(r, "merge-file");
  }
  check_one_iteration_flag(r.count("ckpt-step") > 0, r.count("iteration") > 0);
  return f;
}

struct GenerationModel {
  std::filesystem::path dir;  // the iter_N folder read
  ModelConfig cfg;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ParallelContext> parallel;
  std::unique_ptr<ParamStore> params;  // this rank's share; declared after what it uses
  Comm* tp_comm = nullptr;             // the TP group at tp > 1
  bool rank0() const { return parallel->world_rank() == 0; }
};

// The checkpoint's model at the flags' tensor-parallel size, on --device; its sequence
// length --seq-length's, else the checkpoint's. `shared_flags` ("--flag value" lines): what
// every rank must have been given, compared before the ranks split into groups
// (make_parallel_context): ranks that decode other prompts or draw otherwise would run their
// tensor-parallel collectives out of step.
inline GenerationModel load_generation_model(const cxxopts::ParseResult& r, const ModelFlags& f,
                                             const std::string& shared_flags = "") {
  std::optional<int64_t> iteration;
  if (r.count("iteration")) iteration = integer_flag(r, "iteration", 0, kMaxIterationFlag);
  if (r.count("ckpt-step")) iteration = integer_flag(r, "ckpt-step", 0, kMaxIterationFlag);
  GenerationModel m;
  const auto file = [&](const char* flag) {
    return r.count(flag) && !f.null_vocab_size ? r[flag].as<std::string>() : std::string();
  };
  m.tokenizer = make_tokenizer(f.tokenizer_type, file("vocab-file"), file("merge-file"), f.null_vocab_size);
  std::unique_ptr<ShardedCheckpointReader> ckpt;
  try {
    m.dir = resolve_checkpoint_dir(r["load"].as<std::string>(), iteration,
                                   r.count("ckpt-step") ? "--ckpt-step" : "--iteration");
    ckpt = std::make_unique<ShardedCheckpointReader>(m.dir);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  m.cfg = ckpt->metadata().model;
  check_model_flags(f, m.cfg, (m.dir / "metadata.json").string());
  if (m.cfg.vocab_size != m.tokenizer->vocab_size())
    throw ConfigError(std::string(f.null_vocab_size ? "--vocab-size" : "--vocab-file") + ": the tokenizer has " +
                      std::to_string(m.tokenizer->vocab_size()) + " tokens but the checkpoint's model " +
                      std::to_string(m.cfg.vocab_size) + " (" + m.dir.string() + ")");
  m.cfg.validate(f.tp);
  m.backend = make_backend(r["device"].as<std::string>());
  m.parallel = make_parallel_context(f.tp, 1, resolve_comm_kind("", *m.backend), m.backend.get(), shared_flags);
  m.params = std::make_unique<ParamStore>(*m.backend, gpt2_param_specs(m.cfg, f.tp), f.tp, m.parallel->grid.tp_rank,
                                          m.cfg.dtype, m.cfg.dtype, [](const ParamSpec&) { return true; });
  load_model_parameters(*ckpt, *m.params, *m.backend);
  m.tp_comm = f.tp > 1 ? m.parallel->tp.get() : nullptr;
  return m;
}

}  // namespace trident
