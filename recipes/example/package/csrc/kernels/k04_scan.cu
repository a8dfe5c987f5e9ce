// Example kernel TU: scan (6 kernels).
#define CUW_TU_NAME k04
#define CUW_TU_ID 4
#define CUW_TU_WEIGHT 6
#include "../tu.cuh"
