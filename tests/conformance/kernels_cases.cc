// Conformance: kernels and the samples module, launch limits, copies and
// fills, elapsed time, and enqueueing past the driver's queue depth.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/conformance/device_conformance.h"

namespace gpustream::backend {
namespace {

TEST_P(DeviceConformanceTest, SamplesModuleListsApiKernelsWithLayouts) {
  std::vector<std::string> names;
  for (const auto& k : samples_->info().kernels) names.push_back(k.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"add_u64", "block_rank_u32", "fill_u32",
                                      "grid_barrier_u32", "noop", "saxpy_f32",
                                      "spin_ns", "trap", "vector_add_f32"}));
  const KernelSignature& saxpy = K("saxpy_f32").signature();
  EXPECT_EQ(saxpy.params,
            (std::vector<ParamKind>{ParamKind::kF32, ParamKind::kBuffer,
                                    ParamKind::kBuffer, ParamKind::kU64}));
  ASSERT_EQ(saxpy.layout.size(), 4u);
  EXPECT_EQ(saxpy.layout[0].size, 4u);
  EXPECT_EQ(saxpy.layout[1].size, 8u);
  EXPECT_EQ(saxpy.layout[3].size, 8u);
  if (!IsCpu()) {  // A GPU backend knows the offsets: natural alignment.
    EXPECT_EQ(saxpy.layout[1].offset, 8u);
    EXPECT_EQ(saxpy.layout[3].offset, 24u);
  }
  EXPECT_GT(saxpy.limits.max_threads_per_block, 0u);
  EXPECT_EQ(samples_->FindKernel("nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(DeviceConformanceTest, FillThenVectorAddReadsBackSums) {
  auto q = NewQueue();
  auto a = Alloc(64), b = Alloc(64), c = Alloc(64);
  ASSERT_TRUE(q->Launch(K("fill_u32"), {{4}, {4}},
                        {BufferArg{a}, 0x3f800000u, uint64_t{16}})
                  .ok());
  ASSERT_TRUE(q->Launch(K("fill_u32"), {{4}, {4}},
                        {BufferArg{b}, 0x40000000u, uint64_t{16}})
                  .ok());
  ASSERT_TRUE(
      q->Launch(K("vector_add_f32"), {{1}, {16}},
                {BufferArg{a}, BufferArg{b}, BufferArg{c}, uint64_t{16}})
          .ok());
  std::string bytes = ReadBack(*q, c, 0, 64);
  ASSERT_EQ(bytes.size(), 64u) << bytes;
  for (int i = 0; i < 16; ++i) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    EXPECT_EQ(f, 3.0f) << i;
  }
}

TEST_P(DeviceConformanceTest, WriteCopyFillSaxpyReadBack) {
  auto q = NewQueue();
  auto x = Alloc(16), y = *device_->Allocate(16, MemoryKind::kHostPinned);
  std::vector<float> xs = {1, 2, 3, 4};
  ASSERT_TRUE(
      q->Write(x, 0, std::string(reinterpret_cast<char*>(xs.data()), 16)).ok());
  ASSERT_TRUE(q->Copy(x, 0, y, 0, 16).ok());
  ASSERT_TRUE(q->Launch(K("saxpy_f32"), {{1}, {4}},
                        {2.0f, BufferArg{x}, BufferArg{y}, uint64_t{4}})
                  .ok());
  ASSERT_TRUE(q->Fill(x, 8, 8, 0xdeadbeefu).ok());
  std::string ys = ReadBack(*q, y, 0, 16);
  ASSERT_EQ(ys.size(), 16u) << ys;
  for (int i = 0; i < 4; ++i) {
    float f;
    std::memcpy(&f, ys.data() + 4 * i, 4);
    EXPECT_EQ(f, 3.0f * xs[i]) << i;
  }
  std::string xb = ReadBack(*q, x, 0, 16);
  uint32_t words[4];
  std::memcpy(words, xb.data(), 16);
  EXPECT_EQ(words[1], 0x40000000u);  // 2.0f, untouched by the fill.
  EXPECT_EQ(words[2], 0xdeadbeefu);
  EXPECT_EQ(words[3], 0xdeadbeefu);
}

TEST_P(DeviceConformanceTest, ElapsedTimeCoversSpin) {
  auto q = NewQueue();
  auto start = *device_->CreateEvent(true), end = *device_->CreateEvent(true);
  const absl::Time before = absl::Now();
  ASSERT_TRUE(q->RecordEvent(start).ok());
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{20'000'000}}).ok());
  ASSERT_TRUE(q->RecordEvent(end).ok());
  ASSERT_TRUE(Sync(*q).ok());
  const double wall_ms = absl::ToDoubleMilliseconds(absl::Now() - before);
  auto ms = end->ElapsedMillisSince(*start);
  ASSERT_TRUE(ms.ok()) << ms.status();
  // At least the spin, at most what the host saw pass around it.
  EXPECT_GE(*ms, 19.0f);
  EXPECT_LE(*ms, wall_ms + 0.5);
  auto untimed = *device_->CreateEvent(false);
  ASSERT_TRUE(q->RecordEvent(untimed).ok());
  ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(untimed->ElapsedMillisSince(*start).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Many more operations than a GPU stream holds before its driver blocks the
// caller: enqueueing never blocks, and all of them run, in order.
TEST_P(DeviceConformanceTest, EnqueueBeyondTheDriversQueueNeverBlocks) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto counter = Alloc(8);
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  constexpr int kOps = 4000;
  for (int i = 0; i < kOps; ++i) {
    ASSERT_TRUE(
        q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}})
            .ok());
  }
  EXPECT_FALSE(q->IsIdle());
  flag->Store(1);
  EXPECT_EQ(ReadU64(*q, counter), uint64_t{kOps});
}

// A kernel's dynamic shared memory limit is what a launch really gets: the
// device's per-block maximum less the kernel's static shared memory (on a
// GPU beyond 48 KiB only once the kernel opts in, which the backend does).
TEST_P(DeviceConformanceTest, LaunchGetsAllTheDynamicSharedMemoryItsKernelMay) {
  const KernelLimits& limits = K("noop").signature().limits;
  EXPECT_EQ(limits.max_dynamic_shared_memory_bytes,
            device_->info().max_shared_memory_bytes -
                limits.static_shared_memory_bytes);
  auto q = NewQueue();
  LaunchConfig config{{1}, {1}};
  config.shared_memory_bytes = limits.max_dynamic_shared_memory_bytes;
  ASSERT_TRUE(q->Launch(K("noop"), config, {}).ok());
  EXPECT_TRUE(Sync(*q).ok()) << q->error();
}

}  // namespace
}  // namespace gpustream::backend
