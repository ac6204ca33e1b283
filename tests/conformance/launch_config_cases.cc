// Conformance: launch configuration. Thread block clusters (ranks seen
// through block_rank_u32), cooperative launches (a grid barrier that holds
// only with every block resident), the kernel's own limits checked before
// anything is enqueued, and dynamic shared memory past the 48 KiB default.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/conformance/device_conformance.h"

namespace gpustream::backend {
namespace {

std::vector<uint32_t> Words(const std::string& bytes) {
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), words.size() * 4);
  return words;
}

LaunchConfig Clustered(Dim3 grid, Dim3 block, Dim3 cluster) {
  LaunchConfig config{.grid = grid, .block = block};
  config.clustered = true;
  config.cluster = cluster;
  return config;
}

LaunchConfig Cooperative(Dim3 grid, Dim3 block, uint32_t shared = 0) {
  LaunchConfig config{.grid = grid, .block = block};
  config.shared_memory_bytes = shared;
  config.cooperative = true;
  return config;
}

TEST_P(DeviceConformanceTest, ClustersAreConsecutiveBlocksAlongXThenYThenZ) {
  auto q = NewQueue();
  auto out = Alloc(16 * 4 * 32);  // block_rank_u32 declares 4 per thread.
  const LaunchConfig config = Clustered({4, 2, 2}, {32}, {2, 2, 1});
  absl::Status launched =
      q->Launch(K("block_rank_u32"), config, {BufferArg{out}});
  if (device_->info().max_cluster_size == 0) {
    // Validation refuses clusters here first; the backend agrees.
    EXPECT_EQ(launched.code(), absl::StatusCode::kUnimplemented) << launched;
    return;
  }
  ASSERT_TRUE(launched.ok()) << launched;
  const std::vector<uint32_t> ranks = Words(ReadBack(*q, out, 0, 16 * 4));
  ASSERT_EQ(ranks.size(), 16u);
  for (uint32_t z = 0; z < 2; ++z) {
    for (uint32_t y = 0; y < 2; ++y) {
      for (uint32_t x = 0; x < 4; ++x) {
        const uint32_t linear = x + y * 4 + z * 8;
        EXPECT_EQ(ranks[linear], x % 2 + (y % 2) * 2)
            << "block (" << x << ", " << y << ", " << z << ")";
      }
    }
  }
  // Without clusters every rank is 0.
  ASSERT_TRUE(
      q->Launch(K("block_rank_u32"), {{4, 2, 2}, {32}}, {BufferArg{out}}).ok());
  EXPECT_EQ(Words(ReadBack(*q, out, 0, 16 * 4)), std::vector<uint32_t>(16, 0u));
}

TEST_P(DeviceConformanceTest, ClusterOfTheDevicesMaximumSizeRuns) {
  const uint32_t most = device_->info().max_cluster_size;
  auto q = NewQueue();
  if (most == 0) {  // HIP: the backend refuses what validation would.
    auto out = Alloc(8 * 4);
    EXPECT_EQ(q->Launch(K("block_rank_u32"), Clustered({8}, {1}, {2}),
                        {BufferArg{out}})
                  .code(),
              absl::StatusCode::kUnimplemented);
    return;
  }
  auto out = Alloc(2 * most * 4);
  ASSERT_TRUE(q->Launch(K("block_rank_u32"), Clustered({2 * most}, {1}, {most}),
                        {BufferArg{out}})
                  .ok());
  const std::vector<uint32_t> ranks = Words(ReadBack(*q, out, 0, 2 * most * 4));
  ASSERT_EQ(ranks.size(), 2u * most);
  for (uint32_t b = 0; b < 2 * most; ++b) EXPECT_EQ(ranks[b], b % most) << b;
}

TEST_P(DeviceConformanceTest, ClusterPastTheKernelsLimitIsRefusedUnqueued) {
  // The CPU kernels have no limit of their own: the device's
  // (max_cluster_size, checked by validation) is theirs. HIP has none.
  if (IsCpu()) {
    EXPECT_EQ(device_->info().max_cluster_size, 8u);
    return;
  }
  if (device_->info().max_cluster_size == 0) {
    EXPECT_EQ(GetParam().rfind("hip", 0), 0u) << "only HIP lacks clusters";
    return;
  }
  auto q = NewQueue();
  auto out = Alloc(64 * 4);
  const uint32_t past = 2 * device_->info().max_cluster_size;
  absl::Status s = q->Launch(K("block_rank_u32"),
                             Clustered({past}, {1}, {past}), {BufferArg{out}});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("block_rank_u32"), std::string::npos) << s;
  EXPECT_TRUE(q->IsIdle());
  EXPECT_TRUE(Sync(*q).ok());
}

TEST_P(DeviceConformanceTest, CooperativeGridBarrierHoldsEveryBlock) {
  auto q = NewQueue();
  constexpr uint32_t kBlocks = 8, kThreads = 32;
  auto out = Alloc(kBlocks * kThreads * 8);
  absl::Status launched =
      q->Launch(K("grid_barrier_u32"), Cooperative({kBlocks}, {kThreads}),
                {BufferArg{out}});
  if (!device_->info().supports_cooperative_launch) {
    EXPECT_EQ(launched.code(), absl::StatusCode::kUnimplemented) << launched;
    return;
  }
  ASSERT_TRUE(launched.ok()) << launched;
  const std::vector<uint32_t> words =
      Words(ReadBack(*q, out, 0, 2 * kBlocks * 4));
  ASSERT_EQ(words.size(), 2 * kBlocks);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(words[b], b + 1) << b;
    // Each block summed after every block had stored: 1 + ... + 8.
    EXPECT_EQ(words[kBlocks + b], kBlocks * (kBlocks + 1) / 2) << b;
  }
}

TEST_P(DeviceConformanceTest, CooperativeLaunchRunsOrdinaryKernelsToo) {
  auto q = NewQueue();
  auto out = Alloc(4 * 64);
  if (!device_->info().supports_cooperative_launch) {
    EXPECT_EQ(q->Launch(K("fill_u32"), Cooperative({4}, {16}),
                        {BufferArg{out}, 0xabcdu, uint64_t{64}})
                  .code(),
              absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(q->Launch(K("fill_u32"), Cooperative({4}, {16}),
                        {BufferArg{out}, 0xabcdu, uint64_t{64}})
                  .ok());
  EXPECT_EQ(Words(ReadBack(*q, out, 0, 4 * 64)),
            std::vector<uint32_t>(64, 0xabcdu));
}

TEST_P(DeviceConformanceTest, CooperativeGridLargerThanResidentIsOutOfRange) {
  auto q = NewQueue();
  auto out = Alloc(4);
  absl::Status s =
      q->Launch(K("grid_barrier_u32"), Cooperative({1'000'000}, {1024}),
                {BufferArg{out}});
  if (!device_->info().supports_cooperative_launch) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    return;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("resident"), std::string::npos) << s;
  // Nothing was enqueued: the queue is healthy and idle.
  EXPECT_TRUE(q->IsIdle());
  EXPECT_TRUE(Sync(*q).ok());
}

TEST_P(DeviceConformanceTest, GridBarrierOutsideACooperativeLaunchFaults) {
  // grid.sync() traps outside a cooperative launch: a fault, which loses a
  // GPU context (the failure cases cover that path with trap); here the
  // CPU backend, whose fault is the queue's alone.
  if (!IsCpu()) {  // A GPU trap is the failure cases' subject.
    EXPECT_EQ(K("grid_barrier_u32").signature().params.size(), 1u);
    return;
  }
  auto q = NewQueue();
  auto out = Alloc(2 * 4 * 8);
  ASSERT_TRUE(
      q->Launch(K("grid_barrier_u32"), {{4}, {1}}, {BufferArg{out}}).ok());
  absl::Status s = Sync(*q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("cooperative"), std::string::npos) << s;
}

TEST_P(DeviceConformanceTest, DynamicSharedMemoryUpToTheDeviceLimitRuns) {
  const uint32_t most = device_->info().max_shared_memory_bytes;
  ASSERT_GT(most, 0u);
  auto q = NewQueue();
  auto out = Alloc(4 * 32);
  LaunchConfig config{.grid = {1}, .block = {32}};
  config.shared_memory_bytes =
      K("fill_u32").signature().limits.max_dynamic_shared_memory_bytes;
  EXPECT_LE(config.shared_memory_bytes, most);
  ASSERT_TRUE(
      q->Launch(K("fill_u32"), config, {BufferArg{out}, 7u, uint64_t{32}})
          .ok());
  EXPECT_EQ(Words(ReadBack(*q, out, 0, 4 * 32)), std::vector<uint32_t>(32, 7u));
  // And cooperatively, where occupancy has to count it.
  if (!device_->info().supports_cooperative_launch) return;
  config.cooperative = true;
  config.grid = {2};
  ASSERT_TRUE(
      q->Launch(K("fill_u32"), config, {BufferArg{out}, 8u, uint64_t{32}}).ok())
      << config.shared_memory_bytes;
  EXPECT_EQ(Words(ReadBack(*q, out, 0, 4 * 32)), std::vector<uint32_t>(32, 8u));
}

}  // namespace
}  // namespace gpustream::backend
