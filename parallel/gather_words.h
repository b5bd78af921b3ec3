// 8-byte values (uint64_t, double) gathered from every rank of a Comm as int32 words: the
// communicators carry no 64-bit type. For the trainer's small reports (memory, energy, loss
// sums in double), which must add up exactly and in rank order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel/comm.h"

namespace trident {

// Every rank's 8-byte `values` (the same count on each), rank after rank, gathered as int32
// words (the communicators carry no 64-bit type). This rank's slots hold its own values already:
// trident-plan's dry run gathers nothing.
template <typename T>
std::vector<T> gather_words(Comm& comm, std::vector<T> values) {
  static_assert(sizeof(T) == 2 * sizeof(int32_t), "8-byte values");
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<T> all(values.size() * static_cast<size_t>(comm.size()));
  std::copy(values.begin(), values.end(), all.begin() + n * comm.rank());
  comm.allgather(Tensor(values.data(), Shape{2 * n}, DType::I32, Device::Cpu),
                 Tensor(all.data(), Shape{2 * n * comm.size()}, DType::I32, Device::Cpu));
  return all;
}

template <typename T>
std::vector<T> gather_words(Comm& comm, T value) {
  return gather_words(comm, std::vector<T>{value});
}

}  // namespace trident
