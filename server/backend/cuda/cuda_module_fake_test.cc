// Module images against the device's architecture, on the fake driver: a
// device gets the samples' code where the image has some for it, and an
// error that says what is missing where it has none. Each case runs in a
// child process, since the fake reads its compute capability
// (FAKECUDA_COMPUTE_CAPABILITY) once per process.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {
namespace {

// In the child: fails (exit 1, saying why) unless `ok`. A child's work
// runs in a function, so that its objects are gone before it exits (the
// leak checker of the ASan build would abort it otherwise).
void Require(bool ok, const std::string& why) {
  if (ok) return;
  std::cerr << "FAILED: " << why << "\n";
  std::exit(1);
}

std::unique_ptr<GpuDevice> OpenWithComputeCapability(const char* cc) {
  setenv("FAKECUDA_COMPUTE_CAPABILITY", cc, 1);
  auto created = OpenFakeCudaDevice();
  Require(created.ok(), created.status().ToString());
  return *std::move(created);
}

class CudaModuleFakeTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

void OlderMinorChild() {
  std::unique_ptr<GpuDevice> device = OpenWithComputeCapability("86");
  Require(device->info().arch == "sm_86", device->info().arch);
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  Require(modules.size() == 1, "the samples did not load on sm_86");
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto q = *device->CreateQueue(QueueOptions{});
  auto counter = *device->Allocate(8, MemoryKind::kDevice);
  Require(q->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{7}}).ok(),
          "launch");
  absl::StatusOr<uint64_t> value = ReadU64(*q, counter);
  Require(value.ok(), value.status().ToString());
  Require(*value == 7, "add_u64 wrote " + std::to_string(*value));
}

// The samples carry SASS for sm_80 and sm_90 and PTX for compute_90. An
// sm_86 device (an A40, an RTX 3090) runs the sm_80 code.
TEST_F(CudaModuleFakeTest, AnOlderMinorRunsTheSamplesSass) {
  EXPECT_EXIT(
      {
        OlderMinorChild();
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

void NoCodeChild() {
  std::unique_ptr<GpuDevice> device = OpenWithComputeCapability("75");
  Require(device->BuiltinModules().empty(), "the samples loaded on sm_75");
  EmbeddedModule embedded = CudaEmbeddedSamples();
  auto manifest = modules::ParseModuleManifest(embedded.manifest,
                                               "samples manifest", "samples");
  Require(manifest.ok(), manifest.status().ToString());
  auto module = GpuModule::Load(device.get(), embedded.image, *manifest,
                                "samples.fatbin");
  Require(!module.ok(), "the image loaded on sm_75");
  const absl::Status& s = module.status();
  Require(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
  Require(absl::StrContains(s.message(), "samples.fatbin") &&
              absl::StrContains(s.message(), "CUDA_ERROR_NO_BINARY_FOR_GPU") &&
              absl::StrContains(s.message(), "sm_75"),
          s.ToString());
}

// A 7.5 device (a T4) has neither SASS nor PTX old enough in the samples:
// the device opens without them (logged), and loading the image says
// INVALID_ARGUMENT, naming the driver's code and the architecture.
TEST_F(CudaModuleFakeTest, AnImageWithoutCodeForTheDeviceIsRefusedClearly) {
  EXPECT_EXIT(
      {
        NoCodeChild();
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gpustream::backend
