// The dispatcher: a host TU that references every kernel TU's functions.
// In a compile shard the out-of-slice TUs are empty objects, so linking this
// file fails with "undefined reference to" -- the failure the shard gate expects.
#define CUW_TU(name)                       \
  extern "C" int cuw_##name##_host(void); \
  extern "C" int cuw_##name##_launch(float*, int);
#include "tus.def"
#undef CUW_TU

namespace {
struct Entry {
  const char* name;
  int (*host)(void);
  int (*launch)(float*, int);
};

const Entry kEntries[] = {
#define CUW_TU(name) {#name, cuw_##name##_host, cuw_##name##_launch},
#include "tus.def"
#undef CUW_TU
};
constexpr int kCount = static_cast<int>(sizeof(kEntries) / sizeof(kEntries[0]));
}  // namespace

extern "C" int cuw_example_tu_count(void) { return kCount; }

extern "C" const char* cuw_example_tu_name(int i) { return (i >= 0 && i < kCount) ? kEntries[i].name : nullptr; }

extern "C" int cuw_example_tu_host(int i) { return (i >= 0 && i < kCount) ? kEntries[i].host() : -1; }

// Runs every kernel on device memory `data`; returns the first non-zero cudaError_t.
extern "C" int cuw_example_launch_all(float* data, int n) {
  for (const Entry& e : kEntries) {
    if (int rc = e.launch(data, n)) return rc;
  }
  return 0;
}
