// The CUDA backend's entry point: every visible GPU as a Device.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_BACKEND_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/device.h"

namespace gpustream::backend {

// Loads the driver at `driver_path` ("libcuda.so.1" by default, or a path:
// --cuda_driver), calls cuInit and opens every device through its primary
// context. UNAVAILABLE naming the library when it cannot be loaded or has
// no device.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(
    const std::string& driver_path);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_BACKEND_H_
