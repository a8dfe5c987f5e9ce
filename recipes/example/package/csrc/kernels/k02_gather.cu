// Example kernel TU: gather (3 kernels).
#define CUW_TU_NAME k02
#define CUW_TU_ID 2
#define CUW_TU_WEIGHT 3
#include "../tu.cuh"
