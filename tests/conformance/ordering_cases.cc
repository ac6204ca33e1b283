// Conformance: ordering across queues: events, waits on a record or on
// another queue, host functions in queue order.
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

TEST_P(DeviceConformanceTest, EventOrdersWorkAcrossQueues) {
  auto producer = NewQueue(), consumer = NewQueue();
  auto flag = *device_->CreateFlag();
  auto event = *device_->CreateEvent(true);
  auto buf = Alloc(4);
  ASSERT_TRUE(producer->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(producer
                  ->Launch(K("fill_u32"), {{1}, {1}},
                           {BufferArg{buf}, 42u, uint64_t{1}})
                  .ok());
  ASSERT_TRUE(producer->RecordEvent(event).ok());
  ASSERT_TRUE(consumer->WaitEvent(event).ok());
  auto copy = Alloc(4);
  ASSERT_TRUE(consumer->Copy(buf, 0, copy, 0, 4).ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(event->IsComplete());
  EXPECT_FALSE(consumer->IsIdle());
  flag->Store(1);
  std::string bytes = ReadBack(*consumer, copy, 0, 4);
  uint32_t v = 0;
  std::memcpy(&v, bytes.data(), 4);
  EXPECT_EQ(v, 42u);
  EXPECT_TRUE(event->IsComplete());
}

// The API: a wait binds to the record that was the latest when the wait was
// enqueued; recording the event again (here on an idle queue) must not
// release it early.
TEST_P(DeviceConformanceTest, WaitEventBindsToTheRecordAtEnqueue) {
  auto stalled = NewQueue(), waiter = NewQueue(), idle = NewQueue();
  auto flag = *device_->CreateFlag();
  auto event = *device_->CreateEvent(false);
  auto counter = Alloc(8);
  ASSERT_TRUE(stalled->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(stalled->RecordEvent(event).ok());
  ASSERT_TRUE(waiter->WaitEvent(event).ok());
  ASSERT_TRUE(
      waiter
          ->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}})
          .ok());
  ASSERT_TRUE(idle->RecordEvent(event).ok());  // Re-record, completes at once.
  ASSERT_TRUE(Sync(*idle).ok());
  EXPECT_TRUE(event->IsComplete());  // The latest record has completed...
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(waiter->IsIdle());  // ...but the wait is bound to the first.
  flag->Store(1);
  EXPECT_EQ(ReadU64(*waiter, counter), 1u);
}

TEST_P(DeviceConformanceTest, WaitQueueOrdersAfterOtherQueuesWork) {
  auto first = NewQueue(), second = NewQueue();
  auto flag = *device_->CreateFlag();
  auto buf = Alloc(4);
  ASSERT_TRUE(first->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(first
                  ->Launch(K("fill_u32"), {{1}, {1}},
                           {BufferArg{buf}, 11u, uint64_t{1}})
                  .ok());
  ASSERT_TRUE(second->WaitQueue(*first).ok());
  ASSERT_TRUE(second
                  ->Launch(K("fill_u32"), {{1}, {1}},
                           {BufferArg{buf}, 22u, uint64_t{1}})
                  .ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(second->IsIdle());
  flag->Store(1);
  std::string bytes = ReadBack(*second, buf, 0, 4);
  uint32_t v = 0;
  std::memcpy(&v, bytes.data(), 4);
  EXPECT_EQ(v, 22u);  // Second's fill ran after first's.
}

TEST_P(DeviceConformanceTest, HostFuncsRunInQueueOrder) {
  auto q = NewQueue();
  auto order = std::make_shared<std::vector<int>>();
  auto mu = std::make_shared<absl::Mutex>();
  auto counter = Alloc(8);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}})
            .ok());
    ASSERT_TRUE(q->HostFunc([order, mu, i] {
                   absl::MutexLock lock(mu.get());
                   order->push_back(i);
                 }).ok());
  }
  ASSERT_TRUE(Sync(*q).ok());
  absl::MutexLock lock(mu.get());
  EXPECT_EQ(*order, (std::vector<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace gpustream::backend
