#include "kernels/backends.h"

#include <cstdlib>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef TRIDENT_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace trident {

bool cuda_available() {
#ifdef TRIDENT_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

#ifdef TRIDENT_HAVE_CUDA
// The GPU for this process: the launcher's local rank (one process per GPU), modulo the
// count; launch/run-one-node.sh reads the same variables (Open MPI, MPICH and Intel MPI,
// MVAPICH, Slurm's srun, torchrun-style LOCAL_RANK).
static int local_gpu_ordinal() {
  for (const char* var : {"TRIDENT_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                          "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v) % cuda_device_count();
  }
  return 0;
}
#endif

std::unique_ptr<Backend> make_backend(const std::string& device, [[maybe_unused]] const BackendOptions& options) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda" || device == "auto") {
#ifdef TRIDENT_HAVE_CUDA
    if (cuda_available()) return make_cuda_backend(local_gpu_ordinal(), {.allow_tf32 = options.allow_tf32,
                                                                        .bf16_reduction_in_fp32 =
                                                                            options.bf16_reduction_in_fp32});
#endif
    if (device == "auto") return make_cpu_backend();
#ifdef TRIDENT_HAVE_CUDA
    throw ConfigError("--device cuda: no usable GPU is visible");
#else
    throw ConfigError("--device cuda: this build has no CUDA backend (rebuild with nvcc and -DTRIDENT_CUDA=ON)");
#endif
  }
  throw ConfigError("--device: unknown device '" + device + "' (expected auto, cpu or cuda)");
}

}  // namespace trident
