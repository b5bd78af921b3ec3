// The prelude of every emulated kernel test: the CPU execution model (emu_runtime.h), then
// trident's own device helpers, compiled from kernels/cuda/cuda_common.cuh itself as host
// code (to_f32/from_f32, AnyPtr load_any/store_any, warp_sum/warp_max, block_sum/block_max,
// grid_for, dispatch_float), so the helpers under test are the product's, not copies.
// After this header a test includes the generated emu_<file>.inc of the kernel file(s) it
// checks (see extract_device_code.cmake): their kernels land in trident::cuda::emu_<file>.
//
// What it cannot check: see emu_runtime.h (timing, device math precision, PTX, CUB ...).
#pragma once

#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "emu_runtime.h"  // must come first: it redefines __device__, __shared__ ...

#include "core/philox.h"  // dropout_keep: the same function on host and device
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"  // the host launchers' declarations, for any device-side use

// Host helpers copied with the kernels may check their launches; an emulated launch has no
// CUDA error state (configuration errors throw std::invalid_argument instead).
#undef CUDA_CHECK_LAUNCH
#define CUDA_CHECK_LAUNCH() ((void)0)
