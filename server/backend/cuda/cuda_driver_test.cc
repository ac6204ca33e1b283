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

TEST(CudaDriverTest, FakeDriverResolvesEveryEntryPoint) {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) +
                           "/gpustream/tests/fake_cuda/libfakecuda.so";
  auto driver = CudaDriver::Load(path);
  ASSERT_TRUE(driver.ok()) << driver.status();
#define GPUSTREAM_CUDA_EXPECT_SET(name) \
  EXPECT_NE((*driver)->name, nullptr) << #name;
  GPUSTREAM_CUDA_ENTRY_POINTS(GPUSTREAM_CUDA_EXPECT_SET)
#undef GPUSTREAM_CUDA_EXPECT_SET
  int version = 0;
  EXPECT_EQ((*driver)->cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_GE(version, 12050);
}

}  // namespace
}  // namespace gpustream::backend
