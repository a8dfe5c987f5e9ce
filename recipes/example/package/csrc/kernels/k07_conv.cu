// Example kernel TU: conv (16 kernels).
#define CUW_TU_NAME k07
#define CUW_TU_ID 7
#define CUW_TU_WEIGHT 16
#include "../tu.cuh"
