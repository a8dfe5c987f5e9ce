// The torch flavour's one host TU that uses torch itself (libc10), so the
// library really links torch. c10/core/Device.h compiles in about a second;
// torch/extension.h would cost a minute per build.
#include <c10/core/Device.h>

#include <string>

extern "C" const char* cuw_example_torch_device(void) {
  static const std::string name = c10::Device(c10::DeviceType::CPU).str();
  return name.c_str();
}
