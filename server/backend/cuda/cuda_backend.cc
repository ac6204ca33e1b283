// Opening the CUDA driver and its devices.
#include "server/backend/cuda/cuda_backend.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/backend/cuda/cuda_device.h"
#include "server/backend/cuda/cuda_driver.h"
#include "server/backend/cuda/cuda_status.h"

namespace gpustream::backend {

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateCudaDevices(
    const std::string& driver_path) {
  auto loaded = CudaDriver::Load(driver_path);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const CudaDriver> driver = *std::move(loaded);
  auto wrap = [&](absl::Status s) {
    return absl::UnavailableError(
        absl::StrCat("CUDA driver ", driver_path, ": ", s.message()));
  };
  // Streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues (default 8),
  // read once by cuInit: the most the driver allows, so that fewer queues'
  // streams share one (work at a queue's head holds up all behind it).
  // An operator's own setting stands. Before any thread reads the
  // environment concurrently: backends are created at startup.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  if (absl::Status s = ToStatus(driver->cuInit(0), "cuInit", driver.get());
      !s.ok()) {
    return wrap(s);
  }
  int count = 0;
  if (absl::Status s = ToStatus(driver->cuDeviceGetCount(&count),
                                "cuDeviceGetCount", driver.get());
      !s.ok()) {
    return wrap(s);
  }
  if (count == 0) return wrap(absl::UnavailableError("no CUDA device"));
  std::vector<std::unique_ptr<Device>> devices;
  for (int i = 0; i < count; ++i) {
    auto device = CudaDevice::Create(driver, i);
    if (!device.ok()) return wrap(device.status());
    devices.push_back(*std::move(device));
  }
  return devices;
}

}  // namespace gpustream::backend
