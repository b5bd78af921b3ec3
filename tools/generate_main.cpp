// trident-generate: text from a checkpoint, on the CPU or a GPU, in one process or one per
// tensor-parallel rank (mpirun -np N ... --tensor-model-parallel-size N: each rank holds its
// share of the model, as in training, for a model too large for one device). The checkpoint
// may come from any layout (its canonical tensors are read at the run's tp); the model's
// shape and dtype come from its metadata.json.
//
//   trident-generate --load DIR (--vocab-file V --merge-file M | --tokenizer-type NullTokenizer --vocab-size V)
//       [--prompt TEXT ...]
//       [--sample-input-file F] [--num-samples N] [--out-seq-length N] [--temperature T]
//       [--top-k K] [--top-p P] [--greedy] [--seed S] [--device D] [--sample-output-file F]
//       [--genfile F] [--batch-size|--micro-batch-size B]
//
// With prompts (--prompt, repeatable, and/or one per line of --sample-input-file), each is
// continued in turn; without, --num-samples unconditional samples start from
// <|endoftext|> as Megatron's unconditional generation does, decoded --batch-size
// (Megatron's --micro-batch-size) at a time (--num-samples above 0 with prompts is an
// error; 0 is Megatron's prompt mode). A sample ends at <|endoftext|> (unless
// --ignore-eos), after --out-seq-length tokens, or when prompt + generated tokens fill the
// model's sequence length (csrc/infer/generate.h). Samples go to stdout;
// --sample-output-file also writes them as JSON lines {"prompt", "text", "tokens"}, and
// --genfile writes unconditional samples as Megatron's JSON lines (genfile_line). Output
// files are written whole or not at all, and checked to be writable before the
// checkpoint is read.
//
// Megatron's generation flags are accepted: the model-shape flags when they equal the
// checkpoint's (generate_model_flags.h), and --recompute, which changes nothing (trident
// always decodes with a key/value cache; recomputing gives the same tokens). Under mpirun
// the processes must be the tensor-parallel ranks (pipeline parallelism is not supported
// here): -np N without --tensor-model-parallel-size N stops with one line instead of
// running N copies. Rank 0 prints and writes the samples.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/atomic_file.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/sampler.h"
#include "infer/text_generation_service.h"
#include "tools/cxxopts_flags.h"
#include "tools/generation_model.h"
#include "tools/mpi_tool_main.h"

namespace trident {
namespace {
namespace fs = std::filesystem;

constexpr long long kMaxCount = 1ll << 40;

struct Sample {
  std::string prompt;  // empty: unconditional
  Continuation continuation;
};

struct Prompt {
  std::string text;
  std::string where;  // for errors: "--prompt (#2)" or "--sample-input-file F line 3"
};

// One prompt per line; as in the JSONL reader, a line loses one trailing '\r' (a file with
// Windows line ends) and then an empty line is skipped.
std::vector<Prompt> read_prompts(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("--sample-input-file: " + path + " is a directory, not a file of prompts");
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

// Fails now, naming `flag`, where writing `path` after generation would fail: an empty
// name, a directory, a folder that does not exist, or one where no file can be created
// (tried with the temporary file the final write uses, removed at once).
void check_output_file(const std::string& flag, const std::string& path) {
  const std::string name = "--" + flag + ": ";
  if (path.empty()) throw ConfigError(name + "empty file name");
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(name + path + " is a directory");
  if (!fs::is_directory(dir, ec)) throw ConfigError(name + path + ": no directory " + dir.string());
  try {
    AtomicFileWriter probe(path);  // its destructor removes the temporary file
  } catch (const IoError& e) {
    throw_for_flag(name, e);
  }
}

// Two of these flags naming one file would have one output overwrite the other, or the
// output the prompts it was read from: refused before anything runs.
void check_distinct_files(const cxxopts::ParseResult& r, std::initializer_list<const char*> flags) {
  std::vector<std::pair<const char*, fs::path>> seen;
  for (const char* flag : flags) {
    if (!r.count(flag)) continue;
    std::error_code ec;
    const fs::path path = fs::weakly_canonical(r[flag].as<std::string>(), ec);
    for (const auto& [other, other_path] : seen)
      if (!ec && path == other_path)
        throw ConfigError("--" + std::string(other) + " and --" + flag + " name the same file " +
                          r[flag].as<std::string>() + ": give each its own");
    if (!ec) seen.emplace_back(flag, path);
  }
}

void write_output_file(const std::string& flag, const std::string& path, const std::string& text) {
  try {
    write_file_atomic(path, text);
  } catch (const IoError& e) {
    throw_for_flag("--" + flag + ": ", e);
  }
}

std::string json_line(const nlohmann::json& j) { return response_body(j) + "\n"; }

// One line of Megatron's --genfile (megatron/text_generation_utils.py,
// generate_samples_unconditional): {"text", "length", "finished"}. Here "length" counts the
// tokens of "text" and "finished" says the sample ended at <|endoftext|> rather than at
// --out-seq-length or the sequence length. (Megatron's lines are off at the edges: its text
// drops the last generated token, and any sample shorter than seq_length - 1 is
// "finished", one cut by --out-seq-length included.)
std::string genfile_line(const std::string& text, const Continuation& c) {
  return json_line({{"text", text}, {"length", c.tokens.size()}, {"finished", c.finished}});
}

int generate_main(int argc, char** argv) {
  cxxopts::Options o("trident-generate", "Generate text from a trident checkpoint");
  o.add_options()
      ("prompt", "text to continue (repeatable; commas are part of the text)", cxxopts::value<std::string>())
      ("sample-input-file", "prompts, one per line", cxxopts::value<std::string>())
      ("sample-output-file", "also write the samples here as JSON lines", cxxopts::value<std::string>())
      ("genfile", "write the unconditional samples here as Megatron's JSON lines {text, length, finished}",
       cxxopts::value<std::string>())
      ("num-samples", "unconditional samples (1); with --prompt or --sample-input-file only 0, Megatron's prompt mode",
       cxxopts::value<std::string>()->default_value("1"))
      ("batch-size", "unconditional samples decoded together (8)", cxxopts::value<std::string>()->default_value("8"))
      ("micro-batch-size", "Megatron's name for --batch-size", cxxopts::value<std::string>())
      ("out-seq-length", "most tokens generated per sample (128); prompt + generated stop at the model's "
       "sequence length", cxxopts::value<std::string>()->default_value("128"))
      ("temperature", "softmax temperature (1.0; 0: greedy)", cxxopts::value<std::string>()->default_value("1.0"))
      ("top-k", "sample among the k most likely tokens (0: all)", cxxopts::value<std::string>()->default_value("0"))
      ("top_k", "Megatron's spelling of --top-k", cxxopts::value<std::string>())
      ("top-p", "sample among the most likely tokens, each while those before it have at most p (0: all)",
       cxxopts::value<std::string>()->default_value("0"))
      ("top_p", "Megatron's spelling of --top-p", cxxopts::value<std::string>())
      ("greedy", "always the most likely token")
      ("ignore-eos", "keep generating after <|endoftext|>")
      ("recompute", "Megatron's: recompute instead of a key/value cache; accepted and ignored (the same tokens)")
      ("h,help", "show this help");
  add_generation_model_flags(o, "the checkpoint's sequence length");
  const cxxopts::ParseResult r = parse_flags(o, argc, argv);
  if (r.count("help")) {
    std::printf("%s\n", o.help().c_str());
    return 0;
  }
  const ModelFlags model_flags = read_generation_model_flags(r, "trident-generate");
  GenerationOptions go;
  SamplingOptions& so = go.sampling;
  so.greedy = r.count("greedy") > 0;
  so.temperature = number_flag(r, "temperature");
  so.top_k = static_cast<int>(integer_flag(r, one_spelling(r, "top-k", "top_k"), 0, INT32_MAX));
  so.top_p = number_flag(r, one_spelling(r, "top-p", "top_p"));
  validate_sampling(so);
  const int64_t num_samples = num_samples_flag(r);
  if (r.count("genfile") && num_samples == 0)
    throw ConfigError(
        "--genfile holds unconditional samples (Megatron's format): with prompts use --sample-output-file");
  for (const char* flag : {"sample-output-file", "genfile"})
    if (r.count(flag)) check_output_file(flag, r[flag].as<std::string>());
  check_distinct_files(r, {"sample-input-file", "sample-output-file", "genfile"});
  go.max_new_tokens = integer_flag(r, "out-seq-length", 1, kMaxCount);
  const std::string batch_flag = one_spelling(r, "batch-size", "micro-batch-size");
  const int batch = static_cast<int>(integer_flag(r, batch_flag, 1, 4096));
  go.stop_at_eod = r.count("ignore-eos") == 0;
  std::vector<Prompt> prompts;
  const std::vector<std::string> given = repeated_flag(r, "prompt");
  for (size_t i = 0; i < given.size(); ++i)
    prompts.push_back({given[i], given.size() > 1 ? "--prompt (#" + std::to_string(i + 1) + ")" : "--prompt"});
  if (r.count("sample-input-file")) {
    const auto more = read_prompts(r["sample-input-file"].as<std::string>());
    prompts.insert(prompts.end(), more.begin(), more.end());
  }
  // What every tensor-parallel rank must decode alike (each draws the same tokens itself).
  std::string prompt_texts;
  for (const Prompt& p : prompts) prompt_texts += p.text + '\n';
  std::ostringstream shared;
  shared << "--greedy " << so.greedy << "\n--temperature " << so.temperature << "\n--top-k " << so.top_k
         << "\n--top-p " << so.top_p << "\n--seed " << r["seed"].as<std::string>() << "\n--num-samples "
         << num_samples << "\n--batch-size " << batch << "\n--out-seq-length " << go.max_new_tokens
         << "\n--ignore-eos " << !go.stop_at_eod << "\n--tensor-model-parallel-size " << model_flags.tp
         << "\n--prompt/--sample-input-file's prompts " << prompts.size() << " (XXH3 "
         << checksum_bytes(prompt_texts.data(), prompt_texts.size()) << ")\n";
  const GenerationModel m = load_generation_model(r, model_flags, shared.str());
  const ModelConfig& cfg = m.cfg;
  const Tokenizer* tokenizer = m.tokenizer.get();
  go.eod = tokenizer->eod();
  std::mt19937_64 rng(static_cast<uint64_t>(integer_flag(r, "seed", 0, kMaxCount)));

  // Every prompt is tokenized and checked before anything is generated, and a prompt that
  // leaves no room is named by where it came from.
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const Prompt& p : prompts) {
    std::vector<int32_t> ids;
    try {
      ids = tokenizer->encode(p.text);
    } catch (const TokenizeError& e) {
      throw ConfigError(p.where + ": " + e.what());
    }
    if (ids.empty()) ids.push_back(go.eod);  // an empty prompt: unconditional
    if (room_after(cfg, static_cast<int64_t>(ids.size())) == 0)
      throw ConfigError(p.where + ": " + std::to_string(ids.size()) + " tokens leave no room in the model's " +
                        "sequence length of " + std::to_string(cfg.seq_length));
    prompt_ids.push_back(std::move(ids));
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Sample> samples;
  if (!prompts.empty()) {
    for (size_t i = 0; i < prompts.size(); ++i)
      samples.push_back(
          {prompts[i].text, continue_sequences(cfg, *m.backend, *m.params, {prompt_ids[i]}, go, rng, m.tp_comm)[0]});
  } else {
    for (int64_t done = 0; done < num_samples; done += batch) {
      const int64_t b = std::min<int64_t>(batch, num_samples - done);
      const std::vector<std::vector<int32_t>> contexts(static_cast<size_t>(b), {go.eod});
      for (Continuation& c : continue_sequences(cfg, *m.backend, *m.params, contexts, go, rng, m.tp_comm))
        samples.push_back({"", std::move(c)});
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!m.rank0()) return 0;  // every rank drew the same samples; rank 0 reports them

  std::string jsonl, genfile;
  int64_t tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    const std::vector<int32_t>& generated = s.continuation.tokens;
    // A sample can end inside a multi-byte character: its bytes, and the prompt's, become
    // U+FFFD on stdout as in the JSON files (Megatron and HF decode with errors="replace").
    // Behind the tokenizer's separator after a prompt that does not end in one already
    // (NullTokenizer's ids stay apart: "17 4" + " 12"), so that prompt + text is the sequence.
    const bool apart = !s.prompt.empty() && !std::isspace(static_cast<unsigned char>(s.prompt.back())) &&
                       !generated.empty();
    const std::string text = valid_utf8((apart ? tokenizer->token_separator() : "") + tokenizer->decode(generated));
    tokens += static_cast<int64_t>(generated.size());
    std::cout << "=== sample " << i + 1 << (s.prompt.empty() ? " (unconditional)" : "") << " ===\n"
              << valid_utf8(s.prompt) << text << "\n";
    jsonl += json_line({{"prompt", s.prompt}, {"text", text}, {"tokens", generated.size()}});
    genfile += genfile_line(text, s.continuation);
  }
  std::cout.flush();
  for (const auto& [flag, text] : {std::pair{"sample-output-file", &jsonl}, std::pair{"genfile", &genfile}})
    if (r.count(flag)) write_output_file(flag, r[flag].as<std::string>(), *text);
  std::fprintf(stderr, "trident-generate: %zu samples, %lld tokens in %.2f s (%.1f tokens/s) from %s on %s\n",
               samples.size(), static_cast<long long>(tokens), seconds, seconds > 0 ? tokens / seconds : 0.0,
               m.dir.string().c_str(), m.backend->name().c_str());
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_mpi_tool("trident-generate", &argc, &argv, [&] { return trident::generate_main(argc, argv); });
}
