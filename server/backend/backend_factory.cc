// Backend selection.
#include "server/backend/backend_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::backend {

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateDevices(
    const BackendOptions& options) {
  std::vector<std::unique_ptr<Device>> devices;
  if (options.backend == "cpu" || options.backend == "auto") {
    // "auto" has no GPU backend to probe until the CUDA and HIP backends
    // land; the CPU backend is the embedded default.
    devices.push_back(std::make_unique<CpuDevice>(options.cpu));
    return devices;
  }
  if (options.backend == "cuda" || options.backend == "hip") {
    return absl::UnimplementedError(
        absl::StrCat("--backend=", options.backend, ": this build has no ",
                     options.backend, " backend yet; use --backend=cpu"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--backend=", options.backend, ": expected auto, cpu, cuda or hip"));
}

}  // namespace gpustream::backend
