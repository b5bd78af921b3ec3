// A GPU's energy counter through NVML (nvmlDeviceGetTotalEnergyConsumption: millijoules
// since the driver was loaded, on Volta and later), for Megatron's --log-energy. NVML comes
// with the driver, not the toolkit: libnvidia-ml.so.1 is opened with dlopen, and a machine
// without it, or a GPU without the counter, has no reading (why_none() says why).
#pragma once

#include <optional>
#include <string>

namespace trident::cuda {

class NvmlEnergy {
 public:
  // The GPU at `pci_bus_id` (cudaDeviceGetPCIBusId's form: NVML's indices do not follow
  // CUDA_VISIBLE_DEVICES, the bus id does).
  explicit NvmlEnergy(const std::string& pci_bus_id);
  ~NvmlEnergy();
  NvmlEnergy(const NvmlEnergy&) = delete;
  NvmlEnergy& operator=(const NvmlEnergy&) = delete;

  std::optional<double> joules() const;  // nullopt when the counter cannot be read
  const std::string& why_none() const { return why_none_; }

 private:
  void* library_ = nullptr;
  void* device_ = nullptr;  // nvmlDevice_t
  bool initialised_ = false;
  using ReadEnergy = int (*)(void* device, unsigned long long* millijoules);
  using ErrorString = const char* (*)(int result);
  ReadEnergy read_ = nullptr;
  ErrorString error_string_ = nullptr;
  mutable std::string why_none_;
};

}  // namespace trident::cuda
