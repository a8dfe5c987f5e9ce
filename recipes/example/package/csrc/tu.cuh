// One kernel translation unit of the example. A TU defines CUW_TU_NAME,
// CUW_TU_ID and CUW_TU_WEIGHT, then includes this file. WEIGHT is the number
// of distinct kernels instantiated: cicc and ptxas pay for each one, so it
// sets how long the TU takes to compile.
#include <cuda_runtime.h>

#define CUW_CAT_(a, b) a##b
#define CUW_CAT(a, b) CUW_CAT_(a, b)
#define CUW_FN(suffix) CUW_CAT(CUW_CAT(cuw_, CUW_TU_NAME), suffix)

namespace {

template <int I>
__global__ void work_kernel(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = data[i];
#pragma unroll
  for (int r = 0; r < 30; ++r) v = v * 1.0001f + sqrtf(fabsf(__sinf(v + r * (I + CUW_TU_ID)))) / (1.f + v * v);
  data[i] = v;
}

template <int I>
struct Chain {
  static constexpr int kernels = 1 + Chain<I - 1>::kernels;
  static int launch(float* data, int n) {
    work_kernel<I><<<(n + 255) / 256, 256>>>(data, n);
    int rc = static_cast<int>(cudaGetLastError());
    return rc != 0 ? rc : Chain<I - 1>::launch(data, n);
  }
};

template <>
struct Chain<0> {
  static constexpr int kernels = 0;
  static int launch(float*, int) { return 0; }
};

}  // namespace

// Host-callable without a GPU: proves this TU's code is linked in.
extern "C" int CUW_FN(_host)(void) { return CUW_TU_ID * 1000 + Chain<CUW_TU_WEIGHT>::kernels; }

// Launches every kernel of this TU; returns a cudaError_t.
extern "C" int CUW_FN(_launch)(float* data, int n) { return Chain<CUW_TU_WEIGHT>::launch(data, n); }
