// Loading the CUDA driver library and resolving its entry points.
#include "server/backend/cuda/cuda_driver.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::backend {
namespace {

// cuGetProcAddress_v2 as exported (CUDA 12.5+): the one symbol we dlsym.
using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);
// cuDriverGetVersion, exported by every driver and callable before cuInit.
using DriverGetVersionFn = CUresult (*)(int*);

std::string VersionText(int version) {
  return absl::StrCat(version / 1000, ".", version % 1000 / 10);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDriver>> CudaDriver::Load(
    const std::string& path) {
  // RTLD_LOCAL: the driver's symbols never satisfy anything else's.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("cannot load the CUDA driver library ", path, ": ",
                     why != nullptr ? why : "dlopen failed"));
  }
  auto get_proc =
      reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    dlclose(handle);
    return absl::UnimplementedError(
        absl::StrCat("the CUDA driver ", path,
                     " lacks cuGetProcAddress_v2: a driver for CUDA 12.5 or "
                     "newer is needed"));
  }
  // The driver's version first: cuGetProcAddress refuses a cudaVersion
  // above it (INVALID_VALUE), and the entry points are requested with the
  // ABI of the headers this daemon was built with, which an older driver
  // cannot give.
  auto get_version =
      reinterpret_cast<DriverGetVersionFn>(dlsym(handle, "cuDriverGetVersion"));
  int version = 0;
  if (get_version == nullptr || get_version(&version) != CUDA_SUCCESS) {
    dlclose(handle);
    return absl::UnimplementedError(
        absl::StrCat("the CUDA driver ", path, " does not report its version"));
  }
  if (version < CUDA_VERSION) {
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver ", path, " is for CUDA ", VersionText(version),
        ", older than the CUDA ", VersionText(CUDA_VERSION),
        " headers gpustreamd was built with: install a newer driver, or "
        "build gpustreamd against older CUDA headers"));
  }
  auto driver = std::make_unique<CudaDriver>();
  driver->path = path;
  driver->version = version;
  CUdriverProcAddressQueryResult found;
#define GPUSTREAM_CUDA_RESOLVE(name)                                      \
  {                                                                       \
    void* fn = nullptr;                                                   \
    CUresult r = get_proc(#name, &fn, CUDA_VERSION,                       \
                          CU_GET_PROC_ADDRESS_DEFAULT, &found);           \
    if (r != CUDA_SUCCESS || fn == nullptr ||                             \
        found != CU_GET_PROC_ADDRESS_SUCCESS) {                           \
      return absl::UnimplementedError(absl::StrCat(                       \
          "the CUDA driver ", path, " does not provide " #name " (CUDA ", \
          VersionText(CUDA_VERSION), " ABI)"));                           \
    }                                                                     \
    driver->name = reinterpret_cast<decltype(driver->name)>(fn);          \
  }
  GPUSTREAM_CUDA_ENTRY_POINTS(GPUSTREAM_CUDA_RESOLVE)
#undef GPUSTREAM_CUDA_RESOLVE
  // The handle is deliberately kept open for the process's lifetime.
  return driver;
}

}  // namespace gpustream::backend
