// Backend factory: the one place that knows every backend this build has.
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"

namespace trident {

// "cpu" always; "cuda" when built with CUDA and a GPU is visible; "auto" picks cuda when
// available, else cpu. Throws ConfigError naming --device for an unknown or unavailable one.
std::unique_ptr<Backend> make_backend(const std::string& device);

// False when built without CUDA or when no usable GPU is visible (a missing driver, and
// the runtime's "driver version is insufficient", both mean "no GPU", not an error).
bool cuda_available();

}  // namespace trident
