// Opening the backends under test.
#include "tests/conformance/backend_under_test.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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

// A device whose every queue runs on one SM partition of it; everything
// else as the device. After a Recover (the reset destroyed the old green
// contexts) it partitions again.
class PartitionedDevice : public backend::Device {
 public:
  static absl::StatusOr<std::unique_ptr<backend::Device>> Create(
      std::unique_ptr<backend::Device> device) {
    auto wrapped = std::unique_ptr<PartitionedDevice>(
        new PartitionedDevice(std::move(device)));
    if (absl::Status s = wrapped->Partition(); !s.ok()) return s;
    return std::unique_ptr<backend::Device>(std::move(wrapped));
  }

  const backend::DeviceInfo& info() const override { return device_->info(); }
  backend::MemoryInfo memory() override { return device_->memory(); }
  void SetFatalErrorHandler(backend::FatalErrorHandler handler) override {
    device_->SetFatalErrorHandler(std::move(handler));
  }
  bool failed() const override { return device_->failed(); }
  absl::Status Recover() override {
    if (absl::Status s = device_->Recover(); !s.ok()) return s;
    return Partition();
  }
  void FlushCleanup() override { device_->FlushCleanup(); }
  absl::StatusOr<std::shared_ptr<backend::Queue>> CreateQueue(
      backend::QueueOptions options) override {
    options.partition = partition_;
    return device_->CreateQueue(std::move(options));
  }
  absl::StatusOr<std::shared_ptr<backend::Event>> CreateEvent(
      bool enable_timing) override {
    return device_->CreateEvent(enable_timing);
  }
  absl::StatusOr<std::shared_ptr<backend::Flag>> CreateFlag() override {
    return device_->CreateFlag();
  }
  absl::StatusOr<std::shared_ptr<backend::Buffer>> Allocate(
      uint64_t size, backend::MemoryKind kind) override {
    return device_->Allocate(size, kind);
  }
  std::vector<std::unique_ptr<backend::Module>> BuiltinModules() override {
    return device_->BuiltinModules();
  }
  bool IsModuleFile(const std::string& path) const override {
    return device_->IsModuleFile(path);
  }
  absl::StatusOr<std::unique_ptr<backend::Module>> LoadModule(
      const std::string& path) override {
    return device_->LoadModule(path);
  }

 private:
  explicit PartitionedDevice(std::unique_ptr<backend::Device> device)
      : device_(std::move(device)) {}
  absl::Status Partition() {
    auto split = device_->PartitionSms({2, 1});
    if (!split.ok()) return split.status();
    partition_ = split->front();
    return absl::OkStatus();
  }

  // The partition before the device: its green context is released first.
  std::unique_ptr<backend::Device> device_;
  std::shared_ptr<backend::SmPartition> partition_;
};

// Whether this binary is instrumented (the test command's ASan and TSan
// phases; --config=tsan sets GPUSTREAM_TSAN for its tests).
bool UnderSanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return std::getenv("GPUSTREAM_TSAN") != nullptr;
#endif
}

constexpr absl::string_view kSharingModes[] = {"_context_per_tenant",
                                               "_sm_partitions"};

}  // namespace

std::vector<std::string> BackendsUnderTest() {
  return {"cpu", "cuda_fake", "cuda", "hip_fake", "hip"};
}

std::vector<std::string> BackendsAndSharingModesUnderTest() {
  std::vector<std::string> all = BackendsUnderTest();
  if (UnderSanitizer()) return all;
  for (const char* cuda : {"cuda_fake", "cuda"}) {
    for (absl::string_view mode : kSharingModes) {
      all.push_back(absl::StrCat(cuda, mode));
    }
  }
  return all;
}

std::string BaseBackend(const std::string& backend) {
  for (absl::string_view mode : kSharingModes) {
    if (absl::EndsWith(backend, mode)) {
      return backend.substr(0, backend.size() - mode.size());
    }
  }
  return backend;
}

std::string SharingOf(const std::string& backend) {
  for (absl::string_view mode : kSharingModes) {
    if (absl::EndsWith(backend, mode)) return std::string(mode.substr(1));
  }
  return "shared_context";
}

std::string FakeCudaDriverPath() {
  if (!backend::HasCudaSupport()) return "";
  return Runfile("tests/fake_cuda/libfakecuda.so");
}

std::string FakeHipRuntimePath() {
  return Runfile("tests/fake_hip/libfakehip.so");
}

std::vector<std::string> DaemonFlagsFor(const std::string& name) {
  const std::string backend = BaseBackend(name);
  std::vector<std::string> flags = {"--backend=" + backend};
  if (backend == "cuda_fake") {
    flags = {"--backend=cuda", "--cuda_driver=" + FakeCudaDriverPath()};
  }
  if (backend == "hip_fake") {
    flags = {"--backend=hip", "--hip_runtime=" + FakeHipRuntimePath()};
  }
  if (backend != name) flags.push_back("--gpu_sharing=" + SharingOf(name));
  return flags;
}

absl::Status AbsentReason(const std::string& name) {
  const std::string backend = BaseBackend(name);
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
    const std::string& sharing_name) {
  const std::string name = BaseBackend(sharing_name);
  backend::BackendOptions options;
  options.backend = name == "cpu"                         ? "cpu"
                    : name == "hip" || name == "hip_fake" ? "hip"
                                                          : "cuda";
  options.cpu.memory_limit_bytes = uint64_t{64} << 20;
  if (name == "cuda_fake") options.cuda_driver = FakeCudaDriverPath();
  if (name == "hip_fake") options.hip_runtime = FakeHipRuntimePath();
  auto devices = backend::CreateDevices(options);
  if (!devices.ok()) return devices.status();
  std::unique_ptr<backend::Device> device = std::move(devices->devices.front());
  const std::string sharing = SharingOf(sharing_name);
  if (sharing == "context_per_tenant") return device->CreateContext();
  if (sharing == "sm_partitions") {
    return PartitionedDevice::Create(std::move(device));
  }
  return device;
}

}  // namespace gpustream::conformance
