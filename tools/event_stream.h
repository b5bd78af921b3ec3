// One streamed HTTP answer (server-sent events) of trident-text-generation-server: the main
// thread, which decodes, pushes events; the HTTP thread that holds the client's connection
// takes them in order and writes them. Closing ends the answer once the events pushed before
// are taken. Decoding never waits for a client: events queue until taken. When a write
// fails (the client left) the HTTP thread says so (leave()); the main thread then stops
// decoding the request (left()), and its later events are dropped.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace trident {

class EventStream {
 public:
  void push(std::string event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_ || left_) return;
      events_.push_back(std::move(event));
    }
    ready_.notify_one();
  }

  // Idempotent.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    ready_.notify_one();
  }

  // From the HTTP thread: the client is gone; the events not taken are dropped.
  void leave() {
    std::lock_guard<std::mutex> lock(mu_);
    left_ = true;
    events_.clear();
  }
  bool left() {
    std::lock_guard<std::mutex> lock(mu_);
    return left_;
  }

  // The next event, waiting for it; none once the stream is closed and every event taken.
  std::optional<std::string> next() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return closed_ || !events_.empty(); });
    if (events_.empty()) return std::nullopt;
    std::string e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::string> events_;
  bool closed_ = false;
  bool left_ = false;
};

}  // namespace trident
