// trident-preprocess: JSONL (or .jsonl.xz) -> Megatron .bin/.idx, with Megatron's flags.
//   trident-preprocess --input corpus.jsonl --output-prefix data/corpus
//     --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt
//     --append-eod --workers 4
// Data that is token ids already: --tokenizer-type NullTokenizer --vocab-size V, each text
// "17 4 9" (Megatron's NullTokenizer; V is the end of document).
// SIGINT or SIGTERM stops the run within a batch or so: its temporary files are removed, one
// line says so, and the process then ends by that signal (a second one ends it at once).
#include <cxxopts.hpp>

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <csignal>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"
#include "tools/cxxopts_flags.h"
#include "tools/tool_main.h"

namespace {

std::atomic<int> interrupt_signal{0};  // the signal that asked the run to stop; 0 = none
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");

extern "C" void on_interrupt(int sig) { interrupt_signal.store(sig); }

// SIGINT and SIGTERM set interrupt_signal, once: SA_RESETHAND restores the default action,
// so a second signal ends the process at once. A signal the process was started with
// ignored (nohup, a background job of a script) stays ignored.
void catch_interrupts() {
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

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
      ("tokenizer-type", "GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase | NullTokenizer",
       cxxopts::value<std::string>())
      ("vocab-size", "NullTokenizer: the text is token ids 0 .. V - 1 separated by spaces; V is the end of document",
       cxxopts::value<std::string>())
      ("vocab-file", "vocabulary file", cxxopts::value<std::string>())
      ("vocab", "alias of --vocab-file", cxxopts::value<std::string>())
      ("merge-file", "BPE merges file (GPT2BPETokenizer)", cxxopts::value<std::string>()->default_value(""))
      ("append-eod", "append the end-of-document token to each document")
      ("workers", "tokenizer threads", cxxopts::value<std::string>()->default_value("1"))
      ("dataset-impl", "output format (only mmap)", cxxopts::value<std::string>()->default_value("mmap"))
      ("log-interval", "documents between progress lines", cxxopts::value<std::string>()->default_value("100"))
      ("skip-invalid", "skip and count lines that are not usable JSON instead of stopping")
      // Megatron's flags for what trident-preprocess does another way or not at all.
      ("partitions", "Megatron's input partitions: only 1 (--workers sets the threads)",
       cxxopts::value<std::string>()->default_value("1"))
      ("keep-sequential-samples", "Megatron's partition order: without effect with one partition")
      ("split-sentences", "Megatron's NLTK sentence splitting: not supported")
      ("keep-newlines", "with --split-sentences only: without effect here")
      ("lang", "NLTK's language for --split-sentences: without effect here", cxxopts::value<std::string>())
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
  const bool null_tokenizer = type == "NullTokenizer";
  std::string vocab;
  if (r.count("vocab-file")) vocab = r["vocab-file"].as<std::string>();
  else if (r.count("vocab")) vocab = r["vocab"].as<std::string>();
  else if (!null_tokenizer) throw ConfigError("--vocab-file is required");
  const int64_t null_vocab_size = r.count("vocab-size") ? trident::integer_flag(r, "vocab-size", 1, INT32_MAX) : 0;
  if (r.count("vocab-size") && !null_tokenizer)
    throw ConfigError("--vocab-size: only NullTokenizer takes it (the others' vocabulary is their --vocab-file's)");
  const std::string merges = r["merge-file"].as<std::string>();
  if (type == "GPT2BPETokenizer" && merges.empty()) throw ConfigError("--merge-file is required for GPT2BPETokenizer");
  if (!key_words.empty()) opt.json_keys = split_keys(key_words);
  trident::check_json_keys(opt.json_keys);  // before the tokenizer loads: "text text" is one line
  opt.append_eod = r.count("append-eod") > 0;
  opt.workers = static_cast<int>(trident::integer_flag(r, "workers", 1, 1024));
  if (r["dataset-impl"].as<std::string>() != "mmap")
    throw ConfigError("--dataset-impl: only mmap is supported (got " + r["dataset-impl"].as<std::string>() + ")");
  opt.log_interval = static_cast<uint64_t>(trident::integer_flag(r, "log-interval", 0, 1ll << 62));
  opt.skip_invalid = r.count("skip-invalid") > 0;
  // Megatron with N > 1 partitions deals the lines out round-robin to N files and merges
  // their outputs: another document order, which trident does not reproduce.
  if (trident::integer_flag(r, "partitions", 1, 1 << 20) != 1)
    throw ConfigError("--partitions: only 1 is supported (trident-preprocess reads the input once; --workers sets "
                      "the tokenizer threads)");
  if (r.count("split-sentences"))
    throw ConfigError("--split-sentences: not supported (it needs NLTK's punkt); give each document as a string, or "
                      "as a list of sentences split beforehand");
  std::string without_effect;
  for (const char* flag : {"keep-sequential-samples", "keep-newlines", "lang"})
    if (r.count(flag)) without_effect += std::string(without_effect.empty() ? "" : " ") + "--" + flag;
  if (!without_effect.empty())
    std::fprintf(stderr, "trident-preprocess: note: %s: without effect here (one partition, no sentence splitting)\n",
                 without_effect.c_str());

  catch_interrupts();
  opt.interrupt = &interrupt_signal;
  auto tokenizer = trident::make_tokenizer(type, vocab, merges, null_vocab_size);
  std::fprintf(stderr, "trident-preprocess: %s, vocab %lld, %d workers, input %s\n", tokenizer->name().c_str(),
               static_cast<long long>(tokenizer->vocab_size()), opt.workers, opt.input.c_str());
  try {
    trident::preprocess_jsonl(opt, *tokenizer);
  } catch (const trident::PreprocessInterrupted& e) {
    std::fprintf(stderr, "trident-preprocess: %s\n", e.what());
    std::fflush(stderr);
    std::signal(e.signal(), SIG_DFL);  // end as the signal would have: the caller sees it
    std::raise(e.signal());
    return 128 + e.signal();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trident::run_tool("trident-preprocess", [&] { return preprocess_main(argc, argv); });
}
