// kernels/cuda/cuda_embedding.cu on the CPU emulator vs the CPU backend: the token +
// position embedding forward and its backward (dwte += by token, dwpe += over the batch)
// on a vocab-parallel shard (ids outside it read as zero and get no gradient), with
// repeated tokens, with and without position embeddings, awkward widths (the dwte block
// size follows the width; the forward takes 16-byte vectors a warp per row where the width
// allows, element-wise otherwise), every float dtype and fp32 gradients for 16-bit
// activations.
// The backward adds each id's rows in increasing row order, as the CPU twin does, so the
// gradients must be the same bits; also for a frequent token whose run spans several of the
// dwte block's staged chunks, at widths a block covers in more than one pass.
//
// What it cannot check: CUB's radix sort (replaced here by a stable sort on the host,
// which is what cub::DeviceRadixSort::SortPairs computes for these keys) and its scratch.
#include <algorithm>
#include <numeric>

#include "emu_cuda_embedding.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::cuda::emu_embedding {
namespace {

// The host launchers' kernel choices (forward_typed, backward_sums_typed, extracted with the
// kernels; true: the 16-byte kernels ran); the backward's keys and sort mirror its launcher in
// kernels/cuda/cuda_embedding.cu: KEEP IN SYNC with that file.
bool embedding_forward(const Tensor& tokens, const Tensor& wte, int64_t vocab_start, const Tensor& wpe, int T,
                       const Tensor& out) {
  if (tokens.numel() * wte.cols() == 0) return false;
  return forward_typed(tokens, wte, vocab_start, wpe, T, out, nullptr);
}

bool embedding_backward(const Tensor& dout, const Tensor& tokens, int64_t vocab_start, int T, const Tensor& dwte,
                        const Tensor& dwpe) {
  const int64_t N = tokens.numel(), C = dwte.cols(), V = dwte.rows();
  if (N == 0 || C == 0) return false;
  std::vector<int32_t> keys_in(N, -7), rows_in(N, -7);
  emu::launch(dim3(grid_for(N, 256)), dim3(256), 0, embedding_keys_kernel, tokens.ptr<int32_t>(), vocab_start, V, N,
              keys_in.data(), rows_in.data());
  // cub::DeviceRadixSort::SortPairs over bits [0, bits_for(V)): a stable sort by key.
  std::vector<int32_t> order(N);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return keys_in[a] < keys_in[b]; });
  std::vector<int32_t> keys_out(N), rows_out(N);
  for (int64_t i = 0; i < N; ++i) {
    keys_out[i] = keys_in[order[i]];
    rows_out[i] = rows_in[order[i]];
  }
  return backward_sums_typed(dout, keys_out.data(), rows_out.data(), V, T, dwte, dwpe, nullptr);
}

}  // namespace
}  // namespace trident::cuda::emu_embedding

namespace trident::emu_test {
namespace {

namespace kb = ::trident::cuda::emu_embedding;

class EmulatedEmbedding : public EmuVsCpuDtype {
 protected:
  // frequent: the share of tokens that are one id of the shard (a frequent token's long run).
  void check(int B, int T, int64_t C, DType grad_dt, bool with_pos, double frequent = 0) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " " +
                 dtype_name(dt()) + " grads " + dtype_name(grad_dt) + (with_pos ? " with wpe" : "") +
                 " frequent " + std::to_string(frequent));
    const int64_t V = 50, vocab_start = 50, N = static_cast<int64_t>(B) * T;  // shard 1 of 3
    const int32_t repeated = static_cast<int32_t>(vocab_start + 7);
    std::uniform_int_distribution<int32_t> id(0, 149);
    std::bernoulli_distribution is_frequent(frequent);
    std::vector<int32_t> tok(static_cast<size_t>(N));
    for (auto& t : tok) t = is_frequent(rng_) ? repeated : id(rng_);
    if (N > 2) tok[N - 1] = tok[0] = repeated;  // a repeated id in the shard
    Buffer tokens = ints(Shape{N}, tok);
    Buffer wte = random(Shape{V, C}, dt()), wpe = random(Shape{T + 3, C}, dt());
    Buffer out = filled(Shape{N, C}, dt(), NAN), e_out = clone(out);
    const Tensor pos = with_pos ? wpe.t() : Tensor();
    cpu().embedding_forward(tokens, wte, vocab_start, pos, T, out);
    const bool rows = kb::embedding_forward(tokens, wte, vocab_start, pos, T, e_out);
    EXPECT_EQ(rows, C % (16 / static_cast<int64_t>(dtype_size(dt()))) == 0) << "the 16-byte row kernel";
    expect_close(e_out, out, Tol{0, 0}, "embedding out (exact)");  // one add, one rounding

    Buffer dout = random(Shape{N, C}, dt());
    Buffer dwte = random(Shape{V, C}, grad_dt), dwpe = random(Shape{T + 3, C}, grad_dt);  // += into these
    Buffer e_dwte = clone(dwte), e_dwpe = clone(dwpe);
    cpu().embedding_backward(dout, tokens, vocab_start, T, dwte, with_pos ? dwpe.t() : Tensor());
    const bool vec = kb::embedding_backward(dout, tokens, vocab_start, T, e_dwte, with_pos ? e_dwpe.t() : Tensor());
    EXPECT_EQ(vec, rows) << "the 16-byte backward kernels";
    expect_close(e_dwte, dwte, Tol{0, 0}, std::string("embedding dwte (exact) ") + dtype_name(grad_dt));
    expect_close(e_dwpe, dwpe, Tol{0, 0}, std::string("embedding dwpe (exact) ") + dtype_name(grad_dt));
  }
};

TEST_P(EmulatedEmbedding, ForwardAndBackward) {
  for (auto [B, T] : {std::pair{1, 1}, std::pair{1, 7}, std::pair{3, 11}}) {
    for (int64_t C : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{65}, int64_t{300}, int64_t{64}, int64_t{328}}) {
      check(B, T, C, dt(), true);
      if (C == 17 || C == 64) check(B, T, C, dt(), false);
    }
  }
  check(3, 5, 1096, dt(), true);  // the forward's rows past one batch of 4 vectors a lane, the last partial
  if (dt() != DType::F32) {
    check(3, 11, 65, DType::F32, true);
    check(3, 11, 64, DType::F32, true);  // f32 tables, 16-byte dout vectors
  }
}

// 600 rows, 70% of them one id: a run of ~420 rows spans two 256-thread chunks and ends
// inside a load batch. The widths take more than one pass of the widest (256-thread) dwte
// block: 259 vectors of 16 bytes (the 16-byte kernel), 513 elements (the scalar one).
TEST_P(EmulatedEmbedding, FrequentTokenAcrossChunks) {
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(dt()));
  check(6, 100, 259 * vec, dt(), true, 0.7);
  check(6, 100, 513, dt(), false, 0.7);
  if (dt() != DType::F32) check(6, 100, 259 * vec, DType::F32, true, 0.7);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedEmbedding, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
