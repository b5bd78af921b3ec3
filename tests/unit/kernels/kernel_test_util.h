// Helpers for the CPU kernel tests: move host vectors in and out of backend tensors of any
// dtype, random data, closeness checks, and central finite differences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace trident::test {

using Vec = std::vector<double>;

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The values a tensor of dtype t actually holds after storing v (rounded to t).
inline Vec rounded(const std::vector<float>& v, DType t) {
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t slot = 0;
    store_from_float(&slot, t, 0, v[i]);
    out[i] = load_as_float(&slot, t, 0);
  }
  return out;
}

inline Buffer upload(Backend& be, const std::vector<float>& v, Shape s, DType t) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), s.numel());
  Buffer b = be.empty(s, t);
  std::vector<char> host(b.t().nbytes());
  for (size_t i = 0; i < v.size(); ++i) store_from_float(host.data(), t, i, v[i]);
  be.copy_from_host(b, host.data());
  return b;
}

inline Buffer upload_i32(Backend& be, const std::vector<int32_t>& v, Shape s) {
  Buffer b = be.empty(s, DType::I32);
  be.copy_from_host(b, v.data());
  return b;
}

inline Vec download(Backend& be, const Tensor& t) {
  std::vector<char> host(t.nbytes());
  be.copy_to_host(host.data(), t);
  Vec out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_float(host.data(), t.dtype, i);
  return out;
}

// Raw bytes of a tensor, for bit-identical comparisons.
inline std::vector<char> bytes(Backend& be, const Tensor& t) {
  std::vector<char> host(t.nbytes());
  be.copy_to_host(host.data(), t);
  return host;
}

// |got - want| <= atol + rtol |want| element-wise; reports the worst element.
inline void expect_close(const Vec& got, const Vec& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::fabs(got[i] - want[i]) - (atol + rtol * std::fabs(want[i]));
    if (!(excess <= 0) && (excess > worst_excess || std::isnan(excess))) {
      worst_excess = std::isnan(excess) ? INFINITY : excess;
      worst = i;
    }
  }
  EXPECT_LT(worst_excess, 0) << what << ": element " << worst << " got " << got[worst] << " want "
                             << want[worst] << " (atol " << atol << ", rtol " << rtol << ")";
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Central differences of a scalar function of x: (f(x + h e_i) - f(x - h e_i)) / 2h.
inline Vec fd_grad(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline Vec to_vec(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Tolerance scale for a stored dtype: about 4 units in the last place of the output.
inline double dtype_tol(DType t) {
  switch (t) {
    case DType::F32: return 1e-5;
    case DType::F16: return 4e-3;
    case DType::BF16: return 3e-2;
    default: return 0;
  }
}

inline const char* dtype_label(DType t) { return dtype_name(t); }

// gtest parameter printer for DType.
struct DTypeName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const { return dtype_name(info.param); }
};

inline const auto kFloatTypes = ::testing::Values(DType::F32, DType::F16, DType::BF16);

}  // namespace trident::test
