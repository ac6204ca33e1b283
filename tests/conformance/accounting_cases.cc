// Conformance: work accounting (server/backend/work_account.h). Every
// backend keeps the WorkAccount counters of the queues created with it;
// these tests use nothing but that contract.
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

// Polls `done` every millisecond for at most `limit`.
bool Eventually(const std::function<bool()>& done,
                absl::Duration limit = kLong) {
  const absl::Time deadline = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

std::shared_ptr<Queue> AccountQueue(Device& device,
                                    std::shared_ptr<WorkAccount> account,
                                    uint64_t session = 0) {
  QueueOptions options;
  options.account = std::move(account);
  options.session_key = session;
  return *device.CreateQueue(std::move(options));
}

// "inflight 0, staged 0, completed n" once the counters settle.
std::string Counters(const WorkAccount& a) {
  return "inflight " + std::to_string(a.inflight_commands.load()) +
         ", staged " + std::to_string(a.staged_bytes.load()) + ", completed " +
         std::to_string(a.commands_completed.load());
}

TEST_P(DeviceConformanceTest, AccountCountsEachCommandThatRan) {
  auto account = std::make_shared<WorkAccount>("tenant");
  auto q = AccountQueue(*device_, account);
  auto buf = Alloc(4096);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buf}, uint64_t{1}})
            .ok());
  }
  ASSERT_TRUE(q->Write(buf, 64, std::string(1000, 'x')).ok());
  ASSERT_TRUE(q->Fill(buf, 2048, 16, 7u).ok());
  ASSERT_TRUE(q->Copy(buf, 0, buf, 1024, 8).ok());
  EXPECT_EQ(ReadU64(*q, buf), 10u);  // The 14th command.
  ASSERT_TRUE(Sync(*q).ok());
  // Synchronizing is not a command.
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           account->staged_bytes.load() == 0 &&
           account->commands_completed.load() == 14;
  })) << Counters(*account);
  // Two queues, in two sessions, charge the same account; a queue created
  // without one charges none of it.
  auto q2 = AccountQueue(*device_, account, /*session=*/2);
  auto other = NewQueue();
  // One after the other: the three add to the same counter.
  for (auto* x : {q.get(), q2.get(), other.get()}) {
    ASSERT_TRUE(
        x->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buf}, uint64_t{1}})
            .ok());
    ASSERT_TRUE(Sync(*x).ok());
  }
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           account->commands_completed.load() == 16;
  })) << Counters(*account);
}

// Writes behind an unsignalled wait: their data is staged in the daemon
// (more of them than a GPU stream takes) until they run.
TEST_P(DeviceConformanceTest, StagedBytesCoverWritesParkedBehindAFlag) {
  auto account = std::make_shared<WorkAccount>("tenant");
  auto q = AccountQueue(*device_, account);
  auto flag = *device_->CreateFlag();
  auto buf = Alloc(64);
  constexpr int kWrites = 500;
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(q->Write(buf, 0, std::string(64, static_cast<char>(i))).ok());
  }
  EXPECT_EQ(account->staged_bytes.load(), kWrites * 64);
  EXPECT_EQ(account->inflight_commands.load(), kWrites + 1);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(account->commands_completed.load(), 0u);  // Nothing ran.
  EXPECT_EQ(account->staged_bytes.load(), kWrites * 64);
  flag->Store(1);
  ASSERT_TRUE(Sync(*q).ok());
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           account->staged_bytes.load() == 0 &&
           account->commands_completed.load() == kWrites + 1;
  })) << Counters(*account);
  EXPECT_EQ(ReadBack(*q, buf, 0, 64),
            std::string(64, static_cast<char>(kWrites - 1)));
}

// Cancel drops held work: it leaves the counters; what ran still counts.
TEST_P(DeviceConformanceTest, CancelReturnsTheCountersToZero) {
  auto account = std::make_shared<WorkAccount>("tenant");
  auto q = AccountQueue(*device_, account);
  auto flag = *device_->CreateFlag();
  auto buf = Alloc(64);
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(
        q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buf}, uint64_t{1}})
            .ok());
  }
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(q->Write(buf, 8, std::string(56, 'w')).ok());
  }
  EXPECT_EQ(account->inflight_commands.load(), 701);
  EXPECT_EQ(account->staged_bytes.load(), 100 * 56);
  const absl::Status reason = absl::CancelledError("closed");
  q->Cancel(reason);
  flag->Release(reason);
  EXPECT_EQ(Sync(*q, absl::Seconds(2)).code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           account->staged_bytes.load() == 0;
  })) << Counters(*account);
  EXPECT_LE(account->commands_completed.load(), 701u);
}

// A fault fails the work (a GPU: the whole device); nothing stays counted.
TEST_P(DeviceConformanceTest, CountersSettleAfterAFault) {
  auto account = std::make_shared<WorkAccount>("tenant");
  auto q = AccountQueue(*device_, account);
  auto counter = Alloc(8);
  if (FaultKillsTheProcess([&] {
        (void)q->Launch(K("trap"), {{1}, {1}}, {});
        (void)Sync(*q);
      })) {
    return;
  }
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{5'000'000}}).ok());
  ASSERT_TRUE(q->Launch(K("trap"), {{1}, {1}}, {}).ok());
  // Enqueued behind the fault; may be refused at once once it is known.
  (void)q->Write(counter, 0, std::string(8, 'x'));
  (void)q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter}, uint64_t{1}});
  EXPECT_FALSE(Sync(*q).ok());
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           account->staged_bytes.load() == 0;
  })) << Counters(*account);
  // At most the spin and, where the backend counts it as run, the launch
  // that faulted.
  EXPECT_LE(account->commands_completed.load(), 2u);
  if (!IsCpu()) {
    ASSERT_TRUE(fatal_.WaitForNotificationWithTimeout(kLong));
  }
}

// Busy time: the span the tenant's work ran, as the backend measures it.
TEST_P(DeviceConformanceTest, BusyTimeCoversTheWorkThatRan) {
  auto account = std::make_shared<WorkAccount>("tenant");
  auto q = AccountQueue(*device_, account);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{20'000'000}}).ok());
  ASSERT_TRUE(Sync(*q).ok());
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_TRUE(Eventually([&] { return account->busy_ns.load() >= 15'000'000; }))
      << account->busy_ns.load();
  EXPECT_LE(account->busy_ns.load(),
            absl::ToInt64Nanoseconds(elapsed + absl::Milliseconds(5)));
}

}  // namespace
}  // namespace gpustream::backend
