// Token + position embedding (vocab-parallel: a shard owns ids [vocab_start, vocab_start+Vl)).
// Backward groups the rows by token id (a sort), so each wte row's gradient is summed by
// one thread in row order: deterministic without atomics, whatever the thread count.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {
namespace {

void check_shapes(const char* op, const Tensor& tokens, const Tensor& table, const Tensor& rows, int T) {
  check_cpu(op, tokens);
  CPU_CHECK(op, tokens.dtype == DType::I32, "tokens must be int32");
  check_float(op, table);
  check_float(op, rows);
  CPU_CHECK(op, T > 0 && tokens.numel() % T == 0, "tokens ", tokens.numel(), " not a multiple of T=", T);
  CPU_CHECK(op, rows.rows() == tokens.numel() && rows.cols() == table.cols(), "rows ",
            rows.shape.str(), " vs tokens ", tokens.numel(), " and table ", table.shape.str());
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start,
                       const Tensor& wpe, int T, const Tensor& out) {
  const char* op = "embedding_forward";
  check_shapes(op, tokens, wte, out, T);
  const int64_t N = tokens.numel(), C = wte.cols(), V = wte.rows();
  if (!wpe.empty()) {
    check_float(op, wpe);
    CPU_CHECK(op, wpe.cols() == C && wpe.rows() >= T, "wpe ", wpe.shape.str(), " for T=", T);
  }
  const int32_t* tok = tokens.ptr<const int32_t>();
#pragma omp parallel
  {
    float* row = thread_scratch(0, C);
    float* pos = thread_scratch(1, C);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = static_cast<int64_t>(tok[n]) - vocab_start;
      if (id >= 0 && id < V) {
        load_f32(wte, id * C, C, row);
      } else {
        std::fill(row, row + C, 0.f);
      }
      if (!wpe.empty()) {
        load_f32(wpe, (n % T) * C, C, pos);
        for (int64_t c = 0; c < C; ++c) row[c] += pos[c];
      }
      store_f32(out, n * C, C, row);
    }
  }
}

void embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T,
                        const Tensor& dwte, const Tensor& dwpe, std::vector<int64_t>& pairs) {
  const char* op = "embedding_backward";
  check_shapes(op, tokens, dwte, dout, T);
  const int64_t N = tokens.numel(), C = dwte.cols(), V = dwte.rows();
  const int32_t* tok = tokens.ptr<const int32_t>();

  // (local id << 32 | row) for every row whose token this shard owns, sorted: the rows of
  // one id become a contiguous run in increasing row order.
  pairs.clear();  // keeps capacity: no allocation once warm
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = static_cast<int64_t>(tok[n]) - vocab_start;
    if (id >= 0 && id < V) pairs.push_back((id << 32) | n);
  }
  std::sort(pairs.begin(), pairs.end());
  // Start of each run (one per distinct id), reusing the tail of the same vector.
  const int64_t P = static_cast<int64_t>(pairs.size());
  std::vector<int64_t>& runs = pairs;  // run starts are appended after the P pairs
  for (int64_t i = 0; i < P; ++i)
    if (i == 0 || (pairs[i] >> 32) != (pairs[i - 1] >> 32)) runs.push_back(i);
  const int64_t R = static_cast<int64_t>(runs.size()) - P;
  runs.push_back(P);

#pragma omp parallel
  {
    float* acc = thread_scratch(0, C);
    float* row = thread_scratch(1, C);
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t begin = runs[P + r], end = runs[P + r + 1];
      const int64_t id = pairs[begin] >> 32;
      load_f32(dwte, id * C, C, acc);
      for (int64_t i = begin; i < end; ++i) {
        load_f32(dout, (pairs[i] & 0xffffffffLL) * C, C, row);
        for (int64_t c = 0; c < C; ++c) acc[c] += row[c];
      }
      store_f32(dwte, id * C, C, acc);
    }
  }

  if (dwpe.empty()) return;
  check_float(op, dwpe);
  CPU_CHECK(op, dwpe.cols() == C && dwpe.rows() >= T, "dwpe ", dwpe.shape.str(), " for T=", T);
  const int64_t B = N / T;
#pragma omp parallel
  {
    float* acc = thread_scratch(0, C);
    float* row = thread_scratch(1, C);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      load_f32(dwpe, t * C, C, acc);
      for (int64_t b = 0; b < B; ++b) {
        load_f32(dout, (b * T + t) * C, C, row);
        for (int64_t c = 0; c < C; ++c) acc[c] += row[c];
      }
      store_f32(dwpe, t * C, C, acc);
    }
  }
}

}  // namespace trident::cpu
