// kernels/cuda/cuda_dropout.cu on the CPU emulator vs the CPU backend: dropout forward and
// backward on [B*T, row] activations with p = 0 (a copy/cast), 0.1 and 0.5, several
// sequence lengths (the element index restarts every T rows, the sample number counts
// sequences from a 64-bit base), awkward widths, every float dtype and other output dtypes.
// Both sides use philox.h's Philox block of dropout_keep and round x * (1 / (1 - p))
// once, so the results must be the same bits.
//
// The kernel has three paths (units of 16 bytes of input as one vector, units of 4
// elements as one 8-byte vector for fp16/bf16, and element-wise accesses for any sample
// size and alignment), each with 32-bit indices and one tile per block or with 64-bit
// indices and a grid-stride loop. The sweeps here tally which path each case took (the
// launcher's own dropout_path) and require every path of every dtype, with views that
// start off the 16-byte grid (in, out or both), odd row counts, rows that are not a
// multiple of 4, units that straddle rows and samples, tiny grids that make every thread
// loop over tiles, forced 64-bit indices, in-place calls, and guard elements around every
// output that must stay untouched.
// The integer keep threshold is checked against philox_uniform for every 24-bit value.
//
// The host launcher apply() sits in the file's anonymous namespace, so the extraction
// copies it with its kernel launch rewritten for the emulator: the test runs the real
// launcher (its checks, path choice and launch geometry), not a mirror.
//
// What it cannot check: nothing beyond emu_runtime.h's general limits (not timing or
// coalescing); the mask function itself is shared host/device code (tested in tests/unit).
#include "emu_cuda_dropout.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::emu_test {
namespace {

namespace kd = ::trident::cuda::emu_dropout;

constexpr int64_t kGuard = 19;  // elements after every output view that must stay untouched
constexpr int64_t kDefaultGrid = 0x7fffffff;  // apply()'s default: no cap

const char* path_name(kd::DropoutPath p) {
  switch (p) {
    case kd::DropoutPath::kWide: return "wide";
    case kd::DropoutPath::kNarrow: return "narrow";
    case kd::DropoutPath::kScalar: return "scalar";
  }
  return "?";
}

DropoutKey key(float p) {
  DropoutKey drop;
  drop.p = p;
  drop.seed = 0x5EED1234ABCDull;
  drop.site = 3 * kSitesPerLayer + kDropMlpOut;
  drop.sample_base = (uint64_t{1} << 32) + 12345;  // the high word of the sample counts too
  return drop;
}

class EmulatedDropout : public EmuVsCpuDtype {
 protected:
  // A [N, row] view `offset` elements into its own allocation, followed by kGuard
  // elements; every element of the allocation holds `fill`, or random values when NaN
  // is not asked for.
  Tensor view(Shape s, DType t, int64_t offset, bool random_values, float fill = NAN) {
    const Shape whole{offset + s.numel() + kGuard};
    owned_.push_back(random_values ? random(whole, t) : filled(whole, t, fill));
    const Tensor& b = owned_.back().t();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 16, 0u) << "the offsets below assume 16-byte aligned allocations";
    return Tensor(static_cast<char*>(b.data) + offset * static_cast<int64_t>(dtype_size(t)), s, t, b.device);
  }
  // The whole allocation behind a view made by view(): guards included.
  static Tensor with_guards(const Tensor& v, int64_t offset) {
    return Tensor(static_cast<char*>(v.data) - offset * static_cast<int64_t>(dtype_size(v.dtype)),
                  Shape{offset + v.numel() + kGuard}, v.dtype, v.device);
  }

  // Forward and backward of x into outputs of out_dt that start `out_offset` elements
  // into their allocations, on both backends; same bits required, the guard elements and
  // the elements before the view unchanged (they start as NaN on both sides and are
  // compared bit for bit too). Returns the path the launcher took.
  kd::DropoutPath check(const Tensor& x, DType out_dt, int64_t out_offset, int T, const DropoutKey& drop,
                        int64_t max_blocks = kDefaultGrid, bool index64 = false) {
    const int64_t N = x.rows(), row = x.cols();
    Tensor out = view(x.shape, out_dt, out_offset, false), e_out = view(x.shape, out_dt, out_offset, false);
    cpu().dropout_forward(x, out, T, drop);
    kd::apply("dropout_forward", x, e_out, T, drop, nullptr, max_blocks, index64);
    expect_close(e_out, out, Tol{0, 0}, "dropout out (exact)");
    EXPECT_TRUE(same_bytes(with_guards(e_out, out_offset), with_guards(out, out_offset))) << "forward bytes";

    Tensor dx = view(x.shape, out_dt, out_offset, false), e_dx = view(x.shape, out_dt, out_offset, false);
    cpu().dropout_backward(x, dx, T, drop);
    kd::apply("dropout_backward", x, e_dx, T, drop, nullptr, max_blocks, index64);
    expect_close(e_dx, dx, Tol{0, 0}, "dropout dx (exact)");
    EXPECT_TRUE(same_bytes(with_guards(e_dx, out_offset), with_guards(dx, out_offset))) << "backward bytes";

    const uint64_t S = static_cast<uint64_t>(drop.enabled() ? T * row : N * row);
    const kd::DropoutPath path = kd::dropout_path(x, e_out, S);
    ++paths_[static_cast<int>(path)];
    return path;
  }

  void print_paths() const {
    std::printf("[ emulated ] paths taken: wide %d, narrow %d, scalar %d\n", paths_[0], paths_[1], paths_[2]);
  }
  // fp32's wide unit is 4 elements: it has no separate narrow path.
  void expect_every_path() {
    for (int p = 0; p < 3; ++p) {
      if (dt() == DType::F32 && static_cast<kd::DropoutPath>(p) == kd::DropoutPath::kNarrow) {
        EXPECT_EQ(paths_[p], 0);
      } else {
        EXPECT_GT(paths_[p], 0) << "no case took the " << path_name(static_cast<kd::DropoutPath>(p)) << " path";
      }
    }
    print_paths();
  }

  // Output dtypes to try for input dtype dt(): the same, and every other float type.
  std::vector<DType> out_dtypes() const {
    std::vector<DType> v = {dt()};
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      if (t != dt()) v.push_back(t);
    return v;
  }

  std::vector<Buffer> owned_;
  int paths_[3] = {0, 0, 0};
};

TEST_P(EmulatedDropout, SameMaskAndValuesAsCpu) {
  for (float p : {0.0f, 0.1f, 0.5f}) {
    for (int T : {1, 7, 11}) {
      for (int64_t row : awkward_cols()) {
        for (DType out_dt : out_dtypes()) {
          const int64_t B = T == 1 ? 5 : 3, N = B * T;
          SCOPED_TRACE(shape_label(N, row, dt()) + " T=" + std::to_string(T) + " p=" + std::to_string(p) + " out " +
                       dtype_name(out_dt));
          check(view(Shape{N, row}, dt(), 0, true), out_dt, 0, T, key(p));
        }
      }
    }
  }
  print_paths();  // awkward widths: mostly the scalar path; the next test covers each path
}

// Shapes chosen for each path of each dtype (the wide unit is 4 fp32 or 8 fp16/bf16
// elements, the narrow one 4), every alignment of in and out views, 64-bit indices, and
// grids of 1-3 blocks so that threads walk several tiles across samples.
TEST_P(EmulatedDropout, EveryPathLayoutAndGrid) {
  struct Case {
    int T;
    int64_t B, row;
  };
  const Case cases[] = {
      {1, 3, 2048},  // the common case: hidden sizes
      {4, 3, 64},    // S = 256
      {3, 5, 4},     // S = 12: wide for fp32, narrow for 16-bit
      {1, 7, 4},     // S = 4: narrow, odd row count
      {3, 3, 12},    // S = 36: narrow for 16-bit
      {5, 3, 1000},  // S = 5000: wide; tiles span samples
      {3, 3, 1002},  // S = 3006 (rows of 1002): scalar, units straddle rows
      {2, 3, 6},     // S = 12 with rows of 6: the unit straddles rows
      {1, 3, 3},     // S % 4 != 0: scalar, a short last unit per sample
      {7, 3, 17},    // S = 119: scalar
      {3, 1, 130},   // S = 390: scalar, one sample
  };
  // Offsets in elements: 1 and 2 are off every vector grid (2 is 8 bytes of fp32), 4 is 8
  // bytes of fp16/bf16 (narrow vectors only) and 16 bytes of fp32.
  const int64_t in_offsets[] = {0, 1, 2, 4}, out_offsets[] = {0, 1, 4};
  for (const Case& c : cases) {
    for (float p : {0.0f, 0.1f}) {
      for (int64_t in_off : in_offsets) {
        for (int64_t out_off : out_offsets) {
          for (DType out_dt : out_dtypes()) {
            for (int g = 0; g < 4; ++g) {
              // The default (32-bit indices), forced 64-bit indices, and grids of 1 and 3
              // blocks (64-bit indices and a loop over tiles), the latter with equal offsets only.
              const int64_t grid = g < 2 ? kDefaultGrid : g == 2 ? 1 : 3;
              const bool index64 = g == 1;
              if (g >= 2 && in_off != out_off) continue;
              const int64_t N = c.B * c.T;
              SCOPED_TRACE(shape_label(N, c.row, dt()) + " T=" + std::to_string(c.T) + " p=" + std::to_string(p) +
                           " out " + dtype_name(out_dt) + " offsets in " + std::to_string(in_off) + " out " +
                           std::to_string(out_off) + " grid " + std::to_string(grid) + (index64 ? " index64" : ""));
              const Tensor x = view(Shape{N, c.row}, dt(), in_off, true);
              const kd::DropoutPath path = check(x, out_dt, out_off, c.T, key(p), grid, index64);
              // The widest path the sample size and the views' byte offsets allow (the
              // allocations themselves are 16-byte aligned, see view()).
              const uint64_t S = static_cast<uint64_t>(p > 0 ? c.T * c.row : N * c.row);
              const int64_t si = static_cast<int64_t>(dtype_size(dt())), so = static_cast<int64_t>(dtype_size(out_dt));
              const int64_t in_bytes = in_off * si, out_bytes = out_off * so;
              kd::DropoutPath expected = kd::DropoutPath::kScalar;
              const int64_t wide = 16 / si;  // elements of a 16-byte input vector
              if (S % static_cast<uint64_t>(wide) == 0 && in_bytes % 16 == 0 &&
                  out_bytes % std::min<int64_t>(16, wide * so) == 0)
                expected = kd::DropoutPath::kWide;
              else if (wide > 4 && S % 4 == 0 && in_bytes % (4 * si) == 0 && out_bytes % std::min<int64_t>(16, 4 * so) == 0)
                expected = kd::DropoutPath::kNarrow;
              EXPECT_EQ(path, expected) << path_name(path) << " instead of " << path_name(expected);
            }
          }
        }
      }
    }
    owned_.clear();
  }
  expect_every_path();
}

// In place (the model's hidden dropouts run on one tensor): the same bits as the CPU in
// place; with p = 0 the launcher does nothing at all.
TEST_P(EmulatedDropout, InPlace) {
  for (float p : {0.0f, 0.1f, 0.5f}) {
    for (int64_t row : {int64_t{2048}, int64_t{12}, int64_t{17}}) {
      for (int64_t grid : {kDefaultGrid, int64_t{2}}) {
        const int T = 3;
        const int64_t N = 3 * T;
        SCOPED_TRACE(shape_label(N, row, dt()) + " p=" + std::to_string(p) + " grid " + std::to_string(grid));
        Buffer x = random(Shape{N, row}, dt()), e_x = clone(x);
        cpu().dropout_forward(x, x, T, key(p));
        kd::apply("dropout_forward", e_x, e_x, T, key(p), nullptr, grid);
        expect_close(e_x, x, Tol{0, 0}, "dropout in place (exact)");
        EXPECT_TRUE(same_bytes(e_x, x));
      }
    }
  }
}

// The masks are a real dropout: about p of the elements are zero, the rest x / (1 - p).
TEST_P(EmulatedDropout, DropsAboutP) {
  const int T = 16;
  const int64_t N = 4 * T, row = 256;
  Tensor x = view(Shape{N, row}, dt(), 0, false, 1.0f);
  Tensor out = view(Shape{N, row}, DType::F32, 0, false);
  kd::apply("dropout_forward", x, out, T, key(0.25f), nullptr);
  int64_t dropped = 0, kept = 0;
  for (int64_t i = 0; i < N * row; ++i) {
    const float v = out.ptr<float>()[i];
    dropped += v == 0.0f;
    kept += v == 1.0f / 0.75f;
  }
  EXPECT_EQ(dropped + kept, N * row);
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(N * row), 0.25, 0.01);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedDropout, TRIDENT_EMU_DTYPES, dtype_param_name);

// The kernel's integer keep test (word >> 8) >= keep_threshold(p) is dropout_keep's
// philox_uniform(word) >= p, for every 24-bit value the test looks at, at probabilities
// whose threshold p * 2^24 is an integer, just off one, tiny, or at least 1.
TEST(EmulatedDropoutThreshold, MatchesPhiloxUniform) {
  const float ps[] = {0.1f,
                      0.5f,
                      0.25f,
                      std::nextafter(0.5f, 0.0f),
                      std::nextafter(0.5f, 1.0f),
                      3.0f / 16777216.0f,
                      std::nextafter(3.0f / 16777216.0f, 1.0f),
                      1e-30f,
                      0.9999999f,
                      std::nextafter(1.0f, 0.0f),
                      1.0f,
                      1.5f};
  for (float p : ps) {
    const uint32_t thr = ::trident::cuda::keep_threshold(p);
    int64_t bad = 0;
    for (uint32_t y = 0; y < (1u << 24); ++y) {
      const uint32_t word = (y << 8) | (y * 2654435761u >> 24);  // the low 8 bits do not matter
      bad += ((word >> 8) >= thr) != (philox_uniform(word) >= p);
    }
    EXPECT_EQ(bad, 0) << "p=" << p << " threshold " << thr;
  }
}

}  // namespace
}  // namespace trident::emu_test
