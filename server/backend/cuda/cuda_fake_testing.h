// Device 0 of the fake CUDA driver (//tests/fake_cuda:libfakecuda.so), opened
// as gpustreamd opens a real one, for the CUDA backend's own tests. Tests
// that fault the device keep a process of their own: by default the fake,
// like a driver, keeps a sticky error through a reset for the process's
// life.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_FAKE_TESTING_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_FAKE_TESTING_H_

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/backend/cuda/cuda_backend.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_testing.h"

namespace gpustream::backend {

// The fake driver's path in the test's runfiles.
inline std::string FakeCudaDriverPath() {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") +
         "/gpustream/tests/fake_cuda/libfakecuda.so";
}

// Loads the fake driver, runs cuInit and opens device 0.
inline absl::StatusOr<std::unique_ptr<GpuDevice>> OpenFakeCudaDevice() {
  auto driver = OpenCudaDriver(FakeCudaDriverPath());
  if (!driver.ok()) return driver.status();
  return OpenCudaDevice(*std::move(driver), 0);
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_FAKE_TESTING_H_
