// The CUDA backend's entry point: every visible GPU as a Device.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_BACKEND_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/cuda/cuda_adapter.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"

namespace gpustream::backend {

// Loads the driver at `driver_path` ("libcuda.so.1" by default, or a path:
// --cuda_driver) and calls cuInit. UNAVAILABLE naming the library when it
// cannot be loaded or initialized.
absl::StatusOr<std::shared_ptr<const CudaAdapter>> OpenCudaDriver(
    const std::string& driver_path);

// Opens device `ordinal` of an opened driver through its primary context,
// with the samples compiled into this build.
absl::StatusOr<std::unique_ptr<GpuDevice>> OpenCudaDevice(
    std::shared_ptr<const CudaAdapter> driver, int ordinal);

// Every device of the driver at `driver_path`. UNAVAILABLE naming the
// library when it cannot be loaded or has no device.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(
    const std::string& driver_path);

// The CUDA samples module compiled into the daemon (kernels/cuda), when this
// build has nvcc: an empty image otherwise.
EmbeddedModule CudaEmbeddedSamples();

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_BACKEND_H_
