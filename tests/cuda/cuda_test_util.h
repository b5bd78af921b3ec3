// Shared harness for the GPU-vs-CPU tests: a CPU reference backend and a CUDA backend,
// tensors uploaded with identical bytes to both, and element-wise comparison with
// tolerances stated per dtype. Every test skips (GTEST_SKIP) when no GPU is visible, so
// the binary passes on machines without one.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/scoped_env.h"

namespace trident {
// Readable parameter values in gtest/ctest output ("fp16" rather than "1-byte object <01>").
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace trident

namespace trident::cuda_test {

// At the top of every test body (fixtures call it from SetUp()).
#define TRIDENT_SKIP_WITHOUT_GPU() \
  if (::trident::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible"

using test::ScopedEnv;

// The same tensor on both backends.
struct Pair {
  Buffer cpu, gpu;
  Shape shape() const { return cpu.t().shape; }
  DType dtype() const { return cpu.t().dtype; }
};

// Tolerances: |gpu - cpu| <= atol + rtol * |cpu|. A 16-bit output may differ by one
// rounding step of its format when the fp32 values before rounding differ in the last
// bits, so rtol covers two ulps of the storage type plus the fp32 error of the op.
struct Tol {
  double rtol, atol;
};
inline Tol storage_tol(DType t, double f32_rtol = 1e-5, double f32_atol = 1e-6) {
  switch (t) {
    case DType::F16: return {2.0 * 9.8e-4 + f32_rtol, 1e-3 + f32_atol};
    case DType::BF16: return {2.0 * 7.9e-3 + f32_rtol, 8e-3 + f32_atol};
    default: return {f32_rtol, f32_atol};
  }
}

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return dtype_name(info.param);
}

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    TRIDENT_SKIP_WITHOUT_GPU();
    cpu_ = make_cpu_backend();
    // Plain fp32 GEMMs: the fp32 tolerances assume no TF32 (the product's default is TF32).
    gpu_ = make_cuda_backend(0, {.allow_tf32 = false});
  }

  Backend& cpu() { return *cpu_; }
  Backend& gpu() { return *gpu_; }

  // Host floats -> bytes of dtype t -> both backends (identical bytes on both).
  Pair upload(Shape s, DType t, const std::vector<float>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), s.numel());
    std::vector<unsigned char> bytes(static_cast<size_t>(s.numel()) * dtype_size(t));
    for (size_t i = 0; i < values.size(); ++i) store_from_float(bytes.data(), t, i, values[i]);
    Pair p{cpu_->empty(s, t), gpu_->empty(s, t)};
    if (!bytes.empty()) {
      cpu_->copy_from_host(p.cpu, bytes.data());
      gpu_->copy_from_host(p.gpu, bytes.data());
    }
    return p;
  }
  Pair random(Shape s, DType t, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (float& x : v) x = dist(rng_);
    return upload(s, t, v);
  }
  Pair filled(Shape s, DType t, float value) {
    return upload(s, t, std::vector<float>(static_cast<size_t>(s.numel()), value));
  }
  Pair ints(Shape s, const std::vector<int32_t>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), s.numel());
    Pair p{cpu_->empty(s, DType::I32), gpu_->empty(s, DType::I32)};
    if (!values.empty()) {
      cpu_->copy_from_host(p.cpu, values.data());
      gpu_->copy_from_host(p.gpu, values.data());
    }
    return p;
  }

  // Any tensor of a backend, as floats on the host.
  static std::vector<float> host(Backend& be, const Tensor& t) {
    std::vector<unsigned char> bytes(t.nbytes());
    if (!bytes.empty()) be.copy_to_host(bytes.data(), t);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_float(bytes.data(), t.dtype, i);
    return out;
  }
  std::vector<float> host_cpu(const Pair& p) { return host(*cpu_, p.cpu); }
  std::vector<float> host_gpu(const Pair& p) { return host(*gpu_, p.gpu); }

  // GPU result vs CPU result, element by element; reports the first few mismatches.
  void expect_close(const Pair& p, Tol tol, const std::string& what) {
    const std::vector<float> c = host_cpu(p), g = host_gpu(p);
    ASSERT_EQ(c.size(), g.size()) << what;
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const double diff = std::fabs(static_cast<double>(g[i]) - c[i]);
      const double lim = tol.atol + tol.rtol * std::fabs(static_cast<double>(c[i]));
      const bool both_nan = std::isnan(c[i]) && std::isnan(g[i]);
      const bool same_inf = std::isinf(c[i]) && c[i] == g[i];
      if (!(diff <= lim) && !both_nan && !same_inf) {
        if (bad < 5)
          ADD_FAILURE() << what << ": element " << i << " of " << p.shape().str() << ": gpu " << g[i] << " cpu "
                        << c[i] << " (|diff| " << diff << " > " << lim << ")";
        ++bad;
      }
      if (diff > worst) worst = diff;
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " elements out of tolerance (rtol "
                      << tol.rtol << ", atol " << tol.atol << ", worst |diff| " << worst << ")";
  }
  // Bit-for-bit equality of the stored bytes.
  void expect_identical(const Pair& p, const std::string& what) {
    const Tensor& c = p.cpu.t();
    std::vector<unsigned char> cb(c.nbytes()), gb(c.nbytes());
    if (cb.empty()) return;
    cpu_->copy_to_host(cb.data(), p.cpu);
    gpu_->copy_to_host(gb.data(), p.gpu);
    EXPECT_EQ(0, std::memcmp(cb.data(), gb.data(), cb.size())) << what << ": bytes differ";
  }

  std::mt19937_64 rng_{20240601};
  std::unique_ptr<Backend> cpu_, gpu_;
};

// The same, parameterised over the storage dtype of the op's main tensors.
class CudaVsCpuDtype : public CudaVsCpu, public ::testing::WithParamInterface<DType> {
 protected:
  DType dt() const { return GetParam(); }
};

#define TRIDENT_FLOAT_DTYPES ::testing::Values(::trident::DType::F32, ::trident::DType::F16, ::trident::DType::BF16)

}  // namespace trident::cuda_test
