// Tests of CPU module loading (the rest of the CPU backend runs the
// cross-backend conformance suite in tests/conformance).
#include "server/backend/cpu/cpu_module.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace gpustream::backend {
namespace {

TEST(CpuModuleLoadTest, LoadsSharedLibraryModule) {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) +
                           "/gpustream/kernels/cpu/libgpustream_samples.so";
  auto module = LoadCpuModule(path);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ((*module)->info().name, "samples");
  EXPECT_EQ((*module)->info().kernels.size(), 6u);
  const KernelSignature& fill = (*module)->info().kernels[0];
  ASSERT_EQ(fill.layout.size(), fill.params.size());
  EXPECT_EQ(fill.limits.max_threads_per_block, kCpuMaxThreadsPerBlock);
  EXPECT_EQ(LoadCpuModule("/nonexistent.so").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpustream::backend
