// The hand-over between trident-text-generation-server's HTTP threads and its main thread,
// which alone touches the model, the GPU and MPI (MPI_THREAD_FUNNELED): an HTTP thread
// submits a request's body and waits; the main thread takes requests one at a time, in the
// order they came, and answers each.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "tools/event_stream.h"

namespace trident {

struct Reply {
  int status = 200;
  std::string body;  // JSON
  // A streamed answer (status 200): its events instead of `body`, pushed as they come.
  std::shared_ptr<EventStream> events;
};

class PendingRequests {
 public:
  struct Request {
    std::string path;    // "/api", "/completions", ...
    std::string body;
    std::string client;  // its address, for the log
    std::promise<Reply> reply;
  };

  // From an HTTP thread: the main thread's reply, or `closed` once close() was called.
  Reply submit(std::string path, std::string body, std::string client, const Reply& closed) {
    std::future<Reply> reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return closed;
      queue_.push_back(Request{std::move(path), std::move(body), std::move(client), {}});
      reply = queue_.back().reply.get_future();
    }
    ready_.notify_one();
    return reply.get();
  }

  // From the main thread: the oldest request, or none after `wait` without one.
  std::optional<Request> next(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ready_.wait_for(lock, wait, [&] { return !queue_.empty(); })) return std::nullopt;
    Request r = std::move(queue_.front());
    queue_.pop_front();
    return r;
  }

  // Answers every request still waiting with `closed`, and every later one.
  void close(const Reply& closed) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (Request& r : queue_) r.reply.set_value(closed);
    queue_.clear();
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Request> queue_;
  bool closed_ = false;
};

}  // namespace trident
