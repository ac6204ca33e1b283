// The HIP backend's entry point: every visible AMD GPU as a Device.
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_BACKEND_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/backend/hip/hip_adapter.h"

namespace gpustream::backend {

// Loads the runtime at `runtime_path` (--hip_runtime; empty: libamdhip64.so.6,
// then .so.5) and calls hipInit. UNAVAILABLE naming the libraries tried
// when none loads or initializes.
absl::StatusOr<std::shared_ptr<const HipAdapter>> OpenHipRuntime(
    const std::string& runtime_path);

// Opens device `ordinal` of an opened runtime through its primary context,
// with the samples compiled into this build.
absl::StatusOr<std::unique_ptr<GpuDevice>> OpenHipDevice(
    std::shared_ptr<const HipAdapter> driver, int ordinal);

// Every device of the runtime at `runtime_path`. UNAVAILABLE naming the
// library when it cannot be loaded or has no device.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateHipDevices(
    const std::string& runtime_path);

// The HIP samples module compiled into the daemon (kernels/hip), when this
// build had an AMDGPU clang: an empty image otherwise.
EmbeddedModule HipEmbeddedSamples();

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_BACKEND_H_
