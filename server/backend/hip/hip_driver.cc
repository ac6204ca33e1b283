// Loading the HIP runtime library and resolving its entry points.
#include "server/backend/hip/hip_driver.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::backend {

std::vector<std::string> HipDriver::DefaultPaths() {
  return {"libamdhip64.so.6", "libamdhip64.so.5"};
}

absl::StatusOr<std::unique_ptr<HipDriver>> HipDriver::Load(
    const std::string& path) {
  // RTLD_LOCAL: the runtime's symbols never satisfy anything else's.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("cannot load the HIP runtime library (", path,
                     "): ", why != nullptr ? why : "dlopen failed"));
  }
  auto driver = std::make_unique<HipDriver>();
  driver->path = path;
#define GPUSTREAM_HIP_RESOLVE(name, ret, params)                       \
  driver->name =                                                       \
      reinterpret_cast<decltype(driver->name)>(dlsym(handle, #name));  \
  if (driver->name == nullptr && !hipapi::IsOptional(#name)) {         \
    dlclose(handle);                                                   \
    return absl::UnimplementedError(absl::StrCat(                      \
        "the HIP runtime ", path,                                      \
        " does not provide " #name " (ROCm 5.2 or newer is needed)")); \
  }
  GPUSTREAM_HIP_ENTRY_POINTS(GPUSTREAM_HIP_RESOLVE)
#undef GPUSTREAM_HIP_RESOLVE
  if (driver->hipRuntimeGetVersion(&driver->version) != hipapi::kSuccess) {
    driver->version = 0;
  }
  // The handle is deliberately kept open for the process's lifetime.
  return driver;
}

}  // namespace gpustream::backend
