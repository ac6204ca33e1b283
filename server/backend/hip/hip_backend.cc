// Opening the HIP runtime and its devices.
#include "server/backend/hip/hip_backend.h"

#include "absl/strings/str_cat.h"
#include "server/backend/hip/hip_driver.h"
#include "server/backend/hip/hip_status.h"

namespace gpustream::backend {

absl::StatusOr<std::shared_ptr<const HipAdapter>> OpenHipRuntime(
    const std::string& runtime_path) {
  auto loaded = HipDriver::Load(runtime_path.empty()
                                    ? HipDriver::DefaultPaths()
                                    : std::vector<std::string>{runtime_path});
  if (!loaded.ok()) return loaded.status();
  const std::string path = (*loaded)->path;
  auto driver = std::make_shared<const HipAdapter>(*std::move(loaded));
  if (absl::Status s =
          ToStatus(driver->table().hipInit(0), "hipInit", &driver->table());
      !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("HIP runtime ", path, ": ", s.message()));
  }
  return driver;
}

absl::StatusOr<std::unique_ptr<GpuDevice>> OpenHipDevice(
    std::shared_ptr<const HipAdapter> driver, int ordinal) {
  return GpuDevice::Create(std::move(driver), ordinal, HipEmbeddedSamples());
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateHipDevices(
    const std::string& runtime_path) {
  auto opened = OpenHipRuntime(runtime_path);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<const HipAdapter> driver = *std::move(opened);
  auto devices = GpuDevice::CreateAll(driver, HipEmbeddedSamples());
  if (!devices.ok()) {
    return absl::UnavailableError(absl::StrCat("HIP runtime ",
                                               driver->table().path, ": ",
                                               devices.status().message()));
  }
  return devices;
}

}  // namespace gpustream::backend
