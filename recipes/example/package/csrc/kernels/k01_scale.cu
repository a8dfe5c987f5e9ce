// Example kernel TU: scale (2 kernels).
#define CUW_TU_NAME k01
#define CUW_TU_ID 1
#define CUW_TU_WEIGHT 2
#include "../tu.cuh"
