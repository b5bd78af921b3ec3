// Not a kernel of trident: a fixture for the test that extract_device_code.cmake fails
// loudly when a kernel file has no anonymous namespace inside namespace trident::cuda.
namespace trident::cuda {

__global__ void lonely_kernel(float* p) { p[threadIdx.x] = 0.f; }

}  // namespace trident::cuda
