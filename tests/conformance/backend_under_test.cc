// Opening the backends under test.
#include "tests/conformance/backend_under_test.h"

#include <dlfcn.h>

#include <cstdlib>

#include "server/backend/backend_factory.h"

namespace gpustream::conformance {

std::vector<std::string> BackendsUnderTest() {
  return {"cpu", "cuda_fake", "cuda"};
}

std::string FakeCudaDriverPath() {
  if (!backend::HasCudaSupport()) return "";
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") +
         "/gpustream/tests/fake_cuda/libfakecuda.so";
}

std::vector<std::string> DaemonFlagsFor(const std::string& backend) {
  if (backend == "cuda_fake") {
    return {"--backend=cuda", "--cuda_driver=" + FakeCudaDriverPath()};
  }
  return {"--backend=" + backend};
}

absl::Status AbsentReason(const std::string& backend) {
  if (backend == "cpu") return absl::OkStatus();
  if (!backend::HasCudaSupport()) {
    return absl::UnavailableError(
        "this build has no CUDA support (no CUDA toolkit was found)");
  }
  if (backend == "cuda_fake") return absl::OkStatus();
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        std::string("no CUDA driver on this machine: ") +
        (why != nullptr ? why : "libcuda.so.1 not found"));
  }
  dlclose(driver);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<backend::Device>> OpenBackend(
    const std::string& name) {
  backend::BackendOptions options;
  options.backend = name == "cpu" ? "cpu" : "cuda";
  options.cpu.memory_limit_bytes = uint64_t{64} << 20;
  if (name == "cuda_fake") options.cuda_driver = FakeCudaDriverPath();
  auto devices = backend::CreateDevices(options);
  if (!devices.ok()) return devices.status();
  return std::move(devices->devices.front());
}

}  // namespace gpustream::conformance
