// A decoding step's sampled draw on the device (Backend::sample_logits): each row's token,
// drawn by its uniform from the softmax at a temperature under top-k and top-p, as
// core/token_draw.h's draw_token does on the host, so that B ids leave the device rather
// than B rows of logits.
//
// draw_token sorts the tokens by decreasing logit (ties by the lower id) and walks the
// running sum of their weights. This kernel sorts nothing. Each logit becomes a 32-bit key
// whose unsigned order is the logits' order (NaN: key 0, never a candidate), and every
// question draw_token answers by walking is one of the same kind: at which token of that
// order does the running sum of a weight first exceed a target? Top-k's k-th token is
// where the count passes k - 1; top-p's last kept token where the weight passes top_p times
// the total; the drawn token where it passes the uniform times the kept weight. `crossing`
// answers it by a radix descent over the key, 4 bits a level (8 passes over the
// candidates): per level, the weight of each of the 16 digit values among the keys that
// match the digits chosen so far, then the digit where the sum from the top passes the
// target. Ties (equal keys) are then ordered by id (`tie_at`).
//
// A row a block of 1024 threads (64 registers: the passes keep 16 digit sums a thread). A
// row may come in segments (a TP group's logits gathered rank-major; backend.h). Each pass
// reads the row from L2 (a vocabulary of 50257 bf16 logits is 100 KB); once the candidates
// number at most kListCap (top-k's, or top-p's kept tokens), they are copied in id order
// to shared memory and the later passes read that list instead. Sums are fixed-order
// (thread, then warp, then the warps in order), so a row draws the same token on every
// run. They are float sums, where draw_token's are double: the two can differ where a
// target lies within ~1e-6 of a boundary between two tokens.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kSampleBlock = 1024;
constexpr int kSampleWarps = kSampleBlock / 32;
constexpr int kDigitBits = 4;
constexpr int kDigitValues = 1 << kDigitBits;
constexpr int kListCap = 4096;  // candidates kept in shared memory: 32 KB

// The key of a logit: larger logits, larger keys (-0 and +0 one key, as they compare equal);
// NaN 0, below every other key (-inf's is 0x007fffff).
__device__ __forceinline__ uint32_t order_key(float x) {
  if (x != x) return 0u;
  const uint32_t bits = __float_as_uint(x == 0.f ? 0.f : x);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

struct SampleShared {
  float warp_parts[kSampleWarps][kDigitValues];
  unsigned warp_masks[kSampleWarps];
  float digit_weight[kDigitValues];  // a level's weight by digit value
  unsigned digit_mask;               // a level's digit values that some candidate has
  float floats[kSampleWarps];        // block_sum's
  int ints[kSampleWarps];            // the scans'
  uint32_t keys[kSampleWarps];       // the key reductions'
  int64_t found;                     // tie_at's id
  int list_size;
  uint32_t list_key[kListCap];
  int32_t list_id[kListCap];
};

// The candidates of a row: the tokens whose key is at least `lo` (lo >= 1 leaves NaN out),
// in the row (the logits in global memory: `valid` columns in segments of Vl, `stride`
// elements apart) or, once `listed`, in the shared list.
template <typename T>
struct Candidates {
  const T* row;
  int valid, Vl;  // the launcher checks that ids fit an int
  int64_t stride;
  uint32_t lo;
  bool listed;
  const SampleShared* sh;

  // f(key, id) for each candidate, the block's threads striding over them.
  template <typename F>
  __device__ __forceinline__ void each(F f) const {
    if (listed) {
      for (int i = threadIdx.x; i < sh->list_size; i += blockDim.x)
        if (sh->list_key[i] >= lo) f(sh->list_key[i], sh->list_id[i]);
    } else {  // one logit a thread at a time: the passes are bound by the work on each, not by loads
      const T* segment = row;
      for (int first = 0; first < valid; first += Vl, segment += stride) {
        const int count = valid - first < Vl ? valid - first : Vl;
        for (int j = threadIdx.x; j < count; j += blockDim.x) {
          const uint32_t key = order_key(to_f32(segment[j]));
          if (key >= lo) f(key, first + j);
        }
      }
    }
  }
  // The same over this thread's own contiguous slice of the ids, in id order (thread t's
  // slice precedes thread t + 1's), for the scans.
  template <typename F>
  __device__ __forceinline__ void each_in_order(F f) const {
    const int n = listed ? sh->list_size : valid;
    const int per = (n + blockDim.x - 1) / blockDim.x, begin = threadIdx.x * per;
    const int end = begin + per < n ? begin + per : n;
    if (listed) {
      for (int i = begin; i < end; ++i)
        if (sh->list_key[i] >= lo) f(sh->list_key[i], sh->list_id[i]);
      return;
    }
    int column = begin % Vl;  // of segment begin / Vl
    const T* segment = row + (begin / Vl) * stride;
    for (int i = begin; i < end; ++i) {
      const uint32_t key = order_key(to_f32(segment[column]));
      if (key >= lo) f(key, i);
      if (++column == Vl) {
        column = 0;
        segment += stride;
      }
    }
  }
};

// The block's largest (kMax) or smallest key; every thread gets it.
template <bool kMax>
__device__ uint32_t block_extreme_key(uint32_t v, uint32_t* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const auto pick = [](uint32_t a, uint32_t b) { return kMax ? (a > b ? a : b) : (a < b ? a : b); };
  for (int o = 16; o > 0; o >>= 1) v = pick(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = shared[lane];
  for (int o = 16; o > 0; o >>= 1) v = pick(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

// The sum of the threads' v before this one's (in thread order), and the block's total.
__device__ int block_exclusive_scan(int v, int* shared, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;  // the warp's inclusive scan
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) shared[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = shared[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    shared[lane] = w;  // the warps' inclusive scan
  }
  __syncthreads();
  const int before = (warp > 0 ? shared[warp - 1] : 0) + x - v;
  total = shared[kSampleWarps - 1];
  __syncthreads();
  return before;
}

// One level of a descent: the block's weight of each digit value (sh.digit_weight) and the
// values present (sh.digit_mask) from each thread's parts, summed in a fixed order.
__device__ void digit_totals(float (&part)[kDigitValues], unsigned mask, SampleShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 0; d < kDigitValues; ++d) part[d] = warp_sum(part[d]);
  for (int o = 16; o > 0; o >>= 1) mask |= __shfl_xor_sync(0xffffffffu, mask, o);
  if (lane == 0) {
#pragma unroll
    for (int d = 0; d < kDigitValues; ++d) sh.warp_parts[warp][d] = part[d];
    sh.warp_masks[warp] = mask;
  }
  __syncthreads();
  if (threadIdx.x < kDigitValues) {
    float s = 0.f;
    for (int w = 0; w < kSampleWarps; ++w) s += sh.warp_parts[w][threadIdx.x];
    sh.digit_weight[threadIdx.x] = s;
  } else if (threadIdx.x == kDigitValues) {
    unsigned m = 0;
    for (int w = 0; w < kSampleWarps; ++w) m |= sh.warp_masks[w];
    sh.digit_mask = m;
  }
  __syncthreads();
}

// Where the running weight of the candidates, in decreasing key order, first exceeds
// `target`: the key of that token's tie group and the weight of all larger keys. Not found
// when the whole weight is at most the target. A level whose digits' sums fall short of
// the target that their parent's sum passed (the float sums' order differs) takes its last
// digit: the group's last key.
struct Crossing {
  bool found;
  uint32_t key;
  float before;
};

template <typename Cands, typename Weight>
__device__ Crossing crossing(const Cands& c, Weight weight, float target, SampleShared& sh) {
  uint32_t prefix = 0;
  float before = 0.f;
  for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    float part[kDigitValues];
#pragma unroll
    for (int d = 0; d < kDigitValues; ++d) part[d] = 0.f;
    unsigned mask = 0;
    const int above = shift + kDigitBits;  // the bits chosen so far are those at and above it
    c.each([&](uint32_t key, int64_t) {
      if (above < 32 && (key >> above) != (prefix >> above)) return;
      const unsigned digit = (key >> shift) & (kDigitValues - 1);
      const float w = weight(key);
      mask |= 1u << digit;
#pragma unroll
      for (int d = 0; d < kDigitValues; ++d) part[d] += digit == static_cast<unsigned>(d) ? w : 0.f;
    });
    digit_totals(part, mask, sh);
    int chosen = -1, last = -1;
    float chosen_before = 0.f, last_before = 0.f, sum = before;
    for (int d = kDigitValues - 1; d >= 0; --d) {
      if (!((sh.digit_mask >> d) & 1u)) continue;
      if (sum + sh.digit_weight[d] > target) {
        chosen = d;
        chosen_before = sum;
        break;
      }
      last = d;
      last_before = sum;
      sum += sh.digit_weight[d];
    }
    if (chosen < 0) {
      if (above == 32 || last < 0) return Crossing{false, 0u, sum};
      chosen = last;
      chosen_before = last_before;
    }
    prefix |= static_cast<uint32_t>(chosen) << shift;
    before = chosen_before;
  }
  return Crossing{true, prefix, before};
}

// The j-th (from 0) candidate of key `key` in id order, or the last when there are fewer;
// and how many there are (at least 1 for a candidate's key).
struct Tie {
  int64_t id;
  int count;
};

template <typename Cands>
__device__ Tie tie_at(const Cands& c, uint32_t key, int64_t j, SampleShared& sh) {
  int mine = 0;
  c.each_in_order([&](uint32_t k, int64_t) { mine += k == key; });
  int count;
  const int first = block_exclusive_scan(mine, sh.ints, count);
  const int64_t want = j < count - 1 ? j : count - 1;
  if (want >= first && want < first + mine) {
    int64_t seen = first;
    c.each_in_order([&](uint32_t k, int64_t id) {
      if (k != key) return;
      if (seen == want) sh.found = id;
      ++seen;
    });
  }
  __syncthreads();
  const Tie t{sh.found, count};
  __syncthreads();
  return t;
}

// Copies the row's candidates to the shared list in id order when there are at most
// kListCap of them; whether it did.
template <typename Cands>
__device__ bool list_candidates(const Cands& c, SampleShared& sh) {
  int mine = 0;
  c.each_in_order([&](uint32_t, int64_t) { ++mine; });
  int count;
  int at = block_exclusive_scan(mine, sh.ints, count);
  if (count > kListCap) return false;
  c.each_in_order([&](uint32_t key, int64_t id) {
    sh.list_key[at] = key;
    sh.list_id[at] = static_cast<int32_t>(id);
    ++at;
  });
  if (threadIdx.x == 0) sh.list_size = count;
  __syncthreads();
  return true;
}

// The tie index a target reaches within a tie group of weight w each, `before` the group.
__device__ __forceinline__ int64_t tie_index(float target, float before, float w) {
  if (!(w > 0.f)) return 0;
  const float j = floorf((target - before) / w);
  return j > 0.f ? static_cast<int64_t>(j) : 0;
}

// One row a block: see the file's comment. Row n's columns are segments of Vl, the k-th at
// logits + (k gridDim.x + n) Vl. `log2e_over_t` = log2(e) / temperature.
template <typename T>
__global__ void __launch_bounds__(kSampleBlock)
    sample_logits_kernel(const T* logits, int Vl, int valid, float log2e_over_t, int top_k, const RowDraw* draws,
                         int32_t* ids) {
  __shared__ SampleShared sh;
  const int n = blockIdx.x;
  Candidates<T> c{logits + static_cast<int64_t>(n) * Vl, valid, Vl, static_cast<int64_t>(gridDim.x) * Vl, 1u, false,
                  &sh};

  uint32_t top = 0;
  c.each([&](uint32_t key, int64_t) { top = key > top ? key : top; });
  top = block_extreme_key<true>(top, sh.keys);
  if (top == 0u) {  // every logit NaN
    if (threadIdx.x == 0) ids[n] = 0;
    return;
  }
  const float top_value = key_value(top);
  const auto one = [](uint32_t) { return 1.f; };
  const auto weight = [=](uint32_t key) { return exp2f((key_value(key) - top_value) * log2e_over_t); };

  // Top-k 1 is greedy, as draw_token and Megatron: the first id of the largest logit.
  if (top_k == 1) {
    c.lo = top;
    const Tie first = tie_at(c, top, 0, sh);
    if (threadIdx.x == 0) ids[n] = static_cast<int32_t>(first.id);
    return;
  }
  // Top-k: the candidates are the keys down to the k-th's (its ties included); fewer than k
  // tokens: all of them.
  if (top_k > 0) {
    const Crossing kth = crossing(c, one, static_cast<float>(top_k - 1), sh);
    if (kth.found) c.lo = kth.key;
  }
  c.listed = list_candidates(c, sh);
  float mine = 0.f;
  c.each([&](uint32_t key, int64_t) { mine += weight(key); });
  const float total = block_sum(mine, sh.floats);

  // Top-p: the last kept token (its key and tie index) and the kept weight. Keys below
  // it leave the candidates; its tie group's later ids are cut at the draw.
  const double top_p = draws[n].top_p;
  float kept = total;
  uint32_t last_key = 0;
  int64_t last_tie = INT64_MAX;
  if (top_p > 0 && top_p < 1) {
    const float target = static_cast<float>(top_p * total);
    const Crossing p = crossing(c, weight, target, sh);
    if (p.found) {
      const float w = weight(p.key);
      const int64_t j = tie_index(target, p.before, w);
      const int ties = tie_at(c, p.key, j, sh).count;
      last_key = p.key;
      last_tie = j < ties - 1 ? j : ties - 1;
      kept = p.before + static_cast<float>(last_tie + 1) * w;
      c.lo = p.key;
      if (!c.listed) c.listed = list_candidates(c, sh);
    }
  }

  // The draw.
  const float target = static_cast<float>(draws[n].uniform * kept);
  const Crossing d = crossing(c, weight, target, sh);
  uint32_t key;
  int64_t j;
  if (d.found) {
    key = d.key;
    j = tie_index(target, d.before, weight(key));
    if (key == last_key && j > last_tie) j = last_tie;
  } else if (last_key != 0u) {  // past the kept weight by rounding: the last kept token
    key = last_key;
    j = last_tie;
  } else {  // the same without top-p: the last candidate
    uint32_t lowest = 0xffffffffu;
    c.each([&](uint32_t k, int64_t) { lowest = k < lowest ? k : lowest; });
    key = block_extreme_key<false>(lowest, sh.keys);
    j = INT64_MAX;
  }
  const Tie drawn = tie_at(c, key, j, sh);
  if (threadIdx.x == 0) ids[n] = static_cast<int32_t>(drawn.id);
}

}  // namespace

void sample_logits(const Tensor& logits, int64_t vocab_valid, double temperature, int top_k,
                   const std::vector<RowDraw>& draws, const Tensor& ids, CachingAllocator& scratch, cudaStream_t s) {
  const char* op = "sample_logits";
  TRIDENT_CHECK(is_float(logits.dtype), op, ": logits must be a float tensor");
  const int64_t N = static_cast<int64_t>(draws.size()), Vl = logits.cols();
  TRIDENT_CHECK(N >= 1 && logits.rows() % N == 0, op, ": logits ", logits.shape.str(), " are not segments of ", N,
                " rows");
  TRIDENT_CHECK(vocab_valid >= 1 && vocab_valid <= logits.rows() / N * Vl, op, ": vocab_valid ", vocab_valid,
                " for logits ", logits.shape.str(), " in ", logits.rows() / N, " segment(s)");
  TRIDENT_CHECK(logits.numel() <= INT32_MAX, op, ": logits ", logits.shape.str(), " (ids and columns are ints)");
  TRIDENT_CHECK(temperature > 0 && std::isfinite(temperature), op, ": temperature ", temperature,
                " (greedy draws take logits_argmax)");
  TRIDENT_CHECK(top_k >= 0, op, ": top_k ", top_k);
  for (const RowDraw& d : draws)
    TRIDENT_CHECK(d.uniform >= 0 && d.uniform < 1 && d.top_p >= 0 && d.top_p <= 1, op, ": uniform ", d.uniform,
                  ", top_p ", d.top_p);
  TRIDENT_CHECK(ids.dtype == DType::I32 && ids.numel() == N, op, ": ids must be int32 [", N, "]");
  // The draws go up with the launch (a few bytes a row; pageable memory, so the copy has
  // read them when it returns).
  Scratch on_device(scratch, draws.size() * sizeof(RowDraw));
  CUDA_CHECK(cudaMemcpyAsync(on_device.as<void>(), draws.data(), draws.size() * sizeof(RowDraw),
                             cudaMemcpyHostToDevice, s));
  const float log2e_over_t = static_cast<float>(1.4426950408889634 / temperature);
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    sample_logits_kernel<T><<<static_cast<unsigned>(N), kSampleBlock, 0, s>>>(
        logits.ptr<T>(), static_cast<int>(Vl), static_cast<int>(vocab_valid), log2e_over_t, top_k,
        on_device.as<RowDraw>(), ids.ptr<int32_t>());
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
