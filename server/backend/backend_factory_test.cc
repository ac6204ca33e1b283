// Backend selection: names, the CPU fallback of "auto" and its reason.
#include "server/backend/backend_factory.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gpustream::backend {
namespace {

TEST(BackendFactoryTest, CpuServesOneCpuDevice) {
  auto devices = CreateDevices({.backend = "cpu"});
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->devices.size(), 1u);
  EXPECT_EQ(devices->devices[0]->info().backend, "cpu");
  EXPECT_TRUE(devices->fallback_reason.empty());
}

TEST(BackendFactoryTest, AutoWithoutDriverFallsBackToCpuAndSaysWhy) {
  auto devices = CreateDevices(
      {.backend = "auto", .cuda_driver = "/nonexistent/libcuda.so.1"});
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->devices.at(0)->info().backend, "cpu");
  EXPECT_TRUE(absl::StrContains(
      devices->fallback_reason,
      HasCudaSupport() ? "/nonexistent/libcuda.so.1" : "no CUDA support"))
      << devices->fallback_reason;
}

TEST(BackendFactoryTest, CudaWithoutDriverFailsNamingTheLibrary) {
  auto devices = CreateDevices(
      {.backend = "cuda", .cuda_driver = "/nonexistent/libcuda.so.1"});
  if (HasCudaSupport()) {
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(absl::StrContains(devices.status().message(),
                                  "/nonexistent/libcuda.so.1"));
  } else {
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_TRUE(
        absl::StrContains(devices.status().message(), "no CUDA support"));
  }
}

TEST(BackendFactoryTest, UnknownBackendIsInvalid) {
  const absl::Status status = CreateDevices({.backend = "tpu"}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "--backend=tpu: expected auto, cpu, cuda or hip");
}

TEST(BackendFactoryTest, HipWithoutRuntimeFailsNamingTheLibrary) {
  auto devices = CreateDevices(
      {.backend = "hip", .hip_runtime = "/nonexistent/libamdhip64.so.5"});
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(devices.status().message(),
                                "/nonexistent/libamdhip64.so.5"))
      << devices.status();
}

// "auto" without an AMD GPU driver does not load the HIP runtime at all.
TEST(BackendFactoryTest, AutoWithoutKfdSkipsHipWithoutLoadingIt) {
  if (access("/dev/kfd", F_OK) == 0) {
    GTEST_SKIP() << "this machine has /dev/kfd";
  }
  auto devices = CreateDevices(
      {.backend = "auto", .cuda_driver = "/nonexistent/libcuda.so.1"});
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_TRUE(absl::StrContains(devices->fallback_reason,
                                "; hip: no AMD GPU driver (/dev/kfd is "
                                "absent), so the HIP runtime was not loaded"))
      << devices->fallback_reason;
}

// "auto" tries CUDA, then HIP (a runtime named explicitly is tried even
// without /dev/kfd), and says why it skipped each.
TEST(BackendFactoryTest, AutoSaysWhyEachGpuBackendWasSkipped) {
  auto devices =
      CreateDevices({.backend = "auto",
                     .cuda_driver = "/nonexistent/libcuda.so.1",
                     .hip_runtime = "/nonexistent/libamdhip64.so.5"});
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->devices.at(0)->info().backend, "cpu");
  EXPECT_TRUE(absl::StartsWith(devices->fallback_reason, "cuda: "))
      << devices->fallback_reason;
  EXPECT_TRUE(absl::StrContains(devices->fallback_reason,
                                "; hip: cannot load the HIP runtime library "
                                "(/nonexistent/libamdhip64.so.5)"))
      << devices->fallback_reason;
}

}  // namespace
}  // namespace gpustream::backend
