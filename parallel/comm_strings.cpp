#include "parallel/comm_strings.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace trident {
Tensor host_i32(int32_t* data, int64_t n) { return Tensor(data, Shape{n}, DType::I32, Device::Cpu); }

namespace {
// The 4-byte words that carry `bytes` bytes ((bytes + 3) / 4 would wrap near 2^64, which GCC
// warns of at the copy).
size_t words_for(size_t bytes) { return bytes / 4 + (bytes % 4 != 0); }

// The bytes of `s` into the words that carry them (at least ceil(size / 4) of them). Not
// memcpy: an empty string's words are an empty vector, whose data() may be null.
void copy_into_words(const std::string& s, std::vector<int32_t>& words) {
  std::copy_n(s.data(), s.size(), reinterpret_cast<char*>(words.data()));
}
}  // namespace

void broadcast_string(Comm& c, std::string& s, int root) {
  TRIDENT_CHECK(c.rank() != root || s.size() <= static_cast<size_t>(INT32_MAX - 3), "broadcast_string: ", s.size(),
                " bytes, over the 2 GiB a message holds");
  int32_t n = static_cast<int32_t>(s.size());
  c.broadcast(host_i32(&n, 1), root);
  std::vector<int32_t> buf(words_for(static_cast<size_t>(n)), 0);
  if (c.rank() == root) copy_into_words(s, buf);
  if (!buf.empty()) c.broadcast(host_i32(buf.data(), static_cast<int64_t>(buf.size())), root);
  s.assign(reinterpret_cast<const char*>(buf.data()), n);
}

void send_string(Comm& c, const std::string& s, int peer) {
  int32_t n = static_cast<int32_t>(s.size());
  c.send(host_i32(&n, 1), peer);
  std::vector<int32_t> buf(words_for(s.size()), 0);
  copy_into_words(s, buf);
  if (!buf.empty()) c.send(host_i32(buf.data(), static_cast<int64_t>(buf.size())), peer);
}

std::string recv_string(Comm& c, int peer) {
  int32_t n = 0;
  c.recv(host_i32(&n, 1), peer);
  std::vector<int32_t> buf(words_for(static_cast<size_t>(n)), 0);
  if (!buf.empty()) c.recv(host_i32(buf.data(), static_cast<int64_t>(buf.size())), peer);
  return std::string(reinterpret_cast<const char*>(buf.data()), n);
}

std::string exchange_string(Comm& c, const std::string& out, int send_peer, int recv_peer) {
  int32_t n_out = static_cast<int32_t>(out.size()), n_in = 0;
  c.exchange(optional_sendrecv(host_i32(&n_out, 1), send_peer, host_i32(&n_in, 1), recv_peer));
  std::vector<int32_t> words_out(words_for(out.size()), 0), words_in(words_for(static_cast<size_t>(n_in)), 0);
  copy_into_words(out, words_out);
  c.exchange(optional_sendrecv(host_i32(words_out.data(), static_cast<int64_t>(words_out.size())), send_peer,
                               host_i32(words_in.data(), static_cast<int64_t>(words_in.size())), recv_peer));
  return std::string(reinterpret_cast<const char*>(words_in.data()), static_cast<size_t>(n_in));
}

std::string first_failure(Comm& c, const std::string& mine) {
  // The maximum of (size - rank) over the failing ranks names the lowest of them.
  float v = mine.empty() ? 0.0f : static_cast<float>(c.size() - c.rank());
  c.allreduce(Tensor(&v, Shape{1}, DType::F32, Device::Cpu), ReduceOp::Max);
  if (v == 0) return "";
  std::string failure = mine;
  broadcast_string(c, failure, c.size() - static_cast<int>(v));
  return failure;
}

void run_sharing_first_failure(Comm& c, const std::function<void()>& step) {
  // The message shared goes with its kind's letter: 'S' a storage failure, 'E' any other.
  std::string why;
  std::exception_ptr error;
  try {
    step();
  } catch (const StorageError& e) {
    why = std::string("S") + e.what();
    error = std::current_exception();
  } catch (const std::exception& e) {
    why = std::string("E") + e.what();
    error = std::current_exception();
  }
  const std::string failure = first_failure(c, why);
  if (error) std::rethrow_exception(error);
  if (failure.empty()) return;
  // A full disk that stopped another rank is no error of this rank's input either (exit 3).
  if (failure[0] == 'S') throw StorageError(failure.substr(1));
  throw ConfigError(failure.substr(1));
}

}  // namespace trident
