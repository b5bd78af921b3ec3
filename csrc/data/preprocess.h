// JSONL -> Megatron .bin/.idx, as a library function (trident-preprocess is a thin main()).
//
// Pipeline: one reader thread cuts the input into batches of lines; `workers` threads parse
// each line with simdjson and tokenize every --json-keys value; the calling thread writes the
// results strictly in input order, one IndexedDatasetBuilder per key
// (`{output_prefix}_{key}_document.bin/.idx`). A key's value is a document: a string (one
// item), or as Megatron's preprocess_data.py a list of strings (its --split-sentences
// output: one item per string that tokenizes to something). A document that tokenizes to
// nothing is skipped, as Megatron does; append_eod adds the tokenizer's eod to the end of
// each document (its last item). Blank lines are ignored. A line that is not JSON, is not
// an object, lacks a key or has a value that is neither a string nor a list of strings
// stops the run with IoError "file:line: reason" and no outputs are left behind; with
// skip_invalid such lines are counted and skipped instead. A key that appears twice in one
// object takes its last value, as Python's json.loads (Megatron's preprocess_data.py) does.
//
// Every key's .bin/.idx is written under a temporary name
// ({prefix}_{key}_document.bin.tmp.<host>.<pid>) and all of them get their final names together
// once every key is done; a failure on the way (a rename included) leaves none of them.
// Temporary files of this output prefix left by a process of this host that is gone (an
// interrupted run) are removed at the start; another host's are kept (remove_stale_builder_temps).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"

namespace trident {

struct PreprocessOptions {
  std::string input;                        // .jsonl or .jsonl.xz
  std::vector<std::string> json_keys{"text"};
  std::string output_prefix;
  bool append_eod = false;
  int workers = 1;
  uint64_t log_interval = 100;              // documents between progress lines; 0 = none
  bool skip_invalid = false;
  std::FILE* log = stderr;                  // progress and summary; nullptr = silent
  size_t batch_lines = 0;                   // lines per work batch; 0 = default (1024)
  // When it holds a nonzero signal number (set by a signal handler), the run stops within
  // a batch or so, removes its temporary files and throws PreprocessInterrupted.
  const std::atomic<int>* interrupt = nullptr;
};

// A run stopped through PreprocessOptions::interrupt; nothing of it is left on disk.
class PreprocessInterrupted : public Error {
 public:
  explicit PreprocessInterrupted(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

struct PreprocessStats {
  uint64_t lines = 0;            // input lines read (blank ones included)
  uint64_t documents = 0;        // JSON documents accepted
  uint64_t invalid = 0;          // lines skipped by skip_invalid
  std::vector<uint64_t> written; // per key: documents written
  std::vector<uint64_t> empty;   // per key: documents skipped because they tokenized to nothing
  std::vector<uint64_t> tokens;  // per key: tokens written
  uint64_t text_bytes = 0;       // uncompressed input bytes
  double seconds = 0;
  std::vector<std::string> output_prefixes;  // per key, without .bin/.idx
};

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

// Throws ConfigError naming --json-keys when the list is empty or names a key twice (two
// keys would share one output file).
void check_json_keys(const std::vector<std::string>& keys);

PreprocessStats preprocess_jsonl(const PreprocessOptions& opt, const Tokenizer& tokenizer);

}  // namespace trident
