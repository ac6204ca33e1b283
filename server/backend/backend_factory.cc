// Backend selection.
#include "server/backend/backend_factory.h"

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/backend/hip/hip_backend.h"

#ifdef GPUSTREAM_HAS_CUDA
#include "server/backend/cuda/cuda_backend.h"
#endif

namespace gpustream::backend {
namespace {

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCuda(
    const BackendOptions& options) {
#ifdef GPUSTREAM_HAS_CUDA
  return CreateCudaDevices(options.cuda_driver);
#else
  return absl::UnimplementedError(
      "this build has no CUDA support: no CUDA toolkit (cuda.h) was found "
      "when it was built");
#endif
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenHip(
    const BackendOptions& options) {
  // ROCm reaches AMD GPUs only through the amdkfd driver's /dev/kfd: without
  // it, "auto" does not load the runtime (a large library, often installed
  // with its headers on machines without an AMD GPU) just to hear that.
  if (options.backend == "auto" && options.hip_runtime.empty() &&
      access("/dev/kfd", F_OK) != 0) {
    return absl::UnavailableError(
        "no AMD GPU driver (/dev/kfd is absent), so the HIP runtime was not "
        "loaded");
  }
  return CreateHipDevices(options.hip_runtime);
}

}  // namespace

absl::StatusOr<DirectGpuDriver> OpenDirectGpuDriver(
    const BackendOptions& options) {
  DirectGpuDriver out;
  if (options.backend == "hip") {
    auto runtime = OpenHipRuntime(options.hip_runtime);
    if (!runtime.ok()) return runtime.status();
    out.driver = *std::move(runtime);
    out.samples = HipEmbeddedSamples();
    return out;
  }
  if (options.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", options.backend, ": expected cuda or hip"));
  }
#ifdef GPUSTREAM_HAS_CUDA
  auto driver = OpenCudaDriver(options.cuda_driver);
  if (!driver.ok()) return driver.status();
  std::shared_ptr<const CudaAdapter> cuda = *std::move(driver);
  out.wait_value_eq = [cuda](GpuStreamHandle stream, GpuDeviceptr address,
                             uint64_t value) {
    return cuda->StreamWaitValueEq(stream, address, value);
  };
  out.driver = std::move(cuda);
  out.samples = CudaEmbeddedSamples();
  return out;
#else
  return OpenCuda(options).status();
#endif
}

bool HasCudaSupport() {
#ifdef GPUSTREAM_HAS_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<Devices> CreateDevices(const BackendOptions& options) {
  Devices out;
  const bool automatic = options.backend == "auto";
  std::vector<std::string> skipped;
  struct Gpu {
    const char* name;
    absl::StatusOr<std::vector<std::unique_ptr<Device>>> (*open)(
        const BackendOptions&);
  };
  for (const Gpu& gpu : {Gpu{"cuda", &OpenCuda}, Gpu{"hip", &OpenHip}}) {
    if (!automatic && options.backend != gpu.name) continue;
    auto devices = gpu.open(options);
    if (devices.ok()) {
      out.devices = *std::move(devices);
      out.fallback_reason = absl::StrJoin(skipped, "; ");
      return out;
    }
    if (!automatic) return devices.status();
    skipped.push_back(absl::StrCat(gpu.name, ": ", devices.status().message()));
  }
  if (options.backend == "cpu" || automatic) {
    out.devices.push_back(std::make_unique<CpuDevice>(options.cpu));
    out.fallback_reason = absl::StrJoin(skipped, "; ");
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--backend=", options.backend, ": expected auto, cpu, cuda or hip"));
}

}  // namespace gpustream::backend
