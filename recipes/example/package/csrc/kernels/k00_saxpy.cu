// Example kernel TU: saxpy (1 kernels).
#define CUW_TU_NAME k00
#define CUW_TU_ID 0
#define CUW_TU_WEIGHT 1
#include "../tu.cuh"
