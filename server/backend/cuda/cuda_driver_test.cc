// The driver loader without a usable driver: missing library, a library
// that is not a CUDA driver, and the fake driver resolving every entry.
#include "server/backend/cuda/cuda_driver.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gpustream::backend {
namespace {

TEST(CudaDriverTest, MissingLibraryIsUnavailableNamingIt) {
  auto driver = CudaDriver::Load("/nonexistent/libcuda.so.1");
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StrContains(driver.status().message(), "/nonexistent/libcuda.so.1"))
      << driver.status();
}

TEST(CudaDriverTest, LibraryWithoutGetProcAddressIsUnimplemented) {
  // libm loads fine but is no CUDA driver.
  auto driver = CudaDriver::Load("libm.so.6");
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(
      absl::StrContains(driver.status().message(), "cuGetProcAddress_v2"))
      << driver.status();
}

std::string FakePath() {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/gpustream/tests/fake_cuda/libfakecuda.so";
}

TEST(CudaDriverTest, FakeDriverResolvesEveryEntryPoint) {
  const std::string path = FakePath();
  auto driver = CudaDriver::Load(path);
  ASSERT_TRUE(driver.ok()) << driver.status();
#define GPUSTREAM_CUDA_EXPECT_SET(name) \
  EXPECT_NE((*driver)->name, nullptr) << #name;
  GPUSTREAM_CUDA_ENTRY_POINTS(GPUSTREAM_CUDA_EXPECT_SET)
#undef GPUSTREAM_CUDA_EXPECT_SET
  int version = 0;
  EXPECT_EQ((*driver)->cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, CUDA_VERSION);
  EXPECT_EQ((*driver)->version, CUDA_VERSION);
}

// A driver older than the headers would refuse every request at their
// version (cuGetProcAddress: INVALID_VALUE above the driver's): it is
// refused up front, naming both versions.
TEST(CudaDriverTest, DriverOlderThanTheHeadersIsRefusedNamingBoth) {
  setenv("FAKECUDA_DRIVER_VERSION", "12080", 1);
  auto driver = CudaDriver::Load(FakePath());
  unsetenv("FAKECUDA_DRIVER_VERSION");
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(driver.status().message(), "CUDA 12.8"))
      << driver.status();
  EXPECT_TRUE(absl::StrContains(driver.status().message(), "CUDA 13.0"))
      << driver.status();
}

}  // namespace
}  // namespace gpustream::backend
