#include "kernels/dry_run_backend.h"

namespace trident {

// Addresses from 2^44 up: far from anything mapped, never dereferenced, 4 KiB aligned as
// a device allocator's would be.
DryRunBackend::DryRunBackend() : Backend(Device::Cuda), next_(uintptr_t{1} << 44) {}

DryRunBackend::~DryRunBackend() { release_all_memory(); }

void* DryRunBackend::raw_alloc(size_t bytes) {
  void* p = reinterpret_cast<void*>(next_);
  next_ += (bytes + 4095) / 4096 * 4096;
  return p;
}

}  // namespace trident
