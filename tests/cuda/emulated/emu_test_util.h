// Harness of the emulated kernel tests: the CPU reference backend (whose tensors live in
// host memory, so the emulated kernels read and write them directly), random tensors,
// tensor clones (the reference and the kernel each get their own output with the same
// starting bytes), comparisons with stated tolerances that also record the worst error
// (printed at the end of each test) and byte-identity checks for deterministic ops.
//
// What it cannot check: see emu_runtime.h. A test passing here says the device code
// computes what the CPU twin computes for the launch geometry its mirror uses; the mirrors
// (one per host launcher, in the test files) must be kept in sync with the launchers.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_backend.h"

namespace trident {
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace trident

namespace trident::emu_test {

// |emu - cpu| <= atol + rtol |cpu| per element.
struct Tol {
  double rtol, atol;
};
// As the GPU tests (tests/cuda/cuda_test_util.h): a 16-bit output may differ by a rounding
// step of its format when the fp32 values before rounding differ in the last bits.
inline Tol storage_tol(DType t, double f32_rtol = 1e-5, double f32_atol = 1e-6) {
  switch (t) {
    case DType::F16: return {2.0 * 9.8e-4 + f32_rtol, 1e-3 + f32_atol};
    case DType::BF16: return {2.0 * 7.9e-3 + f32_rtol, 8e-3 + f32_atol};
    default: return {f32_rtol, f32_atol};
  }
}

inline const std::vector<int64_t>& awkward_rows() {
  static const std::vector<int64_t> v = {1, 7, 33};
  return v;
}
// 136 is a multiple of 8: the vectorised (16-byte) paths of fp32 and of the 16-bit types.
inline const std::vector<int64_t>& awkward_cols() {
  static const std::vector<int64_t> v = {1, 3, 17, 65, 130, 136};
  return v;
}

#define TRIDENT_EMU_DTYPES ::testing::Values(::trident::DType::F32, ::trident::DType::F16, ::trident::DType::BF16)
inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }

// Worst errors seen in the current test, by what was compared; printed by the fixture.
struct ErrorLog {
  struct Entry {
    double max_abs = 0, max_rel = 0, rtol = 0, atol = 0;
    int64_t elements = 0;
  };
  std::map<std::string, Entry> entries;
  void note(const std::string& what, double abs_err, double rel_err, Tol tol, int64_t n) {
    Entry& e = entries[what];
    e.max_abs = std::max(e.max_abs, abs_err);
    e.max_rel = std::max(e.max_rel, rel_err);
    e.rtol = tol.rtol;
    e.atol = tol.atol;
    e.elements += n;
  }
  void print_and_clear() {
    for (const auto& [what, e] : entries)
      std::printf("[ emulated ] %-34s max|diff| %-10.3g max rel %-10.3g (rtol %.2g atol %.2g, %lld elements)\n",
                  what.c_str(), e.max_abs, e.max_rel, e.rtol, e.atol, static_cast<long long>(e.elements));
    entries.clear();
  }
};
inline ErrorLog& error_log() {
  static ErrorLog log;
  return log;
}

// Base fixture: the CPU backend, a seeded RNG and the error summary.
class EmuVsCpu : public ::testing::Test {
 protected:
  void TearDown() override { error_log().print_and_clear(); }

  Backend& cpu() {
    if (!cpu_) cpu_ = make_cpu_backend();
    return *cpu_;
  }

  Buffer from_floats(Shape s, DType t, const std::vector<float>& v) {
    EXPECT_EQ(static_cast<int64_t>(v.size()), s.numel());
    Buffer b = cpu().empty(s, t);
    for (size_t i = 0; i < v.size(); ++i) store_from_float(b.t().data, t, i, v[i]);
    return b;
  }
  Buffer random(Shape s, DType t, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (float& x : v) x = dist(rng_);
    return from_floats(s, t, v);
  }
  Buffer filled(Shape s, DType t, float value) {
    return from_floats(s, t, std::vector<float>(static_cast<size_t>(s.numel()), value));
  }
  Buffer ints(Shape s, const std::vector<int32_t>& v) {
    EXPECT_EQ(static_cast<int64_t>(v.size()), s.numel());
    Buffer b = cpu().empty(s, DType::I32);
    if (!v.empty()) std::memcpy(b.t().data, v.data(), v.size() * sizeof(int32_t));
    return b;
  }
  // A second tensor with the same bytes.
  Buffer clone(const Tensor& t) {
    Buffer b = cpu().empty(t.shape, t.dtype);
    if (t.nbytes() > 0) std::memcpy(b.t().data, t.data, t.nbytes());
    return b;
  }

  static std::vector<double> values(const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(t.data, t.dtype, i);
    return v;
  }

  // emu vs cpu element by element (same shape and dtype); NaN or inf fails unless both
  // sides hold the same non-finite value and `allow_nonfinite`.
  void expect_close(const Tensor& emu, const Tensor& ref, Tol tol, const std::string& what,
                    bool allow_nonfinite = false) {
    ASSERT_EQ(emu.numel(), ref.numel()) << what;
    const std::vector<double> e = values(emu), c = values(ref);
    int bad = 0;
    double worst = 0, worst_rel = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const double diff = std::fabs(e[i] - c[i]);
      const bool same_nonfinite =
          allow_nonfinite && ((std::isnan(e[i]) && std::isnan(c[i])) || (std::isinf(c[i]) && e[i] == c[i]));
      if (same_nonfinite) continue;
      if (!(diff <= tol.atol + tol.rtol * std::fabs(c[i]))) {
        if (bad < 5)
          ADD_FAILURE() << what << ": element " << i << " of " << emu.shape.str() << ": emulated " << e[i]
                        << " cpu " << c[i] << " (|diff| " << diff << ")";
        ++bad;
      }
      if (!(diff <= worst)) worst = diff;
      const double rel = diff / std::max(std::fabs(c[i]), 1e-30);
      if (!(rel <= worst_rel) && std::fabs(c[i]) > tol.atol) worst_rel = rel;
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " elements out of tolerance (rtol "
                      << tol.rtol << ", atol " << tol.atol << ", worst |diff| " << worst << ")";
    error_log().note(what, worst, worst_rel, tol, static_cast<int64_t>(c.size()));
  }
  void expect_near(double emu, double ref, double abs_tol, const std::string& what) {
    EXPECT_NEAR(emu, ref, abs_tol) << what;
    error_log().note(what, std::fabs(emu - ref), std::fabs(emu - ref) / std::max(std::fabs(ref), 1e-300),
                     Tol{0, abs_tol}, 1);
  }
  static bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
  }

  std::mt19937_64 rng_{20240601};
  std::unique_ptr<Backend> cpu_;
};

class EmuVsCpuDtype : public EmuVsCpu, public ::testing::WithParamInterface<DType> {
 protected:
  DType dt() const { return GetParam(); }
};

// "N=7 C=65 fp16" for SCOPED_TRACE.
inline std::string shape_label(int64_t N, int64_t C, DType t) {
  return "N=" + std::to_string(N) + " C=" + std::to_string(C) + " " + dtype_name(t);
}

}  // namespace trident::emu_test
