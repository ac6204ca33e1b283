// Unit tests of the CPU backend, below any session or RPC.
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/cpu/cpu_module.h"

namespace gpustream::backend {
namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  CpuBackendTest() : device_(CpuDeviceOptions{1 << 20}) {
    auto modules = device_.BuiltinModules();
    samples_ = std::move(modules.at(0));
  }

  const Kernel& K(const char* name) { return **samples_->FindKernel(name); }

  std::unique_ptr<Queue> NewQueue() {
    return *device_.CreateQueue(QueueOptions{});
  }

  std::shared_ptr<Buffer> Alloc(uint64_t size) {
    return *device_.Allocate(size, MemoryKind::kDevice);
  }

  // Synchronizes and reads `size` bytes.
  std::string ReadBack(Queue& q, std::shared_ptr<Buffer> b, uint64_t offset,
                       uint64_t size) {
    absl::Notification done;
    std::string out;
    q.Read(b, offset, size, [&](absl::StatusOr<std::string> data) {
      out = data.ok() ? *data : "error:" + data.status().ToString();
      done.Notify();
    });
    done.WaitForNotification();
    return out;
  }

  CpuDevice device_;
  std::unique_ptr<Module> samples_;
};

TEST_F(CpuBackendTest, SamplesModuleListsApiKernels) {
  EXPECT_EQ(samples_->info().name, "samples");
  std::vector<std::string> names;
  for (const auto& k : samples_->info().kernels) names.push_back(k.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"fill_u32", "vector_add_f32", "saxpy_f32",
                                      "add_u64", "spin_ns", "noop"}));
  EXPECT_EQ(K("saxpy_f32").signature().params,
            (std::vector<ParamKind>{ParamKind::kF32, ParamKind::kBuffer,
                                    ParamKind::kBuffer, ParamKind::kU64}));
  EXPECT_EQ(samples_->FindKernel("nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CpuBackendTest, FillThenVectorAddReadsBackSums) {
  auto q = NewQueue();
  auto a = Alloc(64), b = Alloc(64), c = Alloc(64);
  q->Launch(K("fill_u32"), {{4}, {4}}, {BufferArg{a}, 0x3f800000u, 16ul});
  q->Launch(K("fill_u32"), {{4}, {4}}, {BufferArg{b}, 0x40000000u, 16ul});
  q->Launch(K("vector_add_f32"), {{1}, {16}},
            {BufferArg{a}, BufferArg{b}, BufferArg{c}, 16ul});
  std::string bytes = ReadBack(*q, c, 0, 64);
  ASSERT_EQ(bytes.size(), 64u);
  for (int i = 0; i < 16; ++i) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    EXPECT_EQ(f, 3.0f) << i;
  }
}

TEST_F(CpuBackendTest, FlagGatesLaterWork) {
  auto q = NewQueue();
  auto flag = *device_.CreateFlag();
  auto counter = Alloc(8);
  q->WaitFlag(flag, 5, WaitCondition::kGreaterEqual);
  q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, 7ul});
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(q->IsIdle());
  flag->Store(4);  // Not enough.
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(q->IsIdle());
  flag->Store(6);
  std::string bytes = ReadBack(*q, counter, 0, 8);
  uint64_t v;
  std::memcpy(&v, bytes.data(), 8);
  EXPECT_EQ(v, 7u);
}

TEST_F(CpuBackendTest, HostWaitOnFlagWrittenByQueue) {
  auto q = NewQueue();
  auto flag = *device_.CreateFlag();
  absl::Notification got;
  uint64_t seen = 0;
  flag->AsyncWait(9, WaitCondition::kEqual, [&](absl::StatusOr<uint64_t> v) {
    seen = *v;
    got.Notify();
  });
  q->WriteFlag(flag, 9);
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(seen, 9u);
  EXPECT_EQ(flag->Load(), 9u);
}

TEST_F(CpuBackendTest, ReleaseCancelsHostWaitsAndUnblocksQueues) {
  auto q = NewQueue();
  auto flag = *device_.CreateFlag();
  absl::Status status;
  flag->AsyncWait(1, WaitCondition::kEqual,
                  [&](absl::StatusOr<uint64_t> v) { status = v.status(); });
  q->WaitFlag(flag, 1, WaitCondition::kEqual);
  flag->Release(absl::CancelledError("released"));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  absl::Notification idle;
  q->OnIdle([&](absl::Status) { idle.Notify(); });
  EXPECT_TRUE(idle.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST_F(CpuBackendTest, EventOrdersWorkAcrossQueues) {
  auto producer = NewQueue(), consumer = NewQueue();
  auto flag = *device_.CreateFlag();
  auto event = *device_.CreateEvent(true);
  auto buf = Alloc(4);
  producer->WaitFlag(flag, 1, WaitCondition::kEqual);
  producer->Launch(K("fill_u32"), {{1}, {1}}, {BufferArg{buf}, 42u, 1ul});
  producer->RecordEvent(event);
  consumer->WaitEvent(event);
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(event->IsComplete());
  EXPECT_FALSE(consumer->IsIdle());
  flag->Store(1);
  std::string bytes = ReadBack(*consumer, buf, 0, 4);
  uint32_t v;
  std::memcpy(&v, bytes.data(), 4);
  EXPECT_EQ(v, 42u);
  EXPECT_TRUE(event->IsComplete());
}

TEST_F(CpuBackendTest, ElapsedTimeCoversSpin) {
  auto q = NewQueue();
  auto start = *device_.CreateEvent(true), end = *device_.CreateEvent(true);
  q->RecordEvent(start);
  q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{20'000'000}});
  q->RecordEvent(end);
  absl::Notification idle;
  q->OnIdle([&](absl::Status) { idle.Notify(); });
  idle.WaitForNotification();
  auto ms = end->ElapsedMillisSince(*start);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 19.0f);
  auto untimed = *device_.CreateEvent(false);
  EXPECT_EQ(untimed->ElapsedMillisSince(*start).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CpuBackendTest, KernelFaultIsStickyAndSkipsLaterWork) {
  auto q = NewQueue();
  auto small = Alloc(8), counter = Alloc(8);
  q->Launch(K("fill_u32"), {{1}, {64}}, {BufferArg{small}, 1u, 64ul});
  q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, 1ul});
  absl::Notification idle;
  absl::Status status;
  q->OnIdle([&](absl::Status s) {
    status = s;
    idle.Notify();
  });
  idle.WaitForNotification();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("fill_u32"), std::string::npos);
  EXPECT_EQ(q->error().code(), absl::StatusCode::kInternal);
  auto q2 = NewQueue();
  std::string bytes = ReadBack(*q2, counter, 0, 8);
  EXPECT_EQ(bytes, std::string(8, '\0'));  // add_u64 was skipped.
}

TEST_F(CpuBackendTest, MemoryLimitAndReclaim) {
  EXPECT_EQ(device_.memory().free_bytes, 1u << 20);
  {
    auto big = Alloc(1 << 19);
    EXPECT_EQ(device_.memory().free_bytes, 1u << 19);
    EXPECT_EQ(device_.Allocate((1 << 19) + 1, MemoryKind::kHostPinned)
                  .status()
                  .code(),
              absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(device_.memory().free_bytes, 1u << 20);
}

TEST_F(CpuBackendTest, QueueDestroyedFromItsOwnCallback) {
  std::shared_ptr<Queue> q = NewQueue();
  auto buf = Alloc(4);
  q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{5'000'000}});
  absl::Notification done;
  q->OnIdle([q, &done](absl::Status) mutable {
    q.reset();
    done.Notify();
  });
  q.reset();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(CpuModuleLoadTest, LoadsSharedLibraryModule) {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) +
                           "/gpustream/kernels/cpu/libgpustream_samples.so";
  auto module = LoadCpuModule(path);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ((*module)->info().name, "samples");
  EXPECT_EQ((*module)->info().kernels.size(), 6u);
  EXPECT_EQ(LoadCpuModule("/nonexistent.so").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpustream::backend
