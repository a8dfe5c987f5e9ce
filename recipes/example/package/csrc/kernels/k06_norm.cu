// Example kernel TU: norm (12 kernels).
#define CUW_TU_NAME k06
#define CUW_TU_ID 6
#define CUW_TU_WEIGHT 12
#include "../tu.cuh"
