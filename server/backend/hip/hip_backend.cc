// Opening the HIP runtime and its devices.
#include "server/backend/hip/hip_backend.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/backend/hip/hip_driver.h"
#include "server/backend/hip/hip_status.h"

namespace gpustream::backend {

absl::StatusOr<std::shared_ptr<const HipAdapter>> OpenHipRuntime(
    const std::string& runtime_path) {
  const std::vector<std::string> paths =
      runtime_path.empty() ? HipDriver::DefaultPaths()
                           : std::vector<std::string>{runtime_path};
  // Each in turn while none loads: a ROCm 6 runtime that is absent or lacks
  // an entry point leaves ROCm 5's to try. One that loaded but does not
  // initialize ends the search: a second ROCm would share its HSA runtime
  // (the same soname), already loaded and half initialized. The last
  // one's code, every reason.
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  std::vector<std::string> failures;
  for (const std::string& path : paths) {
    auto loaded = HipDriver::Load(path);
    if (!loaded.ok()) {
      code = loaded.status().code();
      failures.emplace_back(loaded.status().message());
      continue;
    }
    auto driver = std::make_shared<const HipAdapter>(*std::move(loaded));
    if (absl::Status s =
            ToStatus(driver->table().hipInit(0), "hipInit", &driver->table());
        !s.ok()) {
      failures.push_back(absl::StrCat("HIP runtime ", path, ": ", s.message()));
      return absl::UnavailableError(absl::StrJoin(failures, "; "));
    }
    return driver;
  }
  return absl::Status(code, absl::StrJoin(failures, "; "));
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
