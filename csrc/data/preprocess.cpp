#include "data/preprocess.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/jsonl_reader.h"
#include "data/python_json_numbers.h"

namespace trident {
namespace {

constexpr size_t kBatchBytes = 1 << 20;  // a batch closes at ~1 MB of text ...
constexpr size_t kBatchLines = 1024;     // ... or this many lines

// Lines cut from the input; each line is followed by SIMDJSON_PADDING bytes so simdjson can
// parse it in place.
struct Batch {
  uint64_t seq = 0;
  std::string text;
  std::vector<size_t> offset, length;
  std::vector<uint64_t> line;
  uint64_t raw_bytes = 0, text_bytes = 0;  // reader position after this batch
  std::exception_ptr error;                // a read error: the input ends here
};

enum class LineStatus : uint8_t { kOk, kBlank, kInvalid };

struct Result {
  uint64_t seq = 0;
  std::vector<LineStatus> status;
  std::vector<uint64_t> line;
  std::vector<std::string> reason;     // per kInvalid line
  std::vector<int32_t> tokens;         // per kOk line, per key, per item, back to back
  std::vector<size_t> item_ends;       // end of each item in tokens
  std::vector<size_t> ends;            // end of each (line, key) document in item_ends
  uint64_t raw_bytes = 0, text_bytes = 0;
  std::exception_ptr error;
};

class WorkQueue {
 public:
  void push(std::unique_ptr<Batch> b) {
    { std::lock_guard<std::mutex> l(m_); q_.push_back(std::move(b)); }
    cv_.notify_one();
  }
  std::unique_ptr<Batch> pop() {  // nullptr once closed and empty
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return nullptr;
    auto b = std::move(q_.front());
    q_.pop_front();
    return b;
  }
  void close(bool drop) {
    { std::lock_guard<std::mutex> l(m_); closed_ = true; if (drop) q_.clear(); }
    cv_.notify_all();
  }
 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Batch>> q_;
  bool closed_ = false;
};

bool is_blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

const char* json_type_name(simdjson::dom::element_type t) {
  using T = simdjson::dom::element_type;
  switch (t) {
    case T::ARRAY: return "array";
    case T::OBJECT: return "object";
    case T::INT64: case T::UINT64: case T::DOUBLE: return "number";
    case T::STRING: return "string";
    case T::BOOL: return "boolean";
    case T::NULL_VALUE: return "null";
  }
  return "value";
}

// The value of `key` in `obj`, the last one when the key repeats: Python's json.loads,
// which Megatron's preprocess_data.py uses, keeps the last ({"text": "a", "text": "b"} is
// "b"), while simdjson's at_key() returns the first.
bool last_value(const simdjson::dom::object& obj, std::string_view key, simdjson::dom::element& value) {
  bool found = false;
  for (const simdjson::dom::key_value_pair field : obj) {
    if (field.key == key) {
      value = field.value;
      found = true;
    }
  }
  return found;
}

// Why a key's value cannot be a document ("" when it can): Megatron's preprocess_data.py
// takes a string, or a list of strings (its --split-sentences output: one item each).
std::string check_text_value(const std::string& key, const simdjson::dom::element& value) {
  if (value.is_string()) return "";
  simdjson::dom::array list;
  if (value.get(list))
    return detail::concat("key \"", key, "\" is not a string or a list of strings (got ",
                          json_type_name(value.type()), ")");
  size_t i = 0;
  for (const simdjson::dom::element item : list) {
    if (!item.is_string())
      return detail::concat("key \"", key, "\": item ", i, " of the list is not a string (got ",
                            json_type_name(item.type()), ")");
    ++i;
  }
  return "";
}

// Appends one document (a checked string or list of strings) to r: one item per string
// that tokenizes to something, the eod (append_eod) at the end of the last one, as
// Megatron's Encoder.encode does. A document of no items is skipped by the writer.
void encode_document(const simdjson::dom::element& value, const Tokenizer& tok, bool append_eod, Result& r) {
  const size_t first_item = r.item_ends.size();
  auto add = [&](std::string_view text) {
    const std::vector<int32_t> ids = tok.encode(text);
    if (ids.empty()) return;
    r.tokens.insert(r.tokens.end(), ids.begin(), ids.end());
    r.item_ends.push_back(r.tokens.size());
  };
  simdjson::dom::array list;
  if (value.get(list)) {
    add(value.get_string().value_unsafe());
  } else {
    for (const simdjson::dom::element item : list) add(item.get_string().value_unsafe());
  }
  if (append_eod && r.item_ends.size() > first_item) {
    r.tokens.push_back(tok.eod());
    r.item_ends.back() = r.tokens.size();
  }
}

// Parses and tokenizes one batch. Never throws: failures go into the result.
void process(const Batch& b, const PreprocessOptions& opt, const Tokenizer& tok,
             simdjson::dom::parser& parser, Result& r) {
  r.seq = b.seq;
  r.raw_bytes = b.raw_bytes;
  r.text_bytes = b.text_bytes;
  r.error = b.error;
  std::vector<simdjson::dom::element> values(opt.json_keys.size());  // per key, of the current line
  try {
    for (size_t i = 0; i < b.line.size(); ++i) {
      std::string_view text(b.text.data() + b.offset[i], b.length[i]);
      r.line.push_back(b.line[i]);
      if (is_blank(text)) {
        r.status.push_back(LineStatus::kBlank);
        continue;
      }
      simdjson::dom::element doc;
      auto err = parser.parse(text.data(), text.size(), false).get(doc);
      if (err) {  // again with Python's number forms as 0 (python_json_numbers.h); else the first error
        const std::optional<std::string> zeroed = zero_python_numbers(text);
        if (zeroed && !parser.parse(*zeroed).get(doc)) err = simdjson::SUCCESS;
      }
      std::string why;
      simdjson::dom::object obj;
      if (err) {
        why = detail::concat("invalid JSON (", simdjson::error_message(err), ")");
      } else if (doc.get(obj)) {
        why = detail::concat("not a JSON object (got ", json_type_name(doc.type()), ")");
      } else {
        for (size_t k = 0; k < values.size(); ++k) {
          const std::string& key = opt.json_keys[k];
          if (!last_value(obj, key, values[k])) {
            why = detail::concat("missing key \"", key, "\"");
            break;
          }
          why = check_text_value(key, values[k]);
          if (!why.empty()) break;
        }
      }
      if (!why.empty()) {
        r.status.push_back(LineStatus::kInvalid);
        r.reason.push_back(std::move(why));
        continue;
      }
      r.status.push_back(LineStatus::kOk);
      const size_t tokens = r.tokens.size(), items = r.item_ends.size(), ends = r.ends.size();
      const auto drop_line_output = [&] {
        r.tokens.resize(tokens);
        r.item_ends.resize(items);
        r.ends.resize(ends);
      };
      try {
        for (const simdjson::dom::element& v : values) {
          encode_document(v, tok, opt.append_eod, r);
          r.ends.push_back(r.item_ends.size());
        }
      } catch (const TokenizeError& e) {  // the line is invalid: nothing of it is kept
        drop_line_output();
        r.status.back() = LineStatus::kInvalid;
        r.reason.push_back(e.what());
      } catch (...) {  // any other failure (out of memory) ends the run: the line is not kept
        drop_line_output();
        r.status.pop_back();
        r.line.pop_back();
        throw;
      }
    }
  } catch (...) {
    r.error = std::current_exception();
  }
}

std::string format_eta(double s) {
  const long t = static_cast<long>(s + 0.5);
  return detail::concat(t / 3600, "h", (t / 60) % 60 < 10 ? "0" : "", (t / 60) % 60, "m",
                        t % 60 < 10 ? "0" : "", t % 60, "s");
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return detail::concat("signal ", sig);
}

}  // namespace

PreprocessInterrupted::PreprocessInterrupted(int signal)
    : Error("interrupted by " + signal_name(signal) + ": no output written, temporary files removed"),
      signal_(signal) {}

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

void check_json_keys(const std::vector<std::string>& keys) {
  if (keys.empty()) throw ConfigError("--json-keys needs at least one key");
  for (size_t i = 0; i < keys.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (keys[i] == keys[j])
        throw ConfigError("--json-keys: key \"" + keys[i] + "\" is given twice (each key has its own output)");
}

PreprocessStats preprocess_jsonl(const PreprocessOptions& opt, const Tokenizer& tok) {
  if (opt.workers < 1) throw ConfigError("--workers must be at least 1");
  check_json_keys(opt.json_keys);
  if (opt.output_prefix.empty()) throw ConfigError("--output-prefix is required");
  auto check_interrupt = [&] {
    if (opt.interrupt)
      if (const int sig = opt.interrupt->load(); sig != 0) throw PreprocessInterrupted(sig);
  };
  check_interrupt();
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  JsonlReader reader(opt.input);
  const size_t nkeys = opt.json_keys.size();
  PreprocessStats st;
  st.written.assign(nkeys, 0);
  st.empty.assign(nkeys, 0);
  st.tokens.assign(nkeys, 0);
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  const IndexDType dtype = best_fitting_dtype(tok.vocab_size());
  for (const std::string& key : opt.json_keys) {
    st.output_prefixes.push_back(preprocess_output_prefix(opt.output_prefix, key));
    for (const std::string& stale : remove_stale_builder_temps(st.output_prefixes.back()))
      if (opt.log) std::fprintf(opt.log, "Removed %s, left by an earlier run that is gone.\n", stale.c_str());
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(st.output_prefixes.back(), dtype));
  }

  // ---- threads: reader -> queue -> workers -> results (by seq) -> this thread
  const int max_inflight = 2 * opt.workers + 2;
  std::counting_semaphore<1 << 20> slots(max_inflight);
  std::atomic<bool> stop{false};
  WorkQueue queue;
  std::mutex rm;
  std::condition_variable rcv;
  std::map<uint64_t, std::unique_ptr<Result>> results;
  std::optional<uint64_t> total_batches;

  std::thread reader_thread([&] {
    uint64_t seq = 0;
    bool more = true;
    while (more && !stop.load()) {
      slots.acquire();
      if (stop.load()) break;
      auto b = std::make_unique<Batch>();
      b->seq = seq;
      const size_t max_lines = opt.batch_lines ? opt.batch_lines : kBatchLines;
      try {
        std::string_view line;
        while (b->line.size() < max_lines && b->text.size() < kBatchBytes) {
          if (!reader.next(line)) {
            more = false;
            break;
          }
          b->offset.push_back(b->text.size());
          b->length.push_back(line.size());
          b->line.push_back(reader.line_number());
          b->text.append(line);
          b->text.append(simdjson::SIMDJSON_PADDING, '\0');
        }
      } catch (...) {
        b->error = std::current_exception();
        more = false;
      }
      b->raw_bytes = reader.raw_bytes_read();
      b->text_bytes = reader.text_bytes();
      if (b->line.empty() && !b->error) {
        slots.release();
        break;
      }
      queue.push(std::move(b));
      ++seq;
    }
    queue.close(false);
    { std::lock_guard<std::mutex> l(rm); total_batches = seq; }
    rcv.notify_all();
  });

  std::vector<std::thread> workers;
  bool joined = false;
  auto shutdown = [&] {
    if (joined) return;
    joined = true;
    stop.store(true);
    slots.release(max_inflight);  // wake the reader if it waits for a slot
    queue.close(true);
    reader_thread.join();
    for (auto& t : workers) t.join();
  };
  const auto abort_outputs = [&] {
    // The builders first (only this thread uses them): the temporary files, and any output
    // already renamed, go at once, even if a reader blocked on a pipe delays shutdown().
    for (auto& b : builders) b->abort();
    shutdown();
  };
  try {
    for (int w = 0; w < opt.workers; ++w) {
      workers.emplace_back([&] {
        simdjson::dom::parser parser;
        while (auto b = queue.pop()) {
          auto r = std::make_unique<Result>();
          process(*b, opt, tok, parser, *r);
          { std::lock_guard<std::mutex> l(rm); results.emplace(r->seq, std::move(r)); }
          rcv.notify_all();
        }
      });
    }
  } catch (const std::system_error& e) {  // a thread not to be had (a process limit)
    abort_outputs();
    throw std::runtime_error(detail::concat("--workers ", opt.workers, ": cannot start worker thread ",
                                            workers.size() + 1, ": ", e.what()));
  } catch (...) {
    abort_outputs();
    throw;
  }

  try {
    uint64_t next_log = opt.log_interval;
    for (uint64_t seq = 0;; ++seq) {
      check_interrupt();
      std::unique_ptr<Result> r;
      {
        std::unique_lock<std::mutex> l(rm);
        auto ready = [&] { return results.count(seq) || (total_batches && seq >= *total_batches); };
        if (!opt.interrupt) rcv.wait(l, ready);
        else  // a signal sets *interrupt without waking this wait: look every 50 ms
          while (!rcv.wait_for(l, std::chrono::milliseconds(50), ready)) check_interrupt();
        auto it = results.find(seq);
        if (it == results.end()) break;
        r = std::move(it->second);
        results.erase(it);
      }
      size_t k = 0, reason = 0, item = 0, tok_begin = 0;
      for (size_t i = 0; i < r->status.size(); ++i) {
        ++st.lines;
        if (r->status[i] == LineStatus::kBlank) continue;
        if (r->status[i] == LineStatus::kInvalid) {
          if (!opt.skip_invalid)
            throw IoError(detail::concat(opt.input, ":", r->line[i], ": ", r->reason[reason]));
          ++reason;
          ++st.invalid;
          continue;
        }
        ++st.documents;
        for (size_t key = 0; key < nkeys; ++key, ++k) {
          if (item == r->ends[k]) {
            ++st.empty[key];
            continue;
          }
          for (; item < r->ends[k]; ++item) {
            const size_t end = r->item_ends[item];
            builders[key]->add_item(std::span<const int32_t>(r->tokens.data() + tok_begin, end - tok_begin));
            st.tokens[key] += end - tok_begin;
            tok_begin = end;
          }
          builders[key]->end_document();
          ++st.written[key];
        }
        if (opt.log && opt.log_interval && st.documents >= next_log) {
          next_log += opt.log_interval;
          const double s = elapsed();
          std::string eta;
          if (reader.file_size() > 0 && r->raw_bytes > 0 && r->raw_bytes < reader.file_size())
            eta = ", ETA " + format_eta(s * double(reader.file_size() - r->raw_bytes) / double(r->raw_bytes));
          std::fprintf(opt.log, "Processed %llu documents (%.1f docs/s, %.2f MB/s%s).\n",
                       static_cast<unsigned long long>(st.documents), st.documents / s,
                       r->text_bytes / 1e6 / s, eta.c_str());
          std::fflush(opt.log);
        }
      }
      // A reader or tokenizer failure surfaces in input order, after the lines before it.
      if (r->error) std::rethrow_exception(r->error);
      st.text_bytes = r->text_bytes;
      slots.release();
    }
    shutdown();
    // Every output gets its final name only when all of them are complete.
    for (auto& b : builders) b->prepare();
    check_interrupt();
    for (auto& b : builders) b->commit();
  } catch (...) {
    abort_outputs();
    throw;
  }
  st.seconds = elapsed();
  if (opt.log) {
    uint64_t tokens = 0, empty = 0;
    for (size_t key = 0; key < nkeys; ++key) {
      tokens += st.tokens[key];
      empty += st.empty[key];
    }
    std::fprintf(opt.log,
                 "Done: %llu documents, %llu tokens, %llu empty skipped, %llu invalid skipped; "
                 "%.2f MB in %.2f s (%.2f MB/s, %d workers).\n",
                 static_cast<unsigned long long>(st.documents), static_cast<unsigned long long>(tokens),
                 static_cast<unsigned long long>(empty), static_cast<unsigned long long>(st.invalid),
                 st.text_bytes / 1e6, st.seconds, st.text_bytes / 1e6 / std::max(st.seconds, 1e-9),
                 opt.workers);
    for (size_t key = 0; key < nkeys; ++key)
      std::fprintf(opt.log, "  %s.bin/.idx: %llu documents, %llu tokens\n", st.output_prefixes[key].c_str(),
                   static_cast<unsigned long long>(st.written[key]),
                   static_cast<unsigned long long>(st.tokens[key]));
  }
  return st;
}

}  // namespace trident
