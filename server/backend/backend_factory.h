// Chooses and creates the devices the daemon serves (--backend).
#ifndef GPUSTREAM_SERVER_BACKEND_BACKEND_FACTORY_H_
#define GPUSTREAM_SERVER_BACKEND_BACKEND_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/gpu/gpu_module.h"

namespace gpustream::backend {

struct BackendOptions {
  std::string backend = "auto";  // auto | cpu | cuda | hip
  CpuDeviceOptions cpu;
  // The CUDA driver library: a file name dlopen searches for, or a path.
  std::string cuda_driver = "libcuda.so.1";
  // The HIP runtime library, likewise; empty: libamdhip64.so.6, then .so.5.
  std::string hip_runtime;
};

// Whether this build has the CUDA backend (a CUDA toolkit was found when it
// was built).
bool HasCudaSupport();

struct Devices {
  std::vector<std::unique_ptr<Device>> devices;
  // For "auto": why each GPU backend tried before the chosen one was
  // skipped ("cuda: ...; hip: ..."; empty if the first was chosen).
  std::string fallback_reason;
};

// The devices of the chosen backend, ids in vector order. "auto" tries CUDA,
// then HIP, and takes the first whose driver loads and has a device, else
// the CPU. INVALID_ARGUMENT for an unknown name; UNAVAILABLE naming the
// library for "cuda" or "hip" without a usable driver; UNIMPLEMENTED for a
// backend this build lacks.
absl::StatusOr<Devices> CreateDevices(const BackendOptions& options);

// A GPU vendor's driver used directly, as the daemon's devices use it: for
// tools that measure the daemon against it (bench/gpu_bench).
struct DirectGpuDriver {
  std::shared_ptr<const GpuDriver> driver;
  // The samples module this build embeds for the vendor (empty image when
  // it was built without the vendor's compiler).
  EmbeddedModule samples;
  // A stream waits until the mapped word at `address` equals `value`, where
  // the vendor's driver does that well (CUDA's cuStreamWaitValue64); null
  // where it does not (HIP 5.x runs such a wait as a spinning kernel).
  std::function<absl::Status(GpuStreamHandle stream, GpuDeviceptr address,
                             uint64_t value)>
      wait_value_eq;
};

// The driver of options.backend ("cuda" with options.cuda_driver, "hip"
// with options.hip_runtime), initialized. Errors as CreateDevices.
absl::StatusOr<DirectGpuDriver> OpenDirectGpuDriver(
    const BackendOptions& options);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_BACKEND_FACTORY_H_
