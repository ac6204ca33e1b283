// Conformance: what goes wrong: a kernel fault, cancellation, memory
// limits and reclaim, queues dropped while busy or from their own
// callbacks.
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

// A fault poisons a GPU context (the device fails: ABORTED through the
// fatal-error handler, then Recover), and fails only its queue on the CPU
// (INTERNAL). Either way later work, waits included, is skipped: a wait on
// a flag nobody signals must not hang the queue.
TEST_P(DeviceConformanceTest, FaultIsStickyAndSkipsLaterWorkAndWaits) {
  constexpr uint64_t kFaulting = 41, kBystander = 42;
  auto q = NewQueue(kFaulting);
  // Another session's queue whose kernel has completed: not a suspect.
  auto bystander = NewQueue(kBystander);
  auto counter = Alloc(8);
  ASSERT_TRUE(
      bystander
          ->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{0}})
          .ok());
  ASSERT_TRUE(Sync(*bystander).ok());
  if (FaultKillsTheProcess([&] {
        (void)q->Launch(K("trap"), {{1}, {1}}, {});
        (void)Sync(*q);
      })) {
    return;
  }
  auto flag = *device_->CreateFlag();
  // The fault comes after the wait below is enqueued: it is found
  // asynchronously, as on a GPU.
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{20'000'000}}).ok());
  // trap faults on every backend; an out-of-bounds write need not on a GPU
  // (it may land in the same page as other memory).
  ASSERT_TRUE(q->Launch(K("trap"), {{1}, {1}}, {}).ok());
  // Enqueued behind the fault; may be refused at once once it is known.
  (void)q->WaitFlag(flag, 123, WaitCondition::kEqual);
  (void)q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}});
  const absl::Status status = Sync(*q);
  if (IsCpu()) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_NE(status.message().find("trap"), std::string::npos);
    EXPECT_EQ(q->error().code(), absl::StatusCode::kInternal);
    auto q2 = NewQueue();
    EXPECT_EQ(ReadU64(*q2, counter), 0u);  // add_u64 was skipped.
    return;
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  ASSERT_TRUE(fatal_.WaitForNotificationWithTimeout(kLong));
  EXPECT_EQ(fatal_status_.code(), absl::StatusCode::kAborted);
  // The failure names the session whose kernel was running, only it.
  EXPECT_EQ(fatal_sessions_, std::vector<uint64_t>{kFaulting});
  // Everything of the failed context goes, then the device recovers.
  q.reset();
  bystander.reset();
  counter.reset();
  flag.reset();
  ASSERT_TRUE(device_->Recover().ok());
  auto fresh = NewQueue();
  auto buf = Alloc(8);
  ASSERT_TRUE(
      fresh->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buf}, uint64_t{5}})
          .ok());
  EXPECT_EQ(ReadU64(*fresh, buf), 5u);
}

TEST_P(DeviceConformanceTest, CancelDropsHeldWorkAndReportsTheReason) {
  auto q = NewQueue();
  auto flag = *device_->CreateFlag();
  auto counter = Alloc(8);
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(
        q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}})
            .ok());
  }
  auto read_status = std::make_shared<absl::Status>();
  auto read_done = std::make_shared<absl::Notification>();
  ASSERT_TRUE(q->Read(counter, 0, 8,
                      [read_status, read_done](absl::StatusOr<std::string> d) {
                        *read_status = d.status();
                        read_done->Notify();
                      })
                  .ok());
  const absl::Status reason = absl::CancelledError("closed");
  q->Cancel(reason);
  flag->Release(reason);
  EXPECT_EQ(Sync(*q, absl::Seconds(2)).code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(read_done->WaitForNotificationWithTimeout(kLong));
  EXPECT_EQ(read_status->code(), absl::StatusCode::kCancelled);
  auto other = NewQueue();
  // Work held in the daemon never ran; on a GPU the part already handed to
  // the stream may have.
  EXPECT_LT(ReadU64(*other, counter), 2000u);
}

// Free memory is compared within the device's granularity: on a GPU an
// allocation takes whole 2 MiB pages, and the figure is the driver's.
TEST_P(DeviceConformanceTest, MemoryLimitAndReclaim) {
  device_->FlushCleanup();
  const MemoryInfo before = device_->memory();
  const uint64_t free_before = before.free_bytes;
  const uint64_t granule = before.granularity_bytes;
  ASSERT_GE(granule, 1u);
  ASSERT_GT(free_before, uint64_t{8} << 20);
  EXPECT_EQ(
      device_->Allocate(free_before + 1, MemoryKind::kDevice).status().code(),
      absl::StatusCode::kResourceExhausted);
  {
    auto big = Alloc(4 << 20);
    const uint64_t free_during = device_->memory().free_bytes;
    EXPECT_LE(free_during, free_before - (4 << 20));
    EXPECT_GE(free_during + granule, free_before - (4 << 20) - granule)
        << "4 MiB took more than its pages";
  }
  device_->FlushCleanup();
  const uint64_t free_after = device_->memory().free_bytes;
  EXPECT_LE(free_after, free_before + granule);
  EXPECT_GE(free_after + granule, free_before) << "the 4 MiB never came back";
}

TEST_P(DeviceConformanceTest, QueueDroppedFromItsOwnCallback) {
  std::shared_ptr<Queue> q = NewQueue();
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{5'000'000}}).ok());
  auto done = std::make_shared<absl::Notification>();
  q->OnIdle([q, done](absl::Status) mutable {
    q.reset();  // The last reference: released on the cleanup thread.
    done->Notify();
  });
  q.reset();
  EXPECT_TRUE(done->WaitForNotificationWithTimeout(kLong));
  device_->FlushCleanup();
}

// A record dropped before it reached its queue's stream (the queue was
// cancelled while the record waited behind a stalled wait) still counts as
// complete: another queue waiting on it does not hang.
TEST_P(DeviceConformanceTest, WaitOnARecordDroppedByCancelDoesNotHang) {
  auto stalled = NewQueue(), waiter = NewQueue();
  auto flag = *device_->CreateFlag();
  auto event = *device_->CreateEvent(false);
  auto counter = Alloc(8);
  ASSERT_TRUE(stalled->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  for (int i = 0; i < 1000; ++i) {  // Past a GPU queue's budget: held.
    ASSERT_TRUE(stalled
                    ->Launch(K("add_u64"), {{1}, {1}},
                             {BufferArg{counter}, uint64_t{1}})
                    .ok());
  }
  ASSERT_TRUE(stalled->RecordEvent(event).ok());
  ASSERT_TRUE(waiter->WaitEvent(event).ok());
  stalled->Cancel(absl::CancelledError("closed"));
  flag->Release(absl::CancelledError("closed"));
  EXPECT_TRUE(Sync(*waiter, absl::Seconds(5)).ok());
  EXPECT_TRUE(event->IsComplete());
}

// A queue dropped while its read is in flight still delivers the read.
TEST_P(DeviceConformanceTest, DroppingABusyQueueStillCompletesItsRead) {
  auto q = NewQueue();
  auto buf = Alloc(8);
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{20'000'000}}).ok());
  ASSERT_TRUE(
      q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buf}, uint64_t{9}}).ok());
  auto got = std::make_shared<absl::Notification>();
  auto data = std::make_shared<std::string>();
  ASSERT_TRUE(q->Read(buf, 0, 8, [got, data](absl::StatusOr<std::string> d) {
                 *data = d.ok() ? *d : d.status().ToString();
                 got->Notify();
               }).ok());
  q.reset();
  ASSERT_TRUE(got->WaitForNotificationWithTimeout(kLong));
  ASSERT_EQ(data->size(), 8u) << *data;
  uint64_t v;
  std::memcpy(&v, data->data(), 8);
  EXPECT_EQ(v, 9u);
}

}  // namespace
}  // namespace gpustream::backend
