// Graphs on the HIP backend, on the fake runtime (the checks are the GPU
// layer's, gpu_graph_checks.h; cuda_graph_fake_test runs them on CUDA's).
#include <cstdlib>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_graph_checks.h"
#include "server/backend/hip/hip_backend.h"
#include "server/backend/hip/hip_driver.h"
#include "server/backend/hip/hip_fake_testing.h"

namespace gpustream::backend {
namespace {

class HipGraphFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The module cases in this binary leave other architectures set.
    setenv("FAKEHIP_ARCH", "gfx90a", 1);
    if (HipEmbeddedSamples().image.empty()) {
      GTEST_SKIP() << "this build has no AMDGPU clang: no HIP samples";
    }
    auto runtime = OpenHipRuntime(FakeHipRuntimePath());
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    auto device = OpenHipDevice(*std::move(runtime), 0);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }

  std::unique_ptr<GpuDevice> device_;
};

TEST_F(HipGraphFakeTest, RunsOfCommandsLaunchAsExecutableGraphs) {
  CheckRunsLaunchAsExecutableGraphs(*device_, FakeHipRuntimePath());
}

TEST_F(HipGraphFakeTest, CapturesBesideFreesAllSucceed) {
  CheckCapturesBesideFrees(*device_, FakeHipRuntimePath());
}

}  // namespace
}  // namespace gpustream::backend
