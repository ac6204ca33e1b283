// Backend selection: names, the CPU fallback of "auto" and its reason.
#include "server/backend/backend_factory.h"

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

TEST(BackendFactoryTest, UnknownAndAbsentBackends) {
  EXPECT_EQ(CreateDevices({.backend = "tpu"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateDevices({.backend = "hip"}).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace gpustream::backend
