// The fake driver's extended launches: cuLaunchKernelEx with clusters and
// cooperative grids, and the occupancy queries that size them, with the
// errors cuda.h documents.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fake_cuda/fake_cuda_testing.h"

namespace fakecuda_test {
namespace {

class FakeCudaLaunchTest : public FakeCudaTest {
 protected:
  // cuLaunchKernelEx of `f` over `grid` x `block` with the attributes.
  CUresult LaunchEx(CUfunction f, unsigned grid, unsigned block, CUstream s,
                    std::vector<CUlaunchAttribute> attrs, CUdeviceptr out,
                    unsigned shared = 0) {
    CUlaunchConfig config{};
    config.gridDimX = grid;
    config.gridDimY = 1;
    config.gridDimZ = 1;
    config.blockDimX = block;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = shared;
    config.hStream = s;
    config.attrs = attrs.data();
    config.numAttrs = static_cast<unsigned>(attrs.size());
    void* params[] = {&out};
    return cu.LaunchKernelEx(&config, f, params, nullptr);
  }

  static CUlaunchAttribute Cluster(unsigned x) {
    CUlaunchAttribute a{};
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = x;
    a.value.clusterDim.y = 1;
    a.value.clusterDim.z = 1;
    return a;
  }

  static CUlaunchAttribute Cooperative() {
    CUlaunchAttribute a{};
    a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a.value.cooperative = 1;
    return a;
  }
};

TEST_F(FakeCudaLaunchTest, DeviceHasClustersAndCooperativeLaunches) {
  int v = 0;
  ASSERT_CU(CUDA_SUCCESS,
            cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0));
  EXPECT_EQ(1, v);
  ASSERT_CU(CUDA_SUCCESS, cu.DeviceGetAttribute(
                              &v, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
  EXPECT_EQ(1, v);
}

// Occupancy as on an H100: 32 blocks, 2048 threads and 228 KiB of shared
// memory (1 KiB reserved per block) per SM; nothing past the kernel's
// __launch_bounds__ or its dynamic shared memory opt-in.
TEST_F(FakeCudaLaunchTest, OccupancyCountsBlocksThreadsAndSharedMemory) {
  const CUfunction f = Kernel("grid_barrier_u32");
  auto blocks = [&](int threads, size_t shared) {
    int n = -1;
    EXPECT_CU(CUDA_SUCCESS, cu.OccupancyMaxActiveBlocksPerMultiprocessor(
                                &n, f, threads, shared));
    return n;
  };
  EXPECT_EQ(32, blocks(32, 0));
  EXPECT_EQ(2, blocks(1024, 0));
  EXPECT_EQ(3, blocks(630, 0));  // Whole warps: 640 threads each.
  EXPECT_EQ(4, blocks(32, 48 * 1024));
  EXPECT_EQ(0, blocks(32, 100 * 1024));  // Not opted in.
  ASSERT_CU(CUDA_SUCCESS,
            cu.FuncSetAttribute(
                f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200000));
  EXPECT_EQ(2, blocks(32, 100 * 1024));
  int spin = -1;
  ASSERT_CU(CUDA_SUCCESS, cu.OccupancyMaxActiveBlocksPerMultiprocessor(
                              &spin, Kernel("spin_ns"), 128, 0));
  EXPECT_EQ(0, spin);  // __launch_bounds__(64)
}

TEST_F(FakeCudaLaunchTest, ClustersDivideTheGridAndFitTheFunction) {
  const CUstream s = NewStream();
  const CUfunction f = Kernel("block_rank_u32");
  const CUdeviceptr out = Alloc(64 * 4);
  CUlaunchConfig query{};
  int most = 0;
  ASSERT_CU(CUDA_SUCCESS,
            cu.OccupancyMaxPotentialClusterSize(&most, f, &query));
  EXPECT_EQ(8, most);  // Portable.
  EXPECT_CU(CUDA_ERROR_INVALID_CLUSTER_SIZE,
            LaunchEx(f, 12, 1, s, {Cluster(8)}, out));  // 12 % 8 != 0
  EXPECT_CU(CUDA_ERROR_INVALID_CLUSTER_SIZE,
            LaunchEx(f, 32, 1, s, {Cluster(16)}, out));
  ASSERT_CU(CUDA_SUCCESS,
            cu.FuncSetAttribute(
                f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  ASSERT_CU(CUDA_SUCCESS,
            cu.OccupancyMaxPotentialClusterSize(&most, f, &query));
  EXPECT_EQ(16, most);
  ASSERT_CU(CUDA_SUCCESS, LaunchEx(f, 32, 1, s, {Cluster(16)}, out));
  std::vector<uint32_t> ranks(32);
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(ranks.data(), out, 32 * 4, s));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  for (uint32_t b = 0; b < 32; ++b) EXPECT_EQ(b % 16, ranks[b]) << b;
  EXPECT_CU(CUDA_ERROR_INVALID_CLUSTER_SIZE,
            LaunchEx(f, 64, 1, s, {Cluster(32)}, out));
  // An attribute twice, or one the fake does not model, is refused.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            LaunchEx(f, 8, 1, s, {Cluster(2), Cluster(2)}, out));
  CUlaunchAttribute other{};
  other.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, LaunchEx(f, 8, 1, s, {other}, out));
}

TEST_F(FakeCudaLaunchTest, CooperativeGridsFitWhatTheSmsHoldResident) {
  const CUstream s = NewStream();
  const CUfunction f = Kernel("grid_barrier_u32");
  const CUdeviceptr out = Alloc(2 * 264 * 4);
  // 1024 threads: 2 blocks per SM, 132 SMs.
  EXPECT_CU(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
            LaunchEx(f, 265, 1024, s, {Cooperative()}, out));
  ASSERT_CU(CUDA_SUCCESS, LaunchEx(f, 264, 1024, s, {Cooperative()}, out));
  std::vector<uint32_t> words(2 * 264);
  ASSERT_CU(CUDA_SUCCESS,
            cu.MemcpyDtoHAsync(words.data(), out, words.size() * 4, s));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  for (uint32_t b = 0; b < 264; ++b) {
    EXPECT_EQ(b + 1, words[b]);
    EXPECT_EQ(264u * 265 / 2, words[264 + b]);
  }
}

// cooperative_groups' grid.sync() traps outside a cooperative launch: a
// launch failure, sticky for the context.
TEST_F(FakeCudaLaunchTest, GridBarrierOutsideACooperativeLaunchTraps) {
  const CUstream s = NewStream();
  const CUdeviceptr out = Alloc(2 * 4 * 4);
  ASSERT_CU(CUDA_SUCCESS,
            LaunchEx(Kernel("grid_barrier_u32"), 4, 32, s, {}, out));
  EXPECT_CU(CUDA_ERROR_LAUNCH_FAILED, Finish(s));
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxReset(0));
}

}  // namespace
}  // namespace fakecuda_test
