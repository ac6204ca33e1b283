// Graphs on the CUDA backend, on the fake driver (the checks are the GPU
// layer's, gpu_graph_checks.h; hip_graph_fake_test runs them on HIP's).
#include <memory>

#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_graph_checks.h"

namespace gpustream::backend {
namespace {

TEST(CudaGraphFakeTest, RunsOfCommandsLaunchAsExecutableGraphs) {
  auto device = OpenFakeCudaDevice();
  ASSERT_TRUE(device.ok()) << device.status();
  CheckRunsLaunchAsExecutableGraphs(**device, FakeCudaDriverPath());
}

TEST(CudaGraphFakeTest, CapturesBesideFreesAllSucceed) {
  auto device = OpenFakeCudaDevice();
  ASSERT_TRUE(device.ok()) << device.status();
  CheckCapturesBesideFrees(**device, FakeCudaDriverPath());
}

}  // namespace
}  // namespace gpustream::backend
