// Plain host code with no CUDA in it: one of the example's host TUs.
#include <string>

namespace {
const std::string kVersion = std::string("cuw-example ") + CUW_EXAMPLE_FLAVOUR;
}

extern "C" const char* cuw_example_build_info(void) { return kVersion.c_str(); }
