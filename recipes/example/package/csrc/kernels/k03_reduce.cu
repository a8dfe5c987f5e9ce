// Example kernel TU: reduce (4 kernels).
#define CUW_TU_NAME k03
#define CUW_TU_ID 3
#define CUW_TU_WEIGHT 4
#include "../tu.cuh"
