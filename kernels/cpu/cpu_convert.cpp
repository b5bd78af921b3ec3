// fp32 <-> stored dtype spans and argument checks shared by the CPU op families.
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {

void load_f32(const Tensor& src, int64_t offset, int64_t n, float* dst) {
  switch (src.dtype) {
    case DType::F32:
      std::memcpy(dst, src.ptr<const float>() + offset, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      halves_to_floats(src.ptr<const uint16_t>() + offset, dst, n);
      return;
    case DType::BF16: {
      const uint16_t* p = src.ptr<const uint16_t>() + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(p[i]);
      return;
    }
    case DType::I32: {
      const int32_t* p = src.ptr<const int32_t>() + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
      return;
    }
  }
}

void store_f32(const Tensor& dst, int64_t offset, int64_t n, const float* src) {
  switch (dst.dtype) {
    case DType::F32:
      std::memcpy(dst.ptr<float>() + offset, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      floats_to_halves(src, dst.ptr<uint16_t>() + offset, n);
      return;
    case DType::BF16: {
      uint16_t* p = dst.ptr<uint16_t>() + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::I32: {
      int32_t* p = dst.ptr<int32_t>() + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(src[i]);
      return;
    }
  }
}

float* thread_scratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[8];
  return grow(buffers[slot], n);
}

void check_cpu(const char* op, const Tensor& t) {
  CPU_CHECK(op, t.device == Device::Cpu && t.data != nullptr, "tensor not on the CPU or empty");
}
void check_float(const char* op, const Tensor& t) {
  check_cpu(op, t);
  CPU_CHECK(op, is_float(t.dtype), "expected a float tensor, got ", dtype_name(t.dtype));
}
void check_f32(const char* op, const Tensor& t) {
  check_cpu(op, t);
  CPU_CHECK(op, t.dtype == DType::F32, "expected f32, got ", dtype_name(t.dtype));
}

}  // namespace trident::cpu
