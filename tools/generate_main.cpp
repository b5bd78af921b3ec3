// trident-generate: text from a checkpoint, in one process, on the CPU or a GPU. The
// checkpoint may come from any layout (its canonical tensors are read at tp 1); the model's
// shape and dtype come from its metadata.json.
//
//   trident-generate --load DIR --vocab-file V --merge-file M [--prompt TEXT ...]
//       [--sample-input-file F] [--num-samples N] [--out-seq-length N] [--temperature T]
//       [--top-k K] [--top-p P] [--greedy] [--seed S] [--device D] [--sample-output-file F]
//
// With prompts (--prompt, repeatable, and/or one per line of --sample-input-file), each is
// continued in turn; without, --num-samples unconditional samples start from
// <|endoftext|> as Megatron's unconditional generation does, decoded --batch-size at a time
// (--num-samples above 0 with prompts is an error; 0 is Megatron's prompt mode).
// A sample ends at <|endoftext|> (unless --ignore-eos), after --out-seq-length tokens, or at
// the model's last position. Samples go to stdout; --sample-output-file also writes them as
// JSON lines {"prompt", "text", "tokens"} (written whole or not at all, and checked to be
// writable before the checkpoint is read).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ckpt/atomic_file.h"
#include "ckpt/offline_checkpoint.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/decoder.h"
#include "infer/sampler.h"
#include "kernels/backends.h"
#include "model/param_spec.h"
#include "model/param_store.h"
#include "tools/cxxopts_flags.h"
#include "tools/tool_main.h"

namespace trident {
namespace {
namespace fs = std::filesystem;

constexpr long long kMaxCount = 1ll << 40;

struct Sample {
  std::string prompt;              // empty: unconditional
  std::vector<int32_t> generated;  // the new tokens (without a final <|endoftext|>)
};

struct Prompt {
  std::string text;
  std::string where;  // for errors: "--prompt (#2)" or "--sample-input-file F line 3"
};

// One prompt per line; as in the JSONL reader, a line loses one trailing '\r' (a file with
// Windows line ends) and then an empty line is skipped.
std::vector<Prompt> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("--sample-input-file: cannot read " + path);
  std::vector<Prompt> prompts;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back({line, "--sample-input-file " + path + " line " + std::to_string(line_no)});
  }
  if (prompts.empty()) throw ConfigError("--sample-input-file: " + path + " holds no prompt");
  return prompts;
}

// The name under which the command line gave a flag that has two spellings (ours, and
// Megatron's with '_'); both at once is an error naming both, rather than one silently winning.
std::string one_spelling(const cxxopts::ParseResult& r, const std::string& dashed, const std::string& megatron) {
  if (r.count(dashed) && r.count(megatron))
    throw ConfigError("--" + dashed + " and --" + megatron + " are the same flag: give one of them");
  return r.count(megatron) ? megatron : dashed;
}

// --num-samples N > 0 asks for unconditional samples, which prompts rule out: the two
// together are an error rather than one being silently ignored (Megatron's
// generate_samples_gpt.py ignores the prompt file when --num-samples is above 0). 0 is
// Megatron's default, its prompt mode: accepted with prompts, an error without (Megatron
// would turn interactive). Returns the number of unconditional samples (1 by default).
int64_t num_samples_flag(const cxxopts::ParseResult& r) {
  const bool has_prompts = r.count("prompt") || r.count("sample-input-file");
  if (!r.count("num-samples")) return has_prompts ? 0 : 1;
  const int64_t n = integer_flag(r, "num-samples", 0, kMaxCount);
  for (const char* prompts : {"prompt", "sample-input-file"})
    if (n > 0 && r.count(prompts))
      throw ConfigError(std::string("--num-samples (unconditional samples) cannot be combined with --") + prompts);
  if (n == 0 && !has_prompts)
    throw ConfigError("--num-samples 0 (prompt mode) needs --prompt or --sample-input-file");
  return n;
}

// Fails now, naming --sample-output-file, where writing `path` after generation would fail:
// an empty name, a directory, a folder that does not exist, or one where no file can be
// created (tried with the temporary file the final write uses, removed at once).
void check_output_file(const std::string& path) {
  const std::string flag = "--sample-output-file: ";
  if (path.empty()) throw ConfigError(flag + "empty file name");
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(flag + path + " is a directory");
  if (!fs::is_directory(dir, ec)) throw ConfigError(flag + path + ": no directory " + dir.string());
  try {
    AtomicFileWriter probe(path);  // its destructor removes the temporary file
  } catch (const IoError& e) {
    throw ConfigError(flag + e.what());
  }
}

int generate_main(int argc, char** argv) {
  cxxopts::Options o("trident-generate", "Generate text from a trident checkpoint");
  o.add_options()
      ("load", "checkpoint directory (its latest iteration) or one iter_NNNNNNN folder", cxxopts::value<std::string>())
      ("iteration", "use DIR/iter_N instead of the latest", cxxopts::value<std::string>())
      ("vocab-file", "gpt2-vocab.json", cxxopts::value<std::string>())
      ("merge-file", "gpt2-merges.txt", cxxopts::value<std::string>())
      ("prompt", "text to continue (repeatable)", cxxopts::value<std::vector<std::string>>())
      ("sample-input-file", "prompts, one per line", cxxopts::value<std::string>())
      ("sample-output-file", "also write the samples here as JSON lines", cxxopts::value<std::string>())
      ("num-samples", "unconditional samples (1); with --prompt or --sample-input-file only 0, Megatron's prompt mode",
       cxxopts::value<std::string>()->default_value("1"))
      ("batch-size", "unconditional samples decoded together (8)", cxxopts::value<std::string>()->default_value("8"))
      ("out-seq-length", "most tokens generated per sample (128)", cxxopts::value<std::string>()->default_value("128"))
      ("temperature", "softmax temperature (1.0; 0: greedy)", cxxopts::value<std::string>()->default_value("1.0"))
      ("top-k", "sample among the k most likely tokens (0: all)", cxxopts::value<std::string>()->default_value("0"))
      ("top_k", "Megatron's spelling of --top-k", cxxopts::value<std::string>())
      ("top-p", "sample among the most likely tokens, each while those before it have at most p (0: all)",
       cxxopts::value<std::string>()->default_value("0"))
      ("top_p", "Megatron's spelling of --top-p", cxxopts::value<std::string>())
      ("greedy", "always the most likely token")
      ("ignore-eos", "keep generating after <|endoftext|>")
      ("seed", "random seed (1234)", cxxopts::value<std::string>()->default_value("1234"))
      ("device", "auto, cpu or cuda", cxxopts::value<std::string>()->default_value("auto"))
      ("h,help", "show this help");
  const cxxopts::ParseResult r = parse_flags(o, argc, argv);
  if (r.count("help")) {
    std::printf("%s\n", o.help().c_str());
    return 0;
  }
  const std::string load = required_flag(r, "load");
  const std::string vocab = required_flag(r, "vocab-file"), merges = required_flag(r, "merge-file");
  SamplingOptions so;
  so.greedy = r.count("greedy") > 0;
  so.temperature = number_flag(r, "temperature");
  so.top_k = static_cast<int>(integer_flag(r, one_spelling(r, "top-k", "top_k"), 0, INT32_MAX));
  so.top_p = number_flag(r, one_spelling(r, "top-p", "top_p"));
  validate_sampling(so);
  const int64_t num_samples = num_samples_flag(r);
  if (r.count("sample-output-file")) check_output_file(r["sample-output-file"].as<std::string>());
  const int64_t out_len = integer_flag(r, "out-seq-length", 1, kMaxCount);
  const int batch = static_cast<int>(integer_flag(r, "batch-size", 1, 4096));
  const bool ignore_eos = r.count("ignore-eos") > 0;
  std::vector<Prompt> prompts;
  if (r.count("prompt")) {
    const auto given = r["prompt"].as<std::vector<std::string>>();
    for (size_t i = 0; i < given.size(); ++i)
      prompts.push_back({given[i], given.size() > 1 ? "--prompt (#" + std::to_string(i + 1) + ")" : "--prompt"});
  }
  if (r.count("sample-input-file")) {
    const auto more = read_prompts(r["sample-input-file"].as<std::string>());
    prompts.insert(prompts.end(), more.begin(), more.end());
  }
  std::optional<int64_t> iteration;
  if (r.count("iteration")) iteration = integer_flag(r, "iteration", 0, kMaxIterationFlag);

  auto tokenizer = make_tokenizer("GPT2BPETokenizer", vocab, merges);
  fs::path dir;
  std::unique_ptr<ShardedCheckpointReader> ckpt;
  try {
    dir = resolve_checkpoint_dir(load, iteration);
    ckpt = std::make_unique<ShardedCheckpointReader>(dir);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  ModelConfig cfg = ckpt->metadata().model;
  if (cfg.vocab_size != tokenizer->vocab_size())
    throw ConfigError("--vocab-file: the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                      " tokens but the checkpoint's model " + std::to_string(cfg.vocab_size) + " (" + dir.string() + ")");
  auto backend = make_backend(r["device"].as<std::string>());
  ParamStore params(*backend, gpt2_param_specs(cfg, 1), 1, 0, cfg.dtype, cfg.dtype,
                    [](const ParamSpec&) { return true; });
  load_model_parameters(*ckpt, params, *backend);
  const int max_pos = cfg.max_position_embeddings;
  const int32_t eod = tokenizer->eod();
  std::mt19937_64 rng(static_cast<uint64_t>(integer_flag(r, "seed", 0, kMaxCount)));

  // Every prompt is tokenized and checked before anything is generated, and a prompt that
  // leaves no room is named by where it came from.
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const Prompt& p : prompts) {
    std::vector<int32_t> ids = tokenizer->encode(p.text);
    if (ids.empty()) ids.push_back(eod);  // an empty prompt: unconditional
    if (static_cast<int64_t>(ids.size()) >= max_pos)
      throw ConfigError(p.where + ": " + std::to_string(ids.size()) + " tokens leave no room in the model's " +
                        std::to_string(max_pos) + " positions");
    prompt_ids.push_back(std::move(ids));
  }

  // Decodes `contexts` together (same length) and appends the continuations to `out`.
  auto run = [&](const std::vector<std::vector<int32_t>>& contexts, std::vector<Sample>& out) {
    const int B = static_cast<int>(contexts.size());
    const int64_t ctx = static_cast<int64_t>(contexts[0].size());
    TRIDENT_CHECK(ctx < max_pos, "context of ", ctx, " tokens for ", max_pos, " positions");
    Gpt2Decoder dec(cfg, *backend, params, B, static_cast<int>(std::min<int64_t>(max_pos, ctx + out_len)));
    std::vector<int32_t> feed(B);
    const std::vector<float>* logits = nullptr;
    for (int64_t t = 0; t < ctx; ++t) {  // the context, one position at a time
      for (int b = 0; b < B; ++b) feed[b] = contexts[b][t];
      logits = &dec.step(feed);
    }
    const size_t first = out.size();
    out.resize(first + B);
    std::vector<bool> done(B, false);
    for (int64_t n = 0; n < out_len; ++n) {
      for (int b = 0; b < B; ++b) {
        if (done[b]) {
          feed[b] = eod;  // a finished sequence keeps step() fed; its tokens are dropped
          continue;
        }
        feed[b] = sample_token(logits->data() + static_cast<int64_t>(b) * cfg.vocab_size, cfg.vocab_size, so, rng);
        if (feed[b] == eod && !ignore_eos)
          done[b] = true;
        else
          out[first + b].generated.push_back(feed[b]);
      }
      const bool all_done = std::all_of(done.begin(), done.end(), [](bool d) { return d; });
      if (all_done || n + 1 == out_len || dec.position() >= dec.max_positions()) break;
      logits = &dec.step(feed);
    }
  };

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Sample> samples;
  if (!prompts.empty()) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      run({prompt_ids[i]}, samples);
      samples.back().prompt = prompts[i].text;
    }
  } else {
    for (int64_t done = 0; done < num_samples; done += batch) {
      const int64_t b = std::min<int64_t>(batch, num_samples - done);
      run(std::vector<std::vector<int32_t>>(static_cast<size_t>(b), {eod}), samples);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::string jsonl;
  int64_t tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    const std::string text = tokenizer->decode(s.generated);
    tokens += static_cast<int64_t>(s.generated.size());
    std::cout << "=== sample " << i + 1 << (s.prompt.empty() ? " (unconditional)" : "") << " ===\n"
              << s.prompt << text << "\n";
    jsonl += nlohmann::json{{"prompt", s.prompt}, {"text", text}, {"tokens", s.generated.size()}}.dump(
                 -1, ' ', false, nlohmann::json::error_handler_t::replace) +
             "\n";
  }
  std::cout.flush();
  if (r.count("sample-output-file")) {  // whole or not at all
    try {
      write_file_atomic(r["sample-output-file"].as<std::string>(), jsonl);
    } catch (const IoError& e) {
      throw ConfigError(std::string("--sample-output-file: ") + e.what());
    }
  }
  std::fprintf(stderr, "trident-generate: %zu samples, %lld tokens in %.2f s (%.1f tokens/s) from %s on %s\n",
               samples.size(), static_cast<long long>(tokens), seconds, seconds > 0 ? tokens / seconds : 0.0,
               dir.string().c_str(), backend->name().c_str());
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_tool("trident-generate", [&] { return trident::generate_main(argc, argv); });
}
