// The CUDA backend (entry points only; no CUDA headers here so host code can include it).
#pragma once

#include <memory>

#include "core/backend.h"

namespace trident {

// Number of usable GPUs; 0 when there is no GPU or the driver is missing/too old
// ("driver version is insufficient" is "no GPU", never an error).
int cuda_device_count();

// A backend on GPU `ordinal` with its own compute stream.
std::unique_ptr<Backend> make_cuda_backend(int ordinal);

}  // namespace trident
