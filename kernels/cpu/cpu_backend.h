// The CPU reference backend: OpenMP loops and OpenBLAS sgemm, fp32 arithmetic for every
// stored dtype. It defines what every op means; the CUDA backend is tested against it.
#pragma once

#include <memory>

#include "core/backend.h"

namespace trident {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace trident
