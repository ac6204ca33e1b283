// Opening the backends under test.
#include "tests/conformance/backend_under_test.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

#include "server/backend/backend_factory.h"

namespace gpustream::conformance {

namespace {

std::string Runfile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") + "/gpustream/" + path;
}

// Whether a HIP runtime the loader finds has a device: dlopen, hipInit,
// hipGetDeviceCount (which says hipErrorNoDevice without a GPU).
absl::Status HipDeviceReason() {
  // Without amdkfd there is no AMD GPU, and the runtime is not loaded into
  // a test process (under a sanitizer, its own leaks and races would count).
  if (access("/dev/kfd", F_OK) != 0) {
    return absl::UnavailableError(
        "no AMD GPU on this machine: /dev/kfd (the amdkfd driver) is absent");
  }
  void* runtime = nullptr;
  for (const char* name : {"libamdhip64.so.6", "libamdhip64.so.5"}) {
    runtime = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (runtime != nullptr) break;
  }
  if (runtime == nullptr) {
    return absl::UnavailableError(
        "no HIP runtime on this machine: libamdhip64.so.6/.so.5 not found");
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(runtime, "hipInit"));
  auto count_fn =
      reinterpret_cast<CountFn>(dlsym(runtime, "hipGetDeviceCount"));
  int count = 0;
  // The runtime stays loaded: it may have started threads.
  if (init == nullptr || count_fn == nullptr || init(0) != 0 ||
      count_fn(&count) != 0 || count == 0) {
    return absl::UnavailableError(
        "the HIP runtime on this machine finds no AMD GPU");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> BackendsUnderTest() {
  return {"cpu", "cuda_fake", "cuda", "hip_fake", "hip"};
}

std::string FakeCudaDriverPath() {
  if (!backend::HasCudaSupport()) return "";
  return Runfile("tests/fake_cuda/libfakecuda.so");
}

std::string FakeHipRuntimePath() {
  return Runfile("tests/fake_hip/libfakehip.so");
}

std::vector<std::string> DaemonFlagsFor(const std::string& backend) {
  if (backend == "cuda_fake") {
    return {"--backend=cuda", "--cuda_driver=" + FakeCudaDriverPath()};
  }
  if (backend == "hip_fake") {
    return {"--backend=hip", "--hip_runtime=" + FakeHipRuntimePath()};
  }
  return {"--backend=" + backend};
}

absl::Status AbsentReason(const std::string& backend) {
  if (backend == "cpu") return absl::OkStatus();
  if (backend == "hip") return HipDeviceReason();
  // The HIP backend and its fake build everywhere (no vendor header).
  if (backend == "hip_fake") return absl::OkStatus();
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
  options.backend = name == "cpu"                         ? "cpu"
                    : name == "hip" || name == "hip_fake" ? "hip"
                                                          : "cuda";
  options.cpu.memory_limit_bytes = uint64_t{64} << 20;
  if (name == "cuda_fake") options.cuda_driver = FakeCudaDriverPath();
  if (name == "hip_fake") options.hip_runtime = FakeHipRuntimePath();
  auto devices = backend::CreateDevices(options);
  if (!devices.ok()) return devices.status();
  return std::move(devices->devices.front());
}

}  // namespace gpustream::conformance
