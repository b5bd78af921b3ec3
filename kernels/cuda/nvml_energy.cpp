#include "kernels/cuda/nvml_energy.h"

#include <dlfcn.h>

namespace trident::cuda {
namespace {

// NVML's C interface (nvml.h, which the toolkit does not always ship): results are an enum
// whose success is 0, devices an opaque pointer.
constexpr int kNvmlSuccess = 0;
using Init = int (*)();
using Shutdown = int (*)();
using HandleByPciBusId = int (*)(const char* pci_bus_id, void** device);

template <typename F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(dlsym(library, name));
}

}  // namespace

NvmlEnergy::NvmlEnergy(const std::string& pci_bus_id) {
  library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* e = dlerror();
    why_none_ = std::string("NVML (libnvidia-ml.so.1, from the driver) cannot be loaded") + (e ? ": " + std::string(e) : "");
    return;
  }
  const auto init = symbol<Init>(library_, "nvmlInit_v2");
  const auto by_bus = symbol<HandleByPciBusId>(library_, "nvmlDeviceGetHandleByPciBusId_v2");
  read_ = symbol<ReadEnergy>(library_, "nvmlDeviceGetTotalEnergyConsumption");
  error_string_ = symbol<ErrorString>(library_, "nvmlErrorString");
  if (!init || !by_bus || !read_ || !error_string_) {
    why_none_ = "libnvidia-ml.so.1 lacks the energy functions (a driver older than Volta's?)";
    read_ = nullptr;
    return;
  }
  if (const int r = init(); r != kNvmlSuccess) {
    why_none_ = std::string("nvmlInit: ") + error_string_(r);
    read_ = nullptr;
    return;
  }
  initialised_ = true;
  if (const int r = by_bus(pci_bus_id.c_str(), &device_); r != kNvmlSuccess) {
    why_none_ = "NVML has no device at PCI bus " + pci_bus_id + ": " + error_string_(r);
    read_ = nullptr;
    return;
  }
  if (!joules()) read_ = nullptr;  // why_none_ says why (e.g. not supported on this GPU)
}

NvmlEnergy::~NvmlEnergy() {
  if (initialised_)
    if (const auto shutdown = symbol<Shutdown>(library_, "nvmlShutdown")) shutdown();
  if (library_) dlclose(library_);
}

std::optional<double> NvmlEnergy::joules() const {
  if (read_ == nullptr) return std::nullopt;
  unsigned long long millijoules = 0;
  if (const int r = read_(device_, &millijoules); r != kNvmlSuccess) {
    why_none_ = std::string("nvmlDeviceGetTotalEnergyConsumption: ") + error_string_(r);
    return std::nullopt;
  }
  return static_cast<double>(millijoules) / 1000.0;
}

}  // namespace trident::cuda
