// The sharing modes of a CUDA device on the fake driver: a context of a
// tenant's own (its fault is its own) and SM partitions (green contexts:
// sized by weight at the device's granularity, SM-bound work slowed in
// proportion, refused where they do not fit, stale after a reset).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_sm_partition.h"
#include "server/backend/gpu/gpu_testing.h"

namespace gpustream::backend {
namespace {

TEST(SizeSmPartitionsTest, SharesFollowWeightsRoundedDownAtLeastOneEach) {
  EXPECT_EQ(*SizeSmPartitions({1}, 16), (std::vector<uint32_t>{16}));
  EXPECT_EQ(*SizeSmPartitions({2, 1}, 16), (std::vector<uint32_t>{10, 5}));
  EXPECT_EQ(*SizeSmPartitions({1, 1, 1}, 16), (std::vector<uint32_t>{5, 5, 5}));
  // 1/100 of 16 rounds to 0: the minimum of one is taken from the largest.
  EXPECT_EQ(*SizeSmPartitions({99, 1}, 16), (std::vector<uint32_t>{15, 1}));
  EXPECT_EQ(*SizeSmPartitions(std::vector<uint32_t>(16, 1), 16),
            std::vector<uint32_t>(16, 1));
  const auto too_many = SizeSmPartitions(std::vector<uint32_t>(17, 1), 16);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(too_many.status().message(),
                                "17 partitions of at least one group"))
      << too_many.status();
}

class CudaSharingFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = OpenFakeCudaDevice();
    ASSERT_TRUE(created.ok()) << created.status();
    device_ = *std::move(created);
    modules_ = device_->BuiltinModules();
    ASSERT_FALSE(modules_.empty());
  }
  const Kernel& K(const char* name) {
    return **modules_.front()->FindKernel(name);
  }

  // How long `blocks` blocks of spin_ns(1 ms) take on a queue of `partition`.
  absl::Duration SpinTime(std::shared_ptr<SmPartition> partition,
                          uint32_t blocks) {
    QueueOptions options;
    options.partition = std::move(partition);
    auto q = device_->CreateQueue(std::move(options));
    EXPECT_TRUE(q.ok()) << q.status();
    if (!q.ok()) return absl::ZeroDuration();
    absl::Notification idle;
    const absl::Time start = absl::Now();
    EXPECT_TRUE(
        (*q)->Launch(K("spin_ns"), {{blocks}, {1}}, {uint64_t{1'000'000}})
            .ok());
    (*q)->OnIdle([&idle](absl::Status) { idle.Notify(); });
    EXPECT_TRUE(idle.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return absl::Now() - start;
  }

  std::unique_ptr<GpuDevice> device_;
  std::vector<std::unique_ptr<Module>> modules_;
};

// The fake's H100-class device: 132 SMs in groups of 8 (16 groups, 4 SMs
// over). 2:1 weights get 10 and 5 groups.
TEST_F(CudaSharingFakeTest, PartitionsAreSizedByWeightAtTheGranularity) {
  auto split = device_->PartitionSms({2, 1});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), 2u);
  EXPECT_EQ((*split)[0]->sm_count(), 80u);
  EXPECT_EQ((*split)[1]->sm_count(), 40u);
  auto refused = device_->PartitionSms(std::vector<uint32_t>(17, 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(), "132 SMs in groups of 8"))
      << refused.status();
}

// 80 blocks take one wave on the whole device and on an 80-SM partition,
// two on a 40-SM one: the partition's streams run on its SMs only.
TEST_F(CudaSharingFakeTest, SmBoundWorkRunsOnThePartitionsSmsOnly) {
  auto split = device_->PartitionSms({2, 1});
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_GE(SpinTime((*split)[1], 80), absl::Milliseconds(2));
  EXPECT_GE(SpinTime((*split)[1], 81), absl::Milliseconds(3));
  // One wave on 80 SMs: well under the 16 that 640 blocks need on 40 SMs.
  // The fastest of three, so that a loaded machine's stall in one run does
  // not decide (a wall-clock bound; the lower bounds above hold anyway).
  absl::Duration wide = absl::InfiniteDuration();
  for (int i = 0; i < 3; ++i) {
    wide = std::min(wide, SpinTime((*split)[0], 80));
  }
  EXPECT_GE(wide, absl::Milliseconds(1));
  EXPECT_LT(wide, SpinTime((*split)[1], 80 * 8));
}

TEST_F(CudaSharingFakeTest, APartitionOfAnotherDeviceOrEpochIsRefused) {
  auto split = device_->PartitionSms({1});
  ASSERT_TRUE(split.ok()) << split.status();
  auto other = device_->CreateContext();
  ASSERT_TRUE(other.ok()) << other.status();
  QueueOptions options;
  options.partition = split->front();
  auto refused = (*other)->CreateQueue(std::move(options));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "SM partition"))
      << refused.status();
}

// Tenant B's kernel faults in B's own context: B's fatal-error handler
// runs, A's is never called and A's work goes on; B recovers by a new
// context of its own (its sticky error died with the old one).
TEST_F(CudaSharingFakeTest, AFaultInATenantContextStaysThere) {
  auto a = device_->CreateContext();
  auto b = device_->CreateContext();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  absl::Notification a_failed, b_failed;
  (*a)->SetFatalErrorHandler([&](const DeviceFailure&) { a_failed.Notify(); });
  (*b)->SetFatalErrorHandler([&](const DeviceFailure&) { b_failed.Notify(); });
  auto a_modules = (*a)->BuiltinModules();
  auto b_modules = (*b)->BuiltinModules();
  ASSERT_FALSE(a_modules.empty());
  ASSERT_FALSE(b_modules.empty());
  auto qa = *(*a)->CreateQueue(QueueOptions{});
  auto buffer = *(*a)->Allocate(8, MemoryKind::kDevice);
  {
    auto qb = *(*b)->CreateQueue(QueueOptions{});
    ASSERT_TRUE(
        qb->Launch(**b_modules.front()->FindKernel("trap"), {{1}, {1}}, {})
            .ok());
    ASSERT_TRUE(b_failed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  }
  ASSERT_TRUE(qa->Launch(**a_modules.front()->FindKernel("add_u64"), {{1}, {1}},
                         {BufferArg{buffer}, uint64_t{42}})
                  .ok());
  EXPECT_EQ(*ReadU64(*qa, buffer), 42u);
  EXPECT_FALSE(a_failed.HasBeenNotified());
  EXPECT_FALSE(device_->failed());
  b_modules.clear();
  ASSERT_TRUE((*b)->Recover().ok());
  b_modules = (*b)->BuiltinModules();
  ASSERT_FALSE(b_modules.empty());
  auto qb = *(*b)->CreateQueue(QueueOptions{});
  auto b_buffer = *(*b)->Allocate(8, MemoryKind::kDevice);
  ASSERT_TRUE(qb->Launch(**b_modules.front()->FindKernel("add_u64"), {{1}, {1}},
                         {BufferArg{b_buffer}, uint64_t{7}})
                  .ok());
  EXPECT_EQ(*ReadU64(*qb, b_buffer), 7u);
}

// The device learns of a fault at once, and its dispatcher fails each
// queue a moment later (the dispatcher is held here, in a host function of
// another queue, to keep that moment open). In it, a queue of the failed
// context must not report idle and OK (a SynchronizeQueue answered then, by
// the fast path that asks IsIdle and then error(), would tell the client
// that its faulted kernel ran), must not report idle while a read's
// delivery is still due (nor while it runs), and must answer every OnIdle,
// in order, after the read.
TEST_F(CudaSharingFakeTest, AQueueOfAFailedContextIsNeverIdleAndOk) {
  // Before the context: the callbacks below may run until it goes.
  absl::Notification failed, read, idle[2], other_read, other_idle;
  absl::Status read_status, idle_status[2];
  std::atomic<int> answers{0};  // Callbacks run, in order.
  int read_answer = -1, idle_answer[2] = {-1, -1};
  bool idle_during_read = true, idle_when_answered[2] = {false, false};
  bool other_idle_during_read = true, other_idle_when_answered = false;
  // Asked from the callbacks, which may run until the context goes.
  std::weak_ptr<Queue> weak_faulting, weak_reading;
  auto idle_now = [](const std::weak_ptr<Queue>& weak) {
    auto q = weak.lock();
    return q != nullptr && q->IsIdle();
  };
  auto created = device_->CreateContext();  // Its sticky error dies with it.
  ASSERT_TRUE(created.ok()) << created.status();
  Device& ctx = **created;
  ctx.SetFatalErrorHandler([&](const DeviceFailure&) { failed.Notify(); });
  auto modules = ctx.BuiltinModules();
  ASSERT_FALSE(modules.empty());
  auto kernel = [&](const char* name) -> const Kernel& {
    return **modules.front()->FindKernel(name);
  };
  auto holder = *ctx.CreateQueue(QueueOptions{});
  // As a session's queues are made: the queue's error is published.
  auto with_on_error = [] {
    QueueOptions options;
    options.on_error = [](const absl::Status&) {};
    return options;
  };
  auto faulting = *ctx.CreateQueue(with_on_error());
  auto noticing = *ctx.CreateQueue(QueueOptions{});
  // A read and then an OnIdle issued before the fault.
  auto reading = *ctx.CreateQueue(with_on_error());
  auto buffer = *ctx.Allocate(8, MemoryKind::kDevice);
  weak_faulting = faulting;
  weak_reading = reading;
  DispatcherHold hold(*holder);
  ASSERT_TRUE(hold.Held());
  // The read's delivery needs the dispatcher: it stays due.
  ASSERT_TRUE(faulting
                  ->Read(buffer, 0, 8,
                         [&](absl::StatusOr<std::string> data) {
                           read_status = data.status();
                           read_answer = answers++;
                           idle_during_read = idle_now(weak_faulting);
                           read.Notify();
                         })
                  .ok());
  ASSERT_TRUE(reading
                  ->Read(buffer, 0, 8,
                         [&](absl::StatusOr<std::string>) {
                           other_idle_during_read = idle_now(weak_reading);
                           other_read.Notify();
                         })
                  .ok());
  reading->OnIdle([&](absl::Status) {
    other_idle_when_answered = idle_now(weak_reading);
    other_idle.Notify();
  });
  ASSERT_TRUE(faulting->Launch(kernel("trap"), {{1}, {1}}, {}).ok());
  // A launch on the poisoned context is refused by the driver: the device
  // fails then, on this thread, while its dispatcher is still held.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!ctx.failed() && absl::Now() < deadline) {
    noticing->Launch(kernel("noop"), {{1}, {1}}, {}).IgnoreError();
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(ctx.failed());
  ASSERT_FALSE(failed.HasBeenNotified());  // The moment is still open.
  EXPECT_FALSE(faulting->IsIdle()) << "the read's delivery is still due";
  const absl::Status error = faulting->error();
  EXPECT_EQ(error.code(), absl::StatusCode::kAborted) << error;
  EXPECT_TRUE(absl::StrContains(error.message(), "LAUNCH_FAILED")) << error;
  // Two OnIdles: the device refuses the first one's no-op; neither is
  // answered before the read (whose delivery the failure makes), and the
  // second joins the first.
  for (int i = 0; i < 2; ++i) {
    faulting->OnIdle([&, i](absl::Status s) {
      idle_status[i] = std::move(s);
      idle_answer[i] = answers++;
      idle_when_answered[i] = idle_now(weak_faulting);
      idle[i].Notify();
    });
  }
  EXPECT_FALSE(idle[0].HasBeenNotified()) << "answered before the read";
  EXPECT_FALSE(idle[1].HasBeenNotified()) << "answered before the read";
  hold.Release();
  ASSERT_TRUE(read.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(read_status.code(), absl::StatusCode::kAborted) << read_status;
  EXPECT_FALSE(idle_during_read) << "idle while the read's data was due";
  ASSERT_TRUE(other_read.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_FALSE(other_idle_during_read) << "idle while the read's data was due";
  ASSERT_TRUE(other_idle.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(other_idle_when_answered)
      << "busy in its OnIdle: the queue's error notice counted as work";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(idle[i].WaitForNotificationWithTimeout(absl::Seconds(20)))
        << "OnIdle " << i << " was never answered";
    EXPECT_EQ(idle_status[i].code(), absl::StatusCode::kAborted)
        << idle_status[i];
    EXPECT_TRUE(idle_when_answered[i]) << "OnIdle " << i;
  }
  EXPECT_EQ(read_answer, 0);
  EXPECT_EQ(idle_answer[0], 1);
  EXPECT_EQ(idle_answer[1], 2);
  EXPECT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(faulting->IsIdle());
  EXPECT_EQ(faulting->error().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace gpustream::backend
