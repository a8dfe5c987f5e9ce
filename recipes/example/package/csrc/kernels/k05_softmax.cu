// Example kernel TU: softmax (8 kernels).
#define CUW_TU_NAME k05
#define CUW_TU_ID 5
#define CUW_TU_WEIGHT 8
#include "../tu.cuh"
