// HIP modules on the fake runtime: the samples' offload bundle against the
// device's architecture (FAKEHIP_ARCH, read on every call), and manifests
// checked against the code object's own metadata, kinds included.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/backend/hip/hip_backend.h"
#include "server/backend/hip/hip_driver.h"
#include "server/backend/hip/hip_fake_testing.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {
namespace {

class HipModuleFakeTest : public ::testing::Test {
 protected:
  // Device 0 of the fake runtime, its architecture `arch`.
  std::unique_ptr<GpuDevice> Open(const char* arch) {
    setenv("FAKEHIP_ARCH", arch, 1);
    auto runtime = OpenHipRuntime(FakeHipRuntimePath());
    EXPECT_TRUE(runtime.ok()) << runtime.status();
    if (!runtime.ok()) return nullptr;
    auto device = OpenHipDevice(*std::move(runtime), 0);
    EXPECT_TRUE(device.ok()) << device.status();
    return device.ok() ? *std::move(device) : nullptr;
  }

  static v1::ModuleManifest SamplesManifest() {
    auto manifest = modules::ParseModuleManifest(HipEmbeddedSamples().manifest,
                                                 "samples manifest", "samples");
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    return manifest.ok() ? *manifest : v1::ModuleManifest();
  }

  void SetUp() override {
    if (HipEmbeddedSamples().image.empty()) {
      GTEST_SKIP() << "this build has no AMDGPU clang: no HIP samples";
    }
  }
};

// The bundle has gfx90a and gfx1030 code: a gfx1030 device (RDNA2) runs
// its entry; its arch is gcnArchName's processor, without feature flags.
TEST_F(HipModuleFakeTest, EachBuiltArchitectureRunsItsOwnEntry) {
  std::unique_ptr<GpuDevice> device = Open("gfx1030");
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->info().backend, "hip");
  EXPECT_EQ(device->info().arch, "gfx1030");
  EXPECT_FALSE(device->info().faults_recoverable);
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_EQ(modules.size(), 1u);
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto q = *device->CreateQueue(QueueOptions{});
  auto counter = *device->Allocate(8, MemoryKind::kDevice);
  ASSERT_TRUE(
      q->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{9}}).ok());
  struct Result {
    absl::Notification done;
    absl::StatusOr<std::string> data;
  };
  auto result = std::make_shared<Result>();
  ASSERT_TRUE(
      q->Read(counter, 0, 8, [result](absl::StatusOr<std::string> data) {
         result->data = std::move(data);
         result->done.Notify();
       }).ok());
  ASSERT_TRUE(result->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(result->data.ok()) << result->data.status();
  uint64_t value = 0;
  std::memcpy(&value, result->data->data(), 8);
  EXPECT_EQ(value, 9u);
}

// HIP ends a launch's `extra` list with HIP_LAUNCH_PARAM_END, (void*)3, not
// CUDA's NULL: the runtime reads the argument buffer up to it.
TEST_F(HipModuleFakeTest, ExtraArgumentsEndWithHipsOwnMarker) {
  setenv("FAKEHIP_ARCH", "gfx90a", 1);
  auto runtime = OpenHipRuntime(FakeHipRuntimePath());
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  const HipDriver& hip = (*runtime)->table();
  hipapi::Context* context = nullptr;
  ASSERT_EQ(hip.hipDevicePrimaryCtxRetain(&context, 0), hipapi::kSuccess);
  ASSERT_EQ(hip.hipCtxSetCurrent(context), hipapi::kSuccess);
  hipapi::Module* module = nullptr;
  ASSERT_EQ(hip.hipModuleLoadData(&module, HipEmbeddedSamples().image.data()),
            hipapi::kSuccess);
  hipapi::Function* add = nullptr;
  ASSERT_EQ(hip.hipModuleGetFunction(&add, module, "add_u64"),
            hipapi::kSuccess);
  hipapi::Stream* stream = nullptr;
  ASSERT_EQ(hip.hipStreamCreateWithPriority(&stream, 1, 0), hipapi::kSuccess);
  void* counter = nullptr;
  ASSERT_EQ(hip.hipMalloc(&counter, 8), hipapi::kSuccess);
  ASSERT_EQ(hip.hipMemsetD32Async(counter, 0, 2, stream), hipapi::kSuccess);
  struct {
    void* counter;
    uint64_t value;
  } args{counter, 5};
  size_t size = sizeof(args);
  void* extra[] = {reinterpret_cast<void*>(1), &args,
                   reinterpret_cast<void*>(2), &size,
                   reinterpret_cast<void*>(3)};
  ASSERT_EQ(hip.hipModuleLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, stream, nullptr,
                                      extra),
            hipapi::kSuccess);
  uint64_t value = 0;
  ASSERT_EQ(hip.hipMemcpyDtoHAsync(&value, counter, 8, stream),
            hipapi::kSuccess);
  ASSERT_EQ(hip.hipStreamSynchronize(stream), hipapi::kSuccess);
  EXPECT_EQ(value, 5u);
  EXPECT_EQ(hip.hipFree(counter), hipapi::kSuccess);
  EXPECT_EQ(hip.hipStreamDestroy(stream), hipapi::kSuccess);
  EXPECT_EQ(hip.hipModuleUnload(module), hipapi::kSuccess);
  EXPECT_EQ(hip.hipDevicePrimaryCtxRelease(0), hipapi::kSuccess);
}

// An MI300 (gfx942) has no code in the bundle: the device opens without
// the samples, and loading them says what is missing and how to build it.
TEST_F(HipModuleFakeTest, ABundleWithoutTheDevicesArchitectureIsRefused) {
  std::unique_ptr<GpuDevice> device = Open("gfx942:sramecc+:xnack-");
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->info().arch, "gfx942");
  EXPECT_TRUE(device->BuiltinModules().empty());
  auto module = GpuModule::Load(device.get(), HipEmbeddedSamples().image,
                                SamplesManifest(), "samples.hipfb");
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(module.status().message(),
            "samples.hipfb: the offload bundle has no code object for "
            "gfx942:sramecc+:xnack- (it has gfx1030, gfx90a): build it with "
            "--offload-arch=gfx942");
}

// A manifest that calls add_u64's buffer a U64 has the binary's sizes (8
// and 8) but not its kinds: the code object's metadata refuses it, which
// sizes alone (CUDA's check) could not.
TEST_F(HipModuleFakeTest, AManifestThatMistakesABufferForAValueIsRefused) {
  std::unique_ptr<GpuDevice> device = Open("gfx90a");
  ASSERT_NE(device, nullptr);
  v1::ModuleManifest manifest = SamplesManifest();
  for (v1::KernelManifest& kernel : *manifest.mutable_kernels()) {
    if (kernel.name() == "add_u64") {
      kernel.mutable_params(0)->set_kind(v1::PARAM_KIND_U64);
    }
  }
  auto module = GpuModule::Load(device.get(), HipEmbeddedSamples().image,
                                manifest, "samples.hipfb");
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(module.status().message(),
            "samples.hipfb: kernel add_u64 param 0 (counter) is U64 in the "
            "manifest but a global buffer in the binary");
}

// In the child: 0, or why not. Its objects are gone when it returns (the
// leak checker of the ASan build would abort the child otherwise).
int UnrecoverableChild() {
  // Faults reported, not aborting (as a later runtime might): the device
  // fails, but a runtime whose context reset does nothing cannot recover.
  setenv("FAKEHIP_FAULT_ABORTS", "0", 1);
  setenv("FAKEHIP_ARCH", "gfx90a", 1);
  auto runtime = OpenHipRuntime(FakeHipRuntimePath());
  if (!runtime.ok()) return 2;
  auto device = OpenHipDevice(*std::move(runtime), 0);
  if (!device.ok()) return 3;
  absl::Notification failed;
  (*device)->SetFatalErrorHandler(
      [&failed](const DeviceFailure&) { failed.Notify(); });
  std::vector<std::unique_ptr<Module>> modules = (*device)->BuiltinModules();
  if (modules.empty()) return 4;
  {
    auto q = *(*device)->CreateQueue(QueueOptions{});
    if (!q->Launch(**modules.front()->FindKernel("trap"), {{1}, {1}}, {})
             .ok()) {
      return 5;
    }
    if (!failed.WaitForNotificationWithTimeout(absl::Seconds(20))) {
      return 6;
    }
  }
  const absl::Status recovered = (*device)->Recover();
  if (recovered.code() != absl::StatusCode::kAborted ||
      !absl::StrContains(recovered.message(),
                         "HIP device 0 cannot be reset within this process")) {
    return 7;
  }
  const bool still_failed = (*device)->failed();
  (*device)->SetFatalErrorHandler(nullptr);  // `failed` goes first.
  return still_failed ? 0 : 8;
}

// A HIP device that fails (where a runtime reports a fault instead of
// aborting) is not "recovered" by a reset that frees nothing: Recover
// refuses, naming why, and the daemon exits for its supervisor.
TEST_F(HipModuleFakeTest, AFailedDeviceIsNotRecoveredByANoOpReset) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(UnrecoverableChild()), ::testing::ExitedWithCode(0),
              "");
}

}  // namespace
}  // namespace gpustream::backend
