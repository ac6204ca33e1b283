// Opening the CUDA driver and its devices.
#include "server/backend/cuda/cuda_backend.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/backend/cuda/cuda_driver.h"
#include "server/backend/cuda/cuda_status.h"

namespace gpustream::backend {

absl::StatusOr<std::shared_ptr<const CudaAdapter>> OpenCudaDriver(
    const std::string& driver_path) {
  auto loaded = CudaDriver::Load(driver_path);
  if (!loaded.ok()) return loaded.status();
  auto driver = std::make_shared<const CudaAdapter>(*std::move(loaded));
  // Streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues (default 8),
  // read once by cuInit: the most the driver allows, so that fewer queues'
  // streams share one (work at a queue's head holds up all behind it).
  // An operator's own setting stands. Before any thread reads the
  // environment concurrently: backends are created at startup.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  if (absl::Status s =
          ToStatus(driver->table().cuInit(0), "cuInit", &driver->table());
      !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("CUDA driver ", driver_path, ": ", s.message()));
  }
  return driver;
}

absl::StatusOr<std::unique_ptr<GpuDevice>> OpenCudaDevice(
    std::shared_ptr<const CudaAdapter> driver, int ordinal) {
  return GpuDevice::Create(std::move(driver), ordinal, CudaEmbeddedSamples());
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(
    const std::string& driver_path) {
  auto opened = OpenCudaDriver(driver_path);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<const CudaAdapter> driver = *std::move(opened);
  auto devices = GpuDevice::CreateAll(driver, CudaEmbeddedSamples());
  if (!devices.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA driver ", driver_path, ": ", devices.status().message()));
  }
  return devices;
}

}  // namespace gpustream::backend
