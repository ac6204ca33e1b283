// Backend selection.
#include "server/backend/backend_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

}  // namespace

bool HasCudaSupport() {
#ifdef GPUSTREAM_HAS_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<Devices> CreateDevices(const BackendOptions& options) {
  Devices out;
  if (options.backend == "cuda" || options.backend == "auto") {
    auto cuda = OpenCuda(options);
    if (cuda.ok()) {
      out.devices = *std::move(cuda);
      return out;
    }
    if (options.backend == "cuda") return cuda.status();
    out.fallback_reason = std::string(cuda.status().message());
  }
  if (options.backend == "cpu" || options.backend == "auto") {
    out.devices.push_back(std::make_unique<CpuDevice>(options.cpu));
    return out;
  }
  if (options.backend == "hip") {
    return absl::UnimplementedError(
        "--backend=hip: this build has no HIP backend yet; use --backend=cpu "
        "or --backend=cuda");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--backend=", options.backend, ": expected auto, cpu, cuda or hip"));
}

}  // namespace gpustream::backend
