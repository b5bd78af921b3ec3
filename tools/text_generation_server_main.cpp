// trident-text-generation-server: Megatron's text-generation server
// (tools/run_text_generation_server.py) over a trident checkpoint of any layout: PUT /api
// with {"prompts": [...], "tokens_to_generate": N, "temperature", "top_k", "top_p",
// "logprobs", "add_BOS", "stop_on_eol", "random_seed", "beam_width", ...} answers
// {"text": [...], "segments": [...], "logprobs": [...]} (csrc/infer/text_generation_service.h
// says what each holds and where trident differs). POST /api is the same. POST /completions
// and /v1/completions answer OpenAI's legacy completions requests (prompt, max_tokens,
// temperature, logprobs, echo, stop, ...), what lm-evaluation-harness's local-completions
// model sends; with "stream": true its answer comes as server-sent events, a chunk as the
// tokens come (csrc/infer/completion_stream.h), then "data: [DONE]"; once a stream's client
// has left (a write failed), its request draws no more.
//
//   trident-text-generation-server --load DIR --vocab-file V --merge-file M [--port 5000]
//       [--host 0.0.0.0] [--max-tokens-to-oom 12000] [--seed S] [--device D]
//   mpirun -np N trident-text-generation-server ... --tensor-model-parallel-size N
//
// Rank 0 serves HTTP; requests are answered in the order they came, one at a time (Megatron
// holds a lock), except that greedy /completions requests waiting together are decoded as
// one batch (TextGenerationService::batches: lm-evaluation-harness's concurrent requests). A request that fails its checks is answered 400 {"message": "..."} and goes
// no further; a good one is sent to every rank (they wait for it with no collective time
// limit) and decoded by the tensor-parallel group together. A request that fails while it
// runs (out of memory) is answered 500; a lone process goes on serving, a tensor-parallel
// job ends (its ranks may be out of step). SIGTERM or SIGINT (Ctrl-C) to the process (under
// mpirun: rank 0's, whose pid the start line names; mpirun's own SIGTERM or Ctrl-C ends the
// job at once) closes the server after the request in progress: requests still waiting get
// 503, the other ranks are told to stop, and the job exits 0. A prompt + tokens_to_generate may reach the
// model's learned positions (Megatron's limit), or --seq-length when given. GET / is a page
// to try it from a browser (Megatron's index.html).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <httplib.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/stop_signals.h"
#include "infer/text_generation_service.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"
#include "tools/cxxopts_flags.h"
#include "tools/generation_model.h"
#include "tools/mpi_tool_main.h"
#include "tools/pending_requests.h"
#include "tools/text_generation_page.h"

namespace trident {
namespace {

const char* const kTool = "trident-text-generation-server";

// (response_body: a message may quote the request's bytes, which need not be UTF-8.)
Reply json_reply(int status, const std::string& message) {
  return {status, response_body(nlohmann::json{{"message", message}}), nullptr};
}

// What the other ranks are sent for a batch: a JSON list of its requests, each the endpoint's
// letter and then the body; "" to stop.
std::string order_for(const std::vector<std::pair<Endpoint, const std::string*>>& batch) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [endpoint, body] : batch) list.push_back((endpoint == Endpoint::kApi ? "A" : "C") + *body);
  return list.dump();
}
Endpoint endpoint_of_path(const std::string& path) { return path == "/api" ? Endpoint::kApi : Endpoint::kCompletions; }

// A streamed answer's last event when it failed after its 200 went out: OpenAI's error object.
std::string error_event(const Reply& reply) {
  nlohmann::json error = nlohmann::json::parse(reply.body);
  error["code"] = reply.status;
  return response_body(nlohmann::json{{"error", error}});
}

// For a /completions request with stream, as its batch starts: answers 200 with `events`
// (made here), and returns its client: a sink that writes its chunks there as server-sent
// events, and whether the connection is gone. Else no client.
StreamClient start_stream(const PreparedRequest& p, PendingRequests::Request& request,
                          std::shared_ptr<EventStream>& events) {
  if (p.endpoint != Endpoint::kCompletions || !p.completions.stream) return {};
  events = std::make_shared<EventStream>();
  request.reply.set_value(Reply{200, "", events});
  return {[events](const nlohmann::json& chunk) { events->push("data: " + response_body(chunk) + "\n\n"); },
          [events] { return events->left(); }};
}

// Closes every stream of a round of requests whichever way the round ends, so that no HTTP
// thread waits on one for ever (the server's stop joins them).
struct StreamsClosed {
  const std::vector<std::shared_ptr<EventStream>>& streams;
  ~StreamsClosed() {
    for (const auto& s : streams)
      if (s) s->close();
  }
};

// The most requests taken from the queue at once (to batch the greedy completions among them),
// and the body bytes after which no more are taken (a body is at most 64 MiB; an order holds
// them JSON-escaped, at most 6 bytes a byte, under broadcast_string's 2 GiB).
constexpr size_t kMostRequestsAtOnce = 64;
constexpr size_t kMostBytesAtOnce = size_t{128} << 20;
// HTTP threads: each client's request (or stream) holds one while it waits for its answer, so
// enough for a full batch of waiting requests and a few more connections (cpp-httplib's
// default, max(8, cores - 1), would let only 8 requests wait at once on a small machine).
constexpr size_t kHttpThreads = kMostRequestsAtOnce + 8;

// The HTTP server on its own thread while an object lives; its destructor closes it (the
// requests still waiting are answered 503) whichever way the main loop ends.
class HttpThread {
 public:
  HttpThread(httplib::Server& server, PendingRequests& pending) : server_(server), pending_(pending) {
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      listening_done_ = true;
    });
    // stop() before the server runs would be lost: wait for it to run (or to have failed).
    while (!server_.is_running() && !listening_done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!server_.is_running()) {
      thread_.join();
      throw std::runtime_error("the HTTP server did not start on its socket");
    }
  }
  ~HttpThread() {
    pending_.close(json_reply(503, "the server is shutting down"));
    server_.stop();
    thread_.join();
  }
  HttpThread(const HttpThread&) = delete;
  HttpThread& operator=(const HttpThread&) = delete;

 private:
  httplib::Server& server_;
  PendingRequests& pending_;
  std::atomic<bool> listening_done_{false};
  std::thread thread_;
};

// Rank 0: answers requests until a stop signal, then tells the other ranks to stop (an empty
// order). The requests waiting are taken together, checked (a refused one is answered at
// once), and run in batches (TextGenerationService::batches), each sent to the other ranks
// first.
void serve(GenerationModel& m, TextGenerationService& service, httplib::Server& server, PendingRequests& pending) {
  HttpThread http(server, pending);
  const bool alone = m.parallel->world_size() == 1;
  while (!stop_signal_received()) {
    std::vector<PendingRequests::Request> taken;
    size_t bytes = 0;  // of the bodies taken: an order to the other ranks stays well under 2 GiB
    for (auto wait = std::chrono::milliseconds(100); taken.size() < kMostRequestsAtOnce && bytes < kMostBytesAtOnce;
         wait = std::chrono::milliseconds(0)) {
      std::optional<PendingRequests::Request> request = pending.next(wait);
      if (!request) break;
      bytes += request->body.size();
      taken.push_back(std::move(*request));
    }
    std::vector<PendingRequests::Request*> accepted;
    std::vector<PreparedRequest> prepared;
    // accepted[i]'s events once its batch has started, when it streams (answered 200 then).
    std::vector<std::shared_ptr<EventStream>> streams;
    const StreamsClosed closed_at_the_end{streams};
    for (PendingRequests::Request& request : taken) {
      try {
        prepared.push_back(service.prepare(endpoint_of_path(request.path), request.body));
        accepted.push_back(&request);
        streams.emplace_back();
      } catch (const ApiError& e) {
        request.reply.set_value(json_reply(400, e.what()));
      } catch (const std::exception& e) {  // out of memory, say: no other rank has seen it
        request.reply.set_value(json_reply(500, e.what()));
        std::fprintf(stderr, "%s: %s: %s\n", kTool, request.client.c_str(), e.what());
      }
    }
    std::vector<bool> answered(accepted.size(), false);
    const auto answer = [&](size_t i, const Reply& reply) {
      if (streams[i]) {  // its 200 went out as its batch started: the events end it
        streams[i]->push("data: " + (reply.status == 200 ? std::string("[DONE]") : error_event(reply)) + "\n\n");
        streams[i]->close();
      } else {
        accepted[i]->reply.set_value(reply);
      }
      answered[i] = true;
    };
    try {
      for (const std::vector<size_t>& batch : service.batches(prepared)) {
        if (stop_signal_received()) break;  // the requests not run yet get 503 below
        std::vector<const PreparedRequest*> requests;
        std::vector<std::pair<Endpoint, const std::string*>> order;
        std::vector<StreamClient> clients;
        for (size_t i : batch) {
          requests.push_back(&prepared[i]);
          order.emplace_back(prepared[i].endpoint, &accepted[i]->body);
          clients.push_back(start_stream(prepared[i], *accepted[i], streams[i]));
        }
        if (!alone) {
          std::string text = order_for(order);
          broadcast_string(*m.parallel->world, text, 0);
        }
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<nlohmann::json> responses;
        try {
          responses = service.run_batch(requests, clients);
        } catch (const std::exception& e) {
          for (size_t i : batch) answer(i, json_reply(500, e.what()));
          std::fprintf(stderr, "%s: %s %s: %s\n", kTool, accepted[batch[0]]->client.c_str(),
                       accepted[batch[0]]->path.c_str(), e.what());
          if (!alone) throw;  // the job ends: the other ranks may be mid-collective
          continue;           // alone: the next batch starts afresh
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (size_t k = 0; k < batch.size(); ++k) {
          const size_t i = batch[k];
          answer(i, {200, response_body(responses[k]), nullptr});
          const PreparedRequest& p = prepared[i];
          if (p.no_log()) continue;
          const bool api = p.endpoint == Endpoint::kApi;
          const std::string together =
              batch.size() > 1 ? " (one of " + std::to_string(batch.size()) + " requests decoded together)" : "";
          std::string streamed;
          if (streams[i])
            streamed = streams[i]->left() ? " (streamed; the client left: " +
                                                responses[k]["usage"]["completion_tokens"].dump() + " tokens drawn)"
                                          : " (streamed)";
          std::fprintf(stderr, "%s: %s %s: %zu prompts, %s %lld%s%s%s: %.3f s\n", kTool, accepted[i]->client.c_str(),
                       accepted[i]->path.c_str(), p.prompts.size(), api ? "tokens_to_generate" : "max_tokens",
                       static_cast<long long>(api ? p.request.tokens_to_generate : p.completions.max_tokens),
                       api && p.request.beam_width ? " (beam search)" : "", streamed.c_str(), together.c_str(),
                       seconds);
        }
      }
    } catch (const std::exception& e) {  // the job ends: every request taken gets its answer first
      for (size_t i = 0; i < accepted.size(); ++i)
        if (!answered[i]) answer(i, json_reply(500, std::string("the server failed: ") + e.what()));
      throw;
    }
    for (size_t i = 0; i < accepted.size(); ++i)
      if (!answered[i]) answer(i, json_reply(503, "the server is shutting down"));
  }
  std::fprintf(stderr, "%s: stop signal: closing\n", kTool);
  if (!alone) {
    std::string stop;
    broadcast_string(*m.parallel->world, stop, 0);
  }
}

// Other ranks: the batches rank 0 accepted, until an empty order.
void follow(GenerationModel& m, TextGenerationService& service) {
  for (;;) {
    std::string order;
    {
      CollectiveTimeoutSuspended idle;  // waiting for clients, not for a peer
      broadcast_string(*m.parallel->world, order, 0);
    }
    if (order.empty()) return;
    std::vector<PreparedRequest> batch;
    for (const nlohmann::json& item : nlohmann::json::parse(order)) {
      const std::string text = item.get<std::string>();
      batch.push_back(service.prepare(text[0] == 'A' ? Endpoint::kApi : Endpoint::kCompletions, text.substr(1)));
    }
    std::vector<const PreparedRequest*> requests;
    for (const PreparedRequest& r : batch) requests.push_back(&r);
    service.run_batch(requests);
  }
}

int server_main(int argc, char** argv) {
  cxxopts::Options o(kTool, "Megatron's text-generation REST API (PUT /api) over a trident checkpoint");
  o.add_options()
      ("port", "TCP port (5000; 0: any free one, printed at the start)", cxxopts::value<std::string>()->default_value("5000"))
      ("host", "address to listen on (0.0.0.0: every interface, as Megatron's)",
       cxxopts::value<std::string>()->default_value("0.0.0.0"))
      ("max-tokens-to-oom", "most prompts x (longest prompt + tokens_to_generate) in one request (12000)",
       cxxopts::value<std::string>()->default_value("12000"))
      ("h,help", "show this help");
  // Megatron's server scripts pass its generation flags too; a request sets its own.
  o.add_options("Megatron's, checked and not used (each request sets its own)")
      ("micro-batch-size", "a request's prompts are its batch", cxxopts::value<std::string>())
      ("out-seq-length", "a request's tokens_to_generate", cxxopts::value<std::string>())
      ("temperature", "a request's temperature", cxxopts::value<std::string>())
      ("top_k", "a request's top_k", cxxopts::value<std::string>())
      ("top_p", "a request's top_p", cxxopts::value<std::string>());
  add_generation_model_flags(o, "the checkpoint's learned positions, Megatron's limit");
  const cxxopts::ParseResult r = parse_flags(o, argc, argv);
  if (r.count("help")) {
    std::printf("%s\n", o.help().c_str());
    return 0;
  }
  const ModelFlags flags = read_generation_model_flags(r, kTool);
  const int port = static_cast<int>(integer_flag(r, "port", 0, 65535));
  const std::string host = r["host"].as<std::string>();
  const int64_t max_tokens = integer_flag(r, "max-tokens-to-oom", 1, 1ll << 40);
  for (const char* flag : {"micro-batch-size", "out-seq-length", "top_k"})
    if (r.count(flag)) integer_flag(r, flag, flag == std::string("top_k") ? 0 : 1, INT32_MAX);
  // Checked as trident-generate checks them.
  if (r.count("temperature") && !(number_flag(r, "temperature") >= 0))
    throw ConfigError("--temperature must be a number >= 0");
  if (r.count("top_p"))
    if (const double top_p = number_flag(r, "top_p"); !(top_p >= 0 && top_p <= 1))
      throw ConfigError("--top_p must be in [0, 1]");
  const uint64_t seed = static_cast<uint64_t>(integer_flag(r, "seed", 0, 1ll << 40));

  // Megatron's limit is the learned positions; --seq-length may set a lower one.
  GenerationModel m = load_generation_model(r, flags);
  if (!flags.seq_length) m.cfg.seq_length = m.cfg.max_position_embeddings;
  TextGenerationService service(m.cfg, *m.backend, *m.params, *m.tokenizer, m.tp_comm, seed, max_tokens);
  StopSignals stop_signals;

  httplib::Server server;
  PendingRequests pending;
  const auto handle = [&](const httplib::Request& req, httplib::Response& res) {
    const Reply reply =
        pending.submit(req.path, req.body, req.remote_addr, json_reply(503, "the server is shutting down"));
    res.status = reply.status;
    if (!reply.events) {
      res.set_content(reply.body, "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [events = reply.events](size_t, httplib::DataSink& sink) {
          if (std::optional<std::string> event = events->next()) return sink.write(event->data(), event->size());
          sink.done();
          return true;
        },
        // Released unsuccessfully when a write failed: the client is gone, decoding for it stops.
        [events = reply.events](bool success) {
          if (!success) events->leave();
        });
  };
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kTextGenerationPage, "text/html; charset=utf-8");
  });
  // OpenAI's model list (clients discover the name to send as "model"; an answer names the
  // request's model, or "trident" when it names none), with vLLM's root (the checkpoint read)
  // and max_model_len; /models as /completions is /v1/completions.
  const nlohmann::json model_card = {{"id", "trident"},          {"object", "model"},
                                     {"created", std::time(nullptr)}, {"owned_by", "trident"},
                                     {"root", m.dir.string()},   {"max_model_len", m.cfg.seq_length}};
  const auto list_models = [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(response_body({{"object", "list"}, {"data", {model_card}}}), "application/json");
  };
  server.Get("/v1/models", list_models);
  server.Get("/models", list_models);
  server.Get(R"((?:/v1)?/models/(.+))", [&](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] == "trident") {
      res.set_content(response_body(model_card), "application/json");
      return;
    }
    const Reply missing = json_reply(404, "The model '" + std::string(req.matches[1]) + "' does not exist (this server "
                                                                                      "serves 'trident')");
    res.status = missing.status;
    res.set_content(missing.body, "application/json");
  });
  server.Put("/api", handle);
  server.Post("/api", handle);
  server.Post("/completions", handle);
  server.Post("/v1/completions", handle);
  server.set_payload_max_length(64u << 20);
  server.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  // SO_REUSEADDR (a restart may bind while the last run's connections linger) without
  // cpp-httplib's default SO_REUSEPORT, under which a second server on the same port would
  // start and share its clients instead of failing.
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  int bound = port;
  run_on_rank0_for_all(*m.parallel, [&] {
    bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
    if (bound < 0)
      throw ConfigError("--port " + std::to_string(port) + " --host " + host + ": cannot listen there (the port " +
                        "is in use, or the address is not this machine's)");
  });
  if (!m.rank0()) {
    follow(m, service);
    return 0;
  }
  std::fprintf(stderr, "%s: serving %s (%s, tensor-parallel %d, pid %d) at http://%s:%d/api (PUT)\n", kTool,
               m.dir.string().c_str(), m.backend->name().c_str(), flags.tp, static_cast<int>(getpid()), host.c_str(),
               bound);
  serve(m, service, server, pending);
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_mpi_tool(trident::kTool, &argc, &argv, [&] { return trident::server_main(argc, argv); });
}
