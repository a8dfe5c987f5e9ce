// Example kernel TU: gemm (24 kernels).
#define CUW_TU_NAME k08
#define CUW_TU_ID 8
#define CUW_TU_WEIGHT 24
#include "../tu.cuh"
