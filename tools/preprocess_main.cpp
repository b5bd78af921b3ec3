// trident-preprocess: JSONL (or .jsonl.xz) -> Megatron .bin/.idx, with Megatron's flags.
//   trident-preprocess --input corpus.jsonl --output-prefix data/corpus
//     --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt
//     --append-eod --workers 4
#include <cxxopts.hpp>

#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"
#include "tools/cxxopts_flags.h"
#include "tools/tool_main.h"

namespace {

std::vector<std::string> split_keys(const std::vector<std::string>& words) {
  std::vector<std::string> keys;  // accepts "--json-keys a b" and "--json-keys a,b"
  for (const auto& w : words) {
    std::stringstream ss(w);
    std::string k;
    while (std::getline(ss, k, ','))
      if (!k.empty()) keys.push_back(k);
  }
  return keys;
}

int preprocess_main(int argc, char** argv) {
  using trident::ConfigError;
  // Megatron lets --json-keys take several words; cxxopts wants one value per flag, so
  // gather the extra words here first.
  std::vector<std::string> key_words;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json-keys") {
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) key_words.push_back(argv[++i]);
      if (key_words.empty()) throw ConfigError("--json-keys needs at least one key");
      continue;
    }
    if (a.rfind("--json-keys=", 0) == 0) {
      key_words.push_back(a.substr(12));
      continue;
    }
    args.push_back(argv[i]);
  }
  cxxopts::Options o("trident-preprocess", "Tokenize a JSONL corpus into Megatron .bin/.idx files");
  o.add_options()
      ("input", "input .jsonl or .jsonl.xz", cxxopts::value<std::string>())
      ("json-keys", "keys to extract (one output per key)", cxxopts::value<std::string>())
      ("output-prefix", "output prefix: {prefix}_{key}_document.bin/.idx", cxxopts::value<std::string>())
      ("tokenizer-type", "GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase",
       cxxopts::value<std::string>())
      ("vocab-file", "vocabulary file", cxxopts::value<std::string>())
      ("vocab", "alias of --vocab-file", cxxopts::value<std::string>())
      ("merge-file", "BPE merges file (GPT2BPETokenizer)", cxxopts::value<std::string>()->default_value(""))
      ("append-eod", "append the end-of-document token to each document")
      ("workers", "tokenizer threads", cxxopts::value<std::string>()->default_value("1"))
      ("dataset-impl", "output format (only mmap)", cxxopts::value<std::string>()->default_value("mmap"))
      ("log-interval", "documents between progress lines", cxxopts::value<std::string>()->default_value("100"))
      ("skip-invalid", "skip and count lines that are not usable JSON instead of stopping")
      ("h,help", "show this help");
  const cxxopts::ParseResult r = trident::parse_flags(o, static_cast<int>(args.size()), args.data());
  if (r.count("help")) {
    std::printf("%s\n", o.help().c_str());
    return 0;
  }
  trident::PreprocessOptions opt;
  opt.input = trident::required_flag(r, "input");
  opt.output_prefix = trident::required_flag(r, "output-prefix");
  const std::string type = trident::required_flag(r, "tokenizer-type");
  std::string vocab;
  if (r.count("vocab-file")) vocab = r["vocab-file"].as<std::string>();
  else if (r.count("vocab")) vocab = r["vocab"].as<std::string>();
  else throw ConfigError("--vocab-file is required");
  const std::string merges = r["merge-file"].as<std::string>();
  if (type == "GPT2BPETokenizer" && merges.empty()) throw ConfigError("--merge-file is required for GPT2BPETokenizer");
  if (!key_words.empty()) opt.json_keys = split_keys(key_words);
  if (opt.json_keys.empty()) throw ConfigError("--json-keys needs at least one key");
  opt.append_eod = r.count("append-eod") > 0;
  opt.workers = static_cast<int>(trident::integer_flag(r, "workers", 1, 1024));
  if (r["dataset-impl"].as<std::string>() != "mmap")
    throw ConfigError("--dataset-impl: only mmap is supported (got " + r["dataset-impl"].as<std::string>() + ")");
  opt.log_interval = static_cast<uint64_t>(trident::integer_flag(r, "log-interval", 0, 1ll << 62));
  opt.skip_invalid = r.count("skip-invalid") > 0;
  if (!r.unmatched().empty()) throw ConfigError("unexpected argument: " + r.unmatched().front());

  auto tokenizer = trident::make_tokenizer(type, vocab, merges);
  std::fprintf(stderr, "trident-preprocess: %s, vocab %lld, %d workers, input %s\n", tokenizer->name().c_str(),
               static_cast<long long>(tokenizer->vocab_size()), opt.workers, opt.input.c_str());
  trident::preprocess_jsonl(opt, *tokenizer);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trident::run_tool("trident-preprocess", [&] { return preprocess_main(argc, argv); });
}
