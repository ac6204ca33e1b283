// The CPU device's execution pool: fair shares between tenants, sessions
// and queue priorities, order within a queue, parked waits that hold no
// thread, the per-launch time limit, Cancel of a running kernel and the
// WorkAccount counters. Fairness runs on one execution thread, where the
// shares are exact, with spin_ns launches timed by the wall clock (so a
// loaded test machine changes the totals, not the ratios).
#include "server/backend/cpu/cpu_scheduler.h"

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/work_account.h"

namespace gpustream::backend {
namespace {

constexpr absl::Duration kLong = absl::Seconds(20);
constexpr uint64_t kForever =
    ~uint64_t{0};  // spin_ns saturates: "until stopped".

int ThreadCount() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

class CpuSchedulerTest : public ::testing::Test {
 protected:
  void Open(CpuDeviceOptions options) {
    options.memory_limit_bytes = uint64_t{16} << 20;
    device_ = std::make_unique<CpuDevice>(options);
    modules_ = device_->BuiltinModules();
    ASSERT_FALSE(modules_.empty());
    samples_ = modules_.front().get();
  }
  void Open(uint32_t threads) {
    CpuDeviceOptions options;
    options.threads = threads;
    Open(options);
  }

  const Kernel& K(const char* name) { return **samples_->FindKernel(name); }

  std::shared_ptr<Queue> NewQueue(std::shared_ptr<WorkAccount> account,
                                  uint64_t session = 0, int32_t priority = 0) {
    QueueOptions options;
    options.account = std::move(account);
    options.session_key = session;
    options.priority = priority;
    return *device_->CreateQueue(std::move(options));
  }

  static absl::Status Sync(Queue& q, absl::Duration limit = kLong) {
    auto n = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    q.OnIdle([n, status](absl::Status s) {
      *status = s;
      n->Notify();
    });
    if (!n->WaitForNotificationWithTimeout(limit)) {
      return absl::DeadlineExceededError("queue did not drain");
    }
    return *status;
  }

  // Keeps `q` busy with spin_ns launches of `ns` until `stop`, counting the
  // launches done in `count`: each launch is followed by a host function
  // that enqueues the next pair, so the queue never runs dry.
  void Chain(Queue* q, uint64_t ns, std::shared_ptr<std::atomic<bool>> stop,
             std::atomic<uint64_t>* count) {
    const Kernel* spin = &K("spin_ns");
    ASSERT_TRUE(q->Launch(*spin, {{1}, {1}}, {ns}).ok());
    ASSERT_TRUE(q->HostFunc([this, q, ns, stop, count] {
                   count->fetch_add(1);
                   if (!stop->load()) Chain(q, ns, stop, count);
                 }).ok());
  }

  // Runs a chain of `ns` spins on every queue of `groups` for `window`
  // after a warm-up; the launches each group completed in the window.
  std::vector<double> Measure(
      const std::vector<std::vector<std::shared_ptr<Queue>>>& groups,
      uint64_t ns, absl::Duration window) {
    auto stop = std::make_shared<std::atomic<bool>>(false);
    std::vector<std::atomic<uint64_t>> counts(groups.size());
    // Four chains a queue: it never runs dry while a host function waits
    // for a thread to enqueue its next launch (on a loaded machine a queue
    // that ran dry would hand its turns to the others).
    for (size_t g = 0; g < groups.size(); ++g) {
      for (auto& q : groups[g]) {
        for (int chain = 0; chain < 4; ++chain) {
          Chain(q.get(), ns, stop, &counts[g]);
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(200));
    std::vector<uint64_t> before;
    for (auto& c : counts) before.push_back(c.load());
    absl::SleepFor(window);
    std::vector<double> done;
    for (size_t g = 0; g < counts.size(); ++g) {
      done.push_back(static_cast<double>(counts[g].load() - before[g]));
    }
    std::printf("launches done per group:");
    for (double d : done) std::printf(" %.0f", d);
    std::printf("\n");
    stop->store(true);
    for (auto& group : groups) {
      for (auto& q : group) EXPECT_TRUE(Sync(*q).ok());
    }
    return done;
  }

  // Whether group 0 completed `expected` times group 1's launches, within
  // `tolerance`, in one of up to three Measure() windows of 1.5 s. A
  // loaded machine (the test command runs two tests at once on two cores)
  // now and then preempts a spinning launch, which the scheduler charges
  // to its queue and which skews one window; an unfair scheduler misses
  // them all. `ratio` is the last window's.
  bool ShareNear(const std::vector<std::vector<std::shared_ptr<Queue>>>& groups,
                 double expected, double tolerance, double* ratio) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::vector<double> done = Measure(groups, 1'000'000, absl::Seconds(1.5));
      EXPECT_GT(done[1], 100);
      *ratio = done[0] / std::max(done[1], 1.0);
      if (std::abs(*ratio - expected) <= tolerance) return true;
    }
    return false;
  }

  // Modules outlive the device: queued launches refer to their kernels.
  std::vector<std::unique_ptr<Module>> modules_;
  Module* samples_ = nullptr;
  std::unique_ptr<CpuDevice> device_;
};

TEST_F(CpuSchedulerTest, TenantWithEightQueuesGetsNoMoreThanTenantWithOne) {
  Open(1);
  auto one = std::make_shared<WorkAccount>("one");
  auto eight = std::make_shared<WorkAccount>("eight");
  std::vector<std::vector<std::shared_ptr<Queue>>> groups(2);
  groups[0].push_back(NewQueue(one));
  for (int i = 0; i < 8; ++i) groups[1].push_back(NewQueue(eight));
  double ratio = 0;
  EXPECT_TRUE(ShareNear(groups, 1.0, 0.1, &ratio)) << ratio;
  // The busy time charged follows the same split.
  EXPECT_NEAR(static_cast<double>(eight->busy_ns.load()) /
                  static_cast<double>(one->busy_ns.load()),
              1.0, 0.1);
}

// Weights 2:1 give clearly more to the heavy tenant. The exact figure
// (2.0 +- 0.1) is fair_share_bench's scenario b, on a quiet machine: here,
// with another test and a build on the same two cores, preempted launches
// pull the launch counts toward 1:1 (1.6-1.8 measured under two CPU hogs),
// so the test asks for 1.5 to 2.5, which equal shares (1.0 +- 0.1) and
// inverted weights miss.
TEST_F(CpuSchedulerTest, WeightsTwoToOneGiveTwiceTheThroughput) {
  Open(1);
  auto heavy = std::make_shared<WorkAccount>("heavy", 2);
  auto light = std::make_shared<WorkAccount>("light", 1);
  std::vector<std::vector<std::shared_ptr<Queue>>> groups(2);
  for (int i = 0; i < 2; ++i) {
    groups[0].push_back(NewQueue(heavy));
    groups[1].push_back(NewQueue(light));
  }
  double ratio = 0;
  EXPECT_TRUE(ShareNear(groups, 2.0, 0.5, &ratio)) << ratio;
}

// A session with 8 queues and one with 1, of one tenant: equal shares.
TEST_F(CpuSchedulerTest, SessionsOfATenantShareEqually) {
  Open(1);
  auto tenant = std::make_shared<WorkAccount>("t");
  std::vector<std::vector<std::shared_ptr<Queue>>> groups(2);
  for (int i = 0; i < 8; ++i) groups[0].push_back(NewQueue(tenant, 1));
  groups[1].push_back(NewQueue(tenant, 2));
  double ratio = 0;
  EXPECT_TRUE(ShareNear(groups, 1.0, 0.1, &ratio)) << ratio;
}

// One thread, held by another tenant's spin while everything is enqueued:
// then the session runs its greatest priority (lowest number) first and
// takes turns between queues of equal priority. Each op outlasts a turn's
// slice, so every turn runs exactly one.
TEST_F(CpuSchedulerTest, PriorityFirstThenRoundRobinWithinASession) {
  CpuDeviceOptions options;
  options.threads = 1;
  options.priority_greatest = -2;
  Open(options);
  EXPECT_EQ(device_->info().priority_greatest, -2);
  EXPECT_EQ(device_->info().priority_least, 0);
  auto blocker = NewQueue(nullptr);
  ASSERT_TRUE(
      blocker->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{150'000'000}}).ok());
  auto tenant = std::make_shared<WorkAccount>("t");
  auto lo_a = NewQueue(tenant, 7, 0), lo_b = NewQueue(tenant, 7, 0);
  auto mid = NewQueue(tenant, 7, -1), hi = NewQueue(tenant, 7, -2);
  auto mu = std::make_shared<absl::Mutex>();
  auto order = std::make_shared<std::string>();
  auto note = [mu, order](char c) {
    return [mu, order, c] {
      {
        absl::MutexLock lock(mu.get());
        order->push_back(c);
      }
      const absl::Time until = absl::Now() + absl::Microseconds(200);
      while (absl::Now() < until) {
      }
    };
  };
  for (int i = 0; i < 3; ++i) {
    for (auto [q, c] : {std::pair{&lo_a, 'a'}, std::pair{&lo_b, 'b'},
                        std::pair{&mid, 'm'}, std::pair{&hi, 'h'}}) {
      ASSERT_TRUE((*q)->HostFunc(note(c)).ok());
    }
  }
  for (auto* q : {&lo_a, &lo_b, &mid, &hi}) ASSERT_TRUE(Sync(**q).ok());
  absl::MutexLock lock(mu.get());
  EXPECT_EQ(*order, "hhhmmmababab");
}

// Many queues on several threads: each queue's work runs in order and
// never two of its operations at once.
TEST_F(CpuSchedulerTest, OrderKeptAndOneOpAtATimePerQueue) {
  Open(4);
  constexpr int kQueues = 8, kOps = 200;
  struct Track {
    std::atomic<int> active{0};
    std::atomic<int> overlaps{0};
    std::vector<int> seen;  // Written by the queue's ops only.
  };
  std::vector<Track> tracks(kQueues);
  std::vector<std::shared_ptr<Queue>> queues;
  auto counter = *device_->Allocate(8, MemoryKind::kDevice);
  for (int q = 0; q < kQueues; ++q) {
    queues.push_back(NewQueue(std::make_shared<WorkAccount>("t"), q));
  }
  for (int i = 0; i < kOps; ++i) {
    for (int q = 0; q < kQueues; ++q) {
      Track* t = &tracks[q];
      ASSERT_TRUE(queues[q]
                      ->HostFunc([t, i] {
                        if (t->active.fetch_add(1) != 0)
                          t->overlaps.fetch_add(1);
                        t->seen.push_back(i);
                        const absl::Time until =
                            absl::Now() + absl::Microseconds(20);
                        while (absl::Now() < until) {
                        }
                        t->active.fetch_sub(1);
                      })
                      .ok());
      if (q == 0) {
        ASSERT_TRUE(queues[q]
                        ->Launch(K("add_u64"), {{1}, {1}},
                                 {BufferArg{counter}, uint64_t{1}})
                        .ok());
      }
    }
  }
  for (auto& q : queues) ASSERT_TRUE(Sync(*q).ok());
  for (int q = 0; q < kQueues; ++q) {
    EXPECT_EQ(tracks[q].overlaps.load(), 0) << q;
    ASSERT_EQ(tracks[q].seen.size(), size_t{kOps}) << q;
    for (int i = 0; i < kOps; ++i) ASSERT_EQ(tracks[q].seen[i], i) << q;
  }
}

// 1,000 sessions of 4 queues, every queue parked on a flag: parked queues
// hold no thread, and a store releases them all.
TEST_F(CpuSchedulerTest, ParkedQueuesHoldNoThreads) {
  Open(2);
  const int before = ThreadCount();
  ASSERT_GT(before, 0);
  auto flag = *device_->CreateFlag();
  auto ran = std::make_shared<std::atomic<int>>(0);
  std::vector<std::shared_ptr<Queue>> queues;
  auto tenant = std::make_shared<WorkAccount>("many");
  for (uint64_t s = 0; s < 1000; ++s) {
    for (int q = 0; q < 4; ++q) {
      queues.push_back(NewQueue(tenant, s));
      ASSERT_TRUE(
          queues.back()->WaitFlag(flag, 1, WaitCondition::kGreaterEqual).ok());
      ASSERT_TRUE(queues.back()->HostFunc([ran] { ran->fetch_add(1); }).ok());
    }
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(ran->load(), 0);
  EXPECT_LE(ThreadCount(), before + 2);
  EXPECT_EQ(tenant->inflight_commands.load(), 8000);
  flag->Store(1);
  for (auto& q : queues) ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(ran->load(), 4000);
  EXPECT_EQ(tenant->inflight_commands.load(), 0);
  EXPECT_EQ(tenant->commands_completed.load(), 8000u);
}

TEST_F(CpuSchedulerTest, KernelPastTheTimeLimitFailsItsQueue) {
  CpuDeviceOptions options;
  options.threads = 1;
  options.kernel_time_limit = absl::Milliseconds(200);
  Open(options);
  auto errors = std::make_shared<std::vector<absl::Status>>();
  auto mu = std::make_shared<absl::Mutex>();
  QueueOptions qo;
  qo.on_error = [errors, mu](const absl::Status& s) {
    absl::MutexLock lock(mu.get());
    errors->push_back(s);
  };
  auto q = *device_->CreateQueue(std::move(qo));
  auto buf = *device_->Allocate(8, MemoryKind::kDevice);
  const absl::Time start = absl::Now();
  // 2^64 - 1 ns: saturates to "until stopped" rather than wrapping.
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {kForever}).ok());
  ASSERT_TRUE(
      q->Launch(K("add_u64"), {{1}, {1}}, {BufferArg{buf}, uint64_t{1}}).ok());
  auto read = std::make_shared<absl::Status>();
  ASSERT_TRUE(q->Read(buf, 0, 8, [read](absl::StatusOr<std::string> d) {
                 *read = d.status();
               }).ok());
  const absl::Status status = Sync(*q, absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("spin_ns"), std::string::npos) << status;
  EXPECT_NE(status.message().find("200ms"), std::string::npos) << status;
  EXPECT_GE(took, absl::Milliseconds(195));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(read->code(), absl::StatusCode::kDeadlineExceeded);
  {
    absl::MutexLock lock(mu.get());
    ASSERT_EQ(errors->size(), 1u);
    EXPECT_EQ((*errors)[0].code(), absl::StatusCode::kDeadlineExceeded);
  }
  // The thread is free again, and the skipped add never ran.
  auto other = NewQueue(nullptr);
  auto got = std::make_shared<std::string>();
  ASSERT_TRUE(other
                  ->Read(buf, 0, 8,
                         [got](absl::StatusOr<std::string> d) {
                           *got = d.ok() ? *d : "error";
                         })
                  .ok());
  ASSERT_TRUE(Sync(*other).ok());
  EXPECT_EQ(*got, std::string(8, '\0'));
  // A launch within the limit is unaffected.
  ASSERT_TRUE(
      other->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{20'000'000}}).ok());
  EXPECT_TRUE(Sync(*other).ok());
}

TEST_F(CpuSchedulerTest, CancelStopsARunningKernelPromptly) {
  Open(1);
  auto account = std::make_shared<WorkAccount>("t");
  auto q = NewQueue(account);
  auto started = std::make_shared<absl::Notification>();
  ASSERT_TRUE(q->HostFunc([started] { started->Notify(); }).ok());
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {kForever}).ok());
  ASSERT_TRUE(q->Write(*device_->Allocate(64, MemoryKind::kDevice), 0,
                       std::string(64, 'x'))
                  .ok());
  ASSERT_TRUE(started->WaitForNotificationWithTimeout(kLong));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(q->IsIdle());
  EXPECT_EQ(account->staged_bytes.load(), 64);
  const absl::Time start = absl::Now();
  q->Cancel(absl::CancelledError("session closed"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));  // Never waits.
  EXPECT_EQ(Sync(*q, absl::Seconds(2)).code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(account->inflight_commands.load(), 0);
  EXPECT_EQ(account->staged_bytes.load(), 0);
  EXPECT_EQ(account->commands_completed.load(), 2u);  // The host fn, the spin.
  // The one thread is free for others.
  auto other = NewQueue(nullptr);
  ASSERT_TRUE(other->Launch(K("noop"), {{1}, {1}}, {}).ok());
  EXPECT_TRUE(Sync(*other, absl::Seconds(2)).ok());
}

// A turn takes a batch of ops off the queue; Cancel must still drop at
// once every one of them not yet started, even behind an op that cannot be
// stopped (a host function): a Read behind it gets CANCELLED and a record
// behind it completes, so another queue waiting on it goes on.
TEST_F(CpuSchedulerTest, CancelDropsTheRestOfTheRunningBatchAtOnce) {
  Open(2);
  auto q = NewQueue(nullptr);
  auto other = NewQueue(nullptr);
  // Grows the queue's batch well past the four ops below.
  for (int i = 0; i < 256; ++i) {
    ASSERT_TRUE(q->Launch(K("noop"), {{1}, {1}}, {}).ok());
  }
  ASSERT_TRUE(Sync(*q).ok());
  auto flag = *device_->CreateFlag();
  auto started = std::make_shared<absl::Notification>();
  auto gate = std::make_shared<absl::Notification>();
  auto read = std::make_shared<absl::Notification>();
  auto read_status = std::make_shared<absl::Status>();
  auto event = *device_->CreateEvent(/*enable_timing=*/false);
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(q->HostFunc([started, gate] {
                 started->Notify();
                 gate->WaitForNotification();
               }).ok());
  ASSERT_TRUE(q->Read(*device_->Allocate(8, MemoryKind::kDevice), 0, 8,
                      [read, read_status](absl::StatusOr<std::string> d) {
                        *read_status = d.status();
                        read->Notify();
                      })
                  .ok());
  ASSERT_TRUE(q->RecordEvent(event).ok());
  ASSERT_TRUE(other->WaitEvent(event).ok());
  flag->Store(1);  // All four are enqueued: one batch takes them.
  ASSERT_TRUE(started->WaitForNotificationWithTimeout(kLong));
  q->Cancel(absl::CancelledError("session closed"));
  EXPECT_TRUE(read->WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_EQ(read_status->code(), absl::StatusCode::kCancelled) << *read_status;
  EXPECT_TRUE(Sync(*other, absl::Seconds(2)).ok());
  gate->Notify();
  EXPECT_EQ(Sync(*q, absl::Seconds(2)).code(), absl::StatusCode::kCancelled);
}

// A launch's time limit runs from when it starts, not from when the op
// before it ended: what runs between them (here a slow idle callback on
// the execution thread) is no part of it.
TEST_F(CpuSchedulerTest, TimeLimitRunsFromTheLaunchsOwnStart) {
  CpuDeviceOptions options;
  options.threads = 1;
  options.kernel_time_limit = absl::Milliseconds(400);
  Open(options);
  for (int round = 0; round < 3; ++round) {
    auto q = NewQueue(nullptr);
    auto flag = *device_->CreateFlag();
    ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
    ASSERT_TRUE(q->HostFunc([] {}).ok());
    q->OnIdle([](absl::Status) { absl::SleepFor(absl::Milliseconds(300)); });
    ASSERT_TRUE(
        q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{200'000'000}}).ok());
    flag->Store(1);
    EXPECT_TRUE(Sync(*q).ok()) << "round " << round;
  }
}

TEST_F(CpuSchedulerTest, WorkAccountCountersReturnToZero) {
  Open(2);
  auto account = std::make_shared<WorkAccount>("t");
  auto q = NewQueue(account);
  auto flag = *device_->CreateFlag();
  auto buf = *device_->Allocate(1024, MemoryKind::kDevice);
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(q->Write(buf, 0, std::string(1000, 'a')).ok());
  ASSERT_TRUE(q->Launch(K("spin_ns"), {{1}, {1}}, {uint64_t{5'000'000}}).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(account->inflight_commands.load(), 3);
  EXPECT_EQ(account->staged_bytes.load(), 1000);
  EXPECT_EQ(account->commands_completed.load(), 0u);
  flag->Store(1);
  ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(account->inflight_commands.load(), 0);
  EXPECT_EQ(account->staged_bytes.load(), 0);
  EXPECT_EQ(account->commands_completed.load(), 3u);
  EXPECT_GE(account->busy_ns.load(), 5'000'000u);

  // Dropped work: counted out, not completed.
  ASSERT_TRUE(q->WaitFlag(flag, 2, WaitCondition::kEqual).ok());
  ASSERT_TRUE(q->Write(buf, 0, std::string(500, 'b')).ok());
  auto read = std::make_shared<absl::Status>();
  ASSERT_TRUE(q->Read(buf, 0, 8, [read](absl::StatusOr<std::string> d) {
                 *read = d.status();
               }).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(account->staged_bytes.load(), 500);
  q->Cancel(absl::CancelledError("closed"));
  EXPECT_EQ(Sync(*q).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(read->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(account->inflight_commands.load(), 0);
  EXPECT_EQ(account->staged_bytes.load(), 0);
  EXPECT_EQ(account->commands_completed.load(), 3u);
  // Work after the cancel is skipped and counted out too.
  ASSERT_TRUE(q->Write(buf, 0, std::string(100, 'c')).ok());
  EXPECT_EQ(Sync(*q).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(account->inflight_commands.load(), 0);
  EXPECT_EQ(account->staged_bytes.load(), 0);
}

// Shutdown never waits on a kernel, nor on a wait nobody will release:
// the queues are dropped, their work with them.
TEST_F(CpuSchedulerTest, DeviceShutdownStopsKernelsAndDropsParkedWork) {
  Open(1);
  auto spinning = NewQueue(nullptr), parked = NewQueue(nullptr);
  auto flag = *device_->CreateFlag();
  auto started = std::make_shared<absl::Notification>();
  ASSERT_TRUE(spinning->HostFunc([started] { started->Notify(); }).ok());
  ASSERT_TRUE(spinning->Launch(K("spin_ns"), {{1}, {1}}, {kForever}).ok());
  ASSERT_TRUE(parked->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  auto read = std::make_shared<absl::Status>();
  ASSERT_TRUE(
      parked
          ->Read(*device_->Allocate(8, MemoryKind::kDevice), 0, 8,
                 [read](absl::StatusOr<std::string> d) { *read = d.status(); })
          .ok());
  ASSERT_TRUE(started->WaitForNotificationWithTimeout(kLong));
  // The owner lets go of everything while the work is pending.
  spinning.reset();
  parked.reset();
  flag.reset();
  device_->FlushCleanup();
  EXPECT_TRUE(read->ok());  // Not run, not dropped: still pending.
  const absl::Time start = absl::Now();
  device_.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(read->code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpustream::backend
