// Conformance: completion flags: waits on the host's and queues' values,
// EQUAL and wrap-around GREATER_EQUAL, releases, and waits parked on
// flags that block no other tenant.
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

TEST_P(DeviceConformanceTest, FlagGatesLaterWork) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto counter = Alloc(8);
  ASSERT_TRUE(q->WaitFlag(flag, 5, WaitCondition::kGreaterEqual).ok());
  ASSERT_TRUE(
      q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{7}})
          .ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(q->IsIdle());
  flag->Store(4);  // Not enough.
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(q->IsIdle());
  flag->Store(6);
  EXPECT_EQ(ReadU64(*q, counter), 7u);
}

TEST_P(DeviceConformanceTest, GreaterEqualWrapsAroundAt2To63) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto counter = Alloc(8);
  const uint64_t target = 10;
  // (int64_t)(flag - target) < 0 for flag = target + 2^63: not satisfied,
  // although flag > target as unsigned numbers.
  flag->Store(target + (uint64_t{1} << 63));
  ASSERT_TRUE(q->WaitFlag(flag, target, WaitCondition::kGreaterEqual).ok());
  ASSERT_TRUE(
      q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}})
          .ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(q->IsIdle());
  // target + 2^63 - 1 is "ahead" of target: satisfied.
  flag->Store(target + (uint64_t{1} << 63) - 1);
  EXPECT_EQ(ReadU64(*q, counter), 1u);
  // A counter that wrapped past 2^64 still satisfies a wait for a value
  // just below the wrap.
  ASSERT_TRUE(
      q->WaitFlag(flag, ~uint64_t{0} - 1, WaitCondition::kGreaterEqual).ok());
  ASSERT_TRUE(
      q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}})
          .ok());
  flag->Store(3);  // 3 - (2^64 - 2) wraps to 5: ahead.
  EXPECT_EQ(ReadU64(*q, counter), 2u);
}

TEST_P(DeviceConformanceTest, HostWaitOnFlagWrittenByQueue) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto got = std::make_shared<absl::Notification>();
  auto seen = std::make_shared<uint64_t>(0);
  flag->AsyncWait(9, WaitCondition::kEqual,
                  [got, seen](absl::StatusOr<uint64_t> v) {
                    *seen = v.ok() ? *v : 0;
                    got->Notify();
                  });
  ASSERT_TRUE(q->WriteFlag(flag, 9).ok());
  ASSERT_TRUE(got->WaitForNotificationWithTimeout(kLong));
  EXPECT_EQ(*seen, 9u);
  EXPECT_EQ(flag->Load(), 9u);
}

// A queue waits for a flag that another queue writes behind its own work:
// whether the wait is enqueued before the write (held until the write is
// on its stream) or after it (on a GPU, a device-side wait on the write),
// the waiting queue's work runs only after everything before the write.
TEST_P(DeviceConformanceTest, FlagWrittenByAnotherQueueOrdersItsWaiters) {
  for (const bool wait_first : {true, false}) {
    SCOPED_TRACE(wait_first ? "wait enqueued first" : "write enqueued first");
    auto writer = NewQueue(), waiter = NewQueue();
    auto flag = *device_->CreateFlag();
    auto made = Alloc(4), copied = Alloc(4);
    auto wait = [&] {
      ASSERT_TRUE(waiter->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
      ASSERT_TRUE(waiter->Copy(made, 0, copied, 0, 4).ok());
    };
    if (wait_first) wait();
    ASSERT_TRUE(
        writer->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{30'000'000}}).ok());
    ASSERT_TRUE(writer
                    ->Launch(K("fill_u32"), {{1}, {1}},
                             {BufferArg{made}, 7u, uint64_t{1}})
                    .ok());
    ASSERT_TRUE(writer->WriteFlag(flag, 1).ok());
    if (!wait_first) wait();
    std::string bytes = ReadBack(*waiter, copied, 0, 4);
    ASSERT_EQ(bytes.size(), 4u) << bytes;
    uint32_t value = 0;
    std::memcpy(&value, bytes.data(), 4);
    EXPECT_EQ(value, 7u) << "the waiter ran before the writer's work";
  }
}

// A value written and overwritten before a queue waits for it does not
// satisfy the wait: the queue stays blocked (and blocks nobody else: this
// suite runs the fake CUDA driver with one hardware queue for every
// stream) until the value comes again.
TEST_P(DeviceConformanceTest, AValueGoneBeforeTheWaitDoesNotSatisfyIt) {
  auto writer = NewQueue(), waiter = NewQueue(), other = NewQueue();
  auto flag = *device_->CreateFlag();
  auto counter = Alloc(8);
  ASSERT_TRUE(writer->WriteFlag(flag, 1).ok());
  ASSERT_TRUE(Sync(*writer).ok());
  flag->Store(0);
  ASSERT_TRUE(waiter->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(
      waiter
          ->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{5}})
          .ok());
  // Another queue's work goes through meanwhile.
  auto buffer = Alloc(8);
  ASSERT_TRUE(
      other->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buffer}, uint64_t{3}})
          .ok());
  ASSERT_TRUE(Sync(*other, absl::Seconds(1)).ok());
  EXPECT_EQ(ReadU64(*other, buffer), 3u);
  EXPECT_FALSE(waiter->IsIdle());
  EXPECT_EQ(ReadU64(*other, counter), 0u);
  flag->Store(1);
  ASSERT_TRUE(Sync(*waiter).ok());
  EXPECT_EQ(ReadU64(*waiter, counter), 5u);
}

TEST_P(DeviceConformanceTest, ReleaseCancelsHostWaitsAndUnblocksQueues) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto status = std::make_shared<absl::Status>();
  flag->AsyncWait(
      1, WaitCondition::kEqual,
      [status](absl::StatusOr<uint64_t> v) { *status = v.status(); });
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  flag->Release(absl::CancelledError("released"));
  EXPECT_EQ(status->code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(Sync(*q).ok());
}

// Teardown's hard case: EQUAL waits on different values of one flag cannot
// be released by one store. Both queues must drain within 2 s.
TEST_P(DeviceConformanceTest, EqualWaitsOnDifferentValuesAllReleased) {
  auto flag = *device_->CreateFlag();
  std::vector<std::shared_ptr<Queue>> queues;
  for (uint64_t value : {5, 7, 9}) {
    queues.push_back(NewQueue());
    ASSERT_TRUE(
        queues.back()->WaitFlag(flag, value, WaitCondition::kEqual).ok());
    ASSERT_TRUE(
        queues.back()->WaitFlag(flag, value + 100, WaitCondition::kEqual).ok());
  }
  absl::SleepFor(absl::Milliseconds(20));
  for (auto& q : queues) EXPECT_FALSE(q->IsIdle());
  const absl::Time start = absl::Now();
  const absl::Status reason = absl::CancelledError("session closed");
  for (auto& q : queues) q->Cancel(reason);
  flag->Release(reason);
  for (auto& q : queues) {
    EXPECT_EQ(Sync(*q, absl::Seconds(2)).code(), absl::StatusCode::kCancelled);
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// One tenant parks 64 queues (more than any GPU has hardware queues) on
// flags nobody signals, each with work behind its wait; another tenant's
// allocate, launch, synchronize, read and free still complete within a
// second each. On a GPU a wait parked at the head of a hardware queue would
// hold up every stream behind it (this suite runs the fake CUDA driver with
// a single hardware queue), and a free would wait for it for ever.
TEST_P(DeviceConformanceTest, ParkedQueuesOfOneTenantBlockNoOtherTenant) {
  constexpr int kParked = 64;
  constexpr absl::Duration kBound = absl::Seconds(1);
  auto a = std::make_shared<WorkAccount>("a");
  std::vector<std::shared_ptr<Queue>> parked;
  std::vector<std::shared_ptr<Flag>> flags;
  // A counter per queue: queues run side by side, and adds of two queues
  // to the same word would race.
  std::vector<std::shared_ptr<Buffer>> sinks;
  for (int i = 0; i < kParked; ++i) {
    QueueOptions options;
    options.account = a;
    parked.push_back(*device_->CreateQueue(std::move(options)));
    flags.push_back(*device_->CreateFlag());
    sinks.push_back(Alloc(8));
    ASSERT_TRUE(
        parked.back()->WaitFlag(flags.back(), 1, WaitCondition::kEqual).ok());
    ASSERT_TRUE(parked.back()
                    ->Launch(K("add_u64"), {{1}, {1}},
                             {BufferArg{sinks.back()}, uint64_t{1}})
                    .ok());
  }
  QueueOptions options;
  options.account = std::make_shared<WorkAccount>("b");
  auto q = *device_->CreateQueue(std::move(options));
  for (int round = 0; round < 3; ++round) {
    absl::Time start = absl::Now();
    auto buffer = device_->Allocate(8, MemoryKind::kDevice);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_LT(absl::Now() - start, kBound) << "allocate";
    start = absl::Now();
    ASSERT_TRUE(
        q->Launch(K("add_u64"), {{1}, {1}},
                  {BufferArg{*buffer}, static_cast<uint64_t>(round + 1)})
            .ok());
    ASSERT_TRUE(Sync(*q, kBound).ok()) << "launch + synchronize";
    EXPECT_LT(absl::Now() - start, kBound) << "launch + synchronize";
    start = absl::Now();
    EXPECT_EQ(ReadU64(*q, *buffer), uint64_t(round + 1));
    EXPECT_LT(absl::Now() - start, kBound) << "read";
    start = absl::Now();
    buffer->reset();
    device_->FlushCleanup();  // The free ran.
    EXPECT_LT(absl::Now() - start, kBound) << "free";
  }
  // Nothing of A's ran; signalled, all of it does.
  for (auto& sink : sinks) EXPECT_EQ(ReadU64(*q, sink), 0u);
  for (auto& flag : flags) flag->Store(1);
  for (auto& p : parked) ASSERT_TRUE(Sync(*p).ok());
  for (auto& sink : sinks) EXPECT_EQ(ReadU64(*q, sink), 1u);
}

// Host waits see every value a queue writes, even one overwritten at once.
TEST_P(DeviceConformanceTest, HostEqualWaitSeesEachValueTheQueueWrites) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto seen = std::make_shared<std::atomic<int>>(0);
  for (uint64_t v = 1; v <= 20; ++v) {
    flag->AsyncWait(v, WaitCondition::kEqual,
                    [seen](absl::StatusOr<uint64_t> got) {
                      if (got.ok()) seen->fetch_add(1);
                    });
  }
  for (uint64_t v = 1; v <= 20; ++v) ASSERT_TRUE(q->WriteFlag(flag, v).ok());
  ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(seen->load(), 20);
}

}  // namespace
}  // namespace gpustream::backend
