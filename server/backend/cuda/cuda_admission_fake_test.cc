// Admission, accounting and stream priorities of real CUDA queues, on the
// fake driver (//tests/fake_cuda). The driver is wrapped to see what the
// backend hands it: streams created (with their priority) and operations
// issued per stream (kernel launches and device-side waits).
//
// Timing the fake gives (with CUDA_DEVICE_MAX_CONNECTIONS=32, more hardware
// queues than the tests have streams): each stream runs its work in order
// on its own thread, streams run in parallel, spin_ns sleeps for its duration,
// and a marker's progress write lands as soon as the work before it is done
// (the dispatcher sees it within a polling period). So operations in flight
// per tenant can be measured as "issued to the driver minus completed"
// (commands_completed moves when markers are seen).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_driver.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_admission.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_queue.h"
#include "server/backend/work_account.h"

namespace gpustream::backend {
namespace {

constexpr absl::Duration kLong = absl::Seconds(60);
constexpr uint64_t kBudget = GpuAdmission::kDefaultBudget;

// What the wrapped driver saw. Never destroyed: driver threads may run.
struct Seen {
  absl::Mutex mu;
  std::vector<std::pair<CUstream, int>> created ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<CUstream, uint64_t> issued ABSL_GUARDED_BY(mu);
};
Seen& seen() {
  static Seen* s = new Seen;
  return *s;
}
const CudaDriver* real = nullptr;

CUresult CreateStream(CUstream* stream, unsigned int flags, int priority) {
  CUresult r = real->cuStreamCreateWithPriority(stream, flags, priority);
  if (r == CUDA_SUCCESS) {
    absl::MutexLock lock(&seen().mu);
    seen().created.emplace_back(*stream, priority);
  }
  return r;
}

void CountIssued(CUstream stream) {
  absl::MutexLock lock(&seen().mu);
  ++seen().issued[stream];
}

CUresult LaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                      unsigned int gz, unsigned int bx, unsigned int by,
                      unsigned int bz, unsigned int shared, CUstream stream,
                      void** params, void** extra) {
  CountIssued(stream);
  return real->cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params,
                              extra);
}

CUresult WaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  CountIssued(stream);
  return real->cuStreamWaitEvent(stream, event, flags);
}

class GpuAdmissionFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (real == nullptr) {
      auto loaded = CudaDriver::Load(FakeCudaDriverPath());
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      real = loaded->release();
      ASSERT_EQ(real->cuInit(0), CUDA_SUCCESS);
    }
    auto wrapped = std::make_unique<CudaDriver>(*real);
    wrapped->cuStreamCreateWithPriority = &CreateStream;
    wrapped->cuLaunchKernel = &LaunchKernel;
    wrapped->cuStreamWaitEvent = &WaitEvent;
    auto device = OpenCudaDevice(
        std::make_shared<const CudaAdapter>(std::move(wrapped)), 0);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    modules_ = device_->BuiltinModules();
    for (auto& m : modules_) {
      if (m->info().name == "samples") samples_ = m.get();
    }
    ASSERT_NE(samples_, nullptr);
    counter_ = *device_->Allocate(8, MemoryKind::kDevice);
    flag_ = *device_->CreateFlag();
  }

  // Parks waits for 1 on flag_ on the device. The test plays a writer
  // queue through the driver directly: a stream of its own waits on a word
  // the test stores, then writes 1 to flag_ and records an event, which the
  // flag learns of as a write in flight (GpuFlag::WriteIssued). Waits for 1
  // then go to the queues' streams as waits on that event and park there,
  // with the work behind them issued, until OpenGate(). (The backend itself
  // never parks a stream on a value nobody has written yet.)
  void CloseGate() {
    ASSERT_TRUE(device_->MakeCurrent().ok());
    void* host = nullptr;
    ASSERT_EQ(real->cuMemHostAlloc(&host, 8, CU_MEMHOSTALLOC_DEVICEMAP),
              CUDA_SUCCESS);
    gate_word_ = static_cast<uint64_t*>(host);
    *gate_word_ = 0;
    CUdeviceptr word = 0;
    ASSERT_EQ(real->cuMemHostGetDevicePointer(&word, host, 0), CUDA_SUCCESS);
    ASSERT_EQ(real->cuStreamCreateWithPriority(&gate_stream_,
                                               CU_STREAM_NON_BLOCKING, 0),
              CUDA_SUCCESS);
    ASSERT_EQ(real->cuStreamWaitValue64(gate_stream_, word, 1,
                                        CU_STREAM_WAIT_VALUE_EQ),
              CUDA_SUCCESS);
    auto& flag = static_cast<GpuFlag&>(*flag_);
    ASSERT_EQ(real->cuStreamWriteValue64(gate_stream_, flag.device_ptr(), 1, 0),
              CUDA_SUCCESS);
    auto event = device_->events().Get(/*timing=*/false);
    ASSERT_TRUE(event.ok()) << event.status();
    auto point = std::make_shared<GpuEventPoint>(device_.get(), event->event,
                                                 false, event->epoch);
    ASSERT_EQ(real->cuEventRecord(reinterpret_cast<CUevent>(point->event),
                                  gate_stream_),
              CUDA_SUCCESS);
    point->issued.store(true);
    flag.WriteIssued(1, point);
  }
  void OpenGate() {
    if (gate_word_ != nullptr) {
      std::atomic_ref<uint64_t>(*gate_word_).store(1);
    }
  }

  void TearDown() override {
    OpenGate();
    if (gate_stream_ != nullptr) {
      ASSERT_TRUE(device_->MakeCurrent().ok());
      EXPECT_EQ(real->cuStreamSynchronize(gate_stream_), CUDA_SUCCESS);
      EXPECT_EQ(real->cuStreamDestroy(gate_stream_), CUDA_SUCCESS);
      EXPECT_EQ(real->cuMemFreeHost(gate_word_), CUDA_SUCCESS);
    }
    if (flag_ != nullptr) flag_->Release(absl::CancelledError("test over"));
    for (auto& q : queues_) q->Cancel(absl::CancelledError("test over"));
    for (auto& q : queues_) Sync(*q).IgnoreError();
    queues_.clear();
    flag_.reset();
    counter_.reset();
  }

  const Kernel& K(const char* name) { return **samples_->FindKernel(name); }

  // A queue of `account` and the stream the driver made for it.
  std::shared_ptr<Queue> NewQueue(std::shared_ptr<WorkAccount> account,
                                  uint64_t session = 0, int priority = 0) {
    QueueOptions options;
    options.priority = priority;
    options.account = std::move(account);
    options.session_key = session;
    auto q = device_->CreateQueue(std::move(options));
    EXPECT_TRUE(q.ok()) << q.status();
    absl::MutexLock lock(&seen().mu);
    streams_[q->get()] = seen().created.back().first;
    queues_.push_back(*q);
    return *q;
  }

  // Operations the driver was handed on the queues' streams so far.
  uint64_t Issued(const std::vector<std::shared_ptr<Queue>>& queues) {
    absl::MutexLock lock(&seen().mu);
    uint64_t n = 0;
    for (const auto& q : queues) {
      auto it = seen().issued.find(streams_[q.get()]);
      if (it != seen().issued.end()) n += it->second;
    }
    return n;
  }

  void AddOne(Queue& q) {
    ASSERT_TRUE(
        q.Launch(K("add_u64"), {{1}, {1}}, {BufferArg{counter_}, uint64_t{1}})
            .ok());
  }
  void Spin(Queue& q, uint64_t ns) {
    ASSERT_TRUE(q.Launch(K("spin_ns"), {{1}, {1}}, {ns}).ok());
  }

  absl::Status Sync(Queue& q) {
    auto n = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    q.OnIdle([n, status](absl::Status s) {
      *status = s;
      n->Notify();
    });
    if (!n->WaitForNotificationWithTimeout(kLong)) {
      return absl::DeadlineExceededError("queue did not drain");
    }
    return *status;
  }

  uint64_t ReadCounter(Queue& q) {
    auto n = std::make_shared<absl::Notification>();
    auto out = std::make_shared<uint64_t>(0);
    EXPECT_TRUE(q.Read(counter_, 0, 8, [n, out](absl::StatusOr<std::string> d) {
                   if (d.ok() && d->size() == 8)
                     std::memcpy(out.get(), d->data(), 8);
                   n->Notify();
                 }).ok());
    EXPECT_TRUE(n->WaitForNotificationWithTimeout(kLong));
    return *out;
  }

  // Waits until the account's operations in flight stop changing (the
  // dispatcher is done pumping): its view then.
  GpuAdmission::AccountView Settled(const WorkAccount* account) {
    GpuAdmission::AccountView last = device_->admission().View(account);
    int same = 0;
    for (int i = 0; i < 2000 && same < 20; ++i) {
      absl::SleepFor(absl::Milliseconds(2));
      auto now = device_->admission().View(account);
      same = now.inflight == last.inflight ? same + 1 : 0;
      last = now;
    }
    return last;
  }

  // Polls `done` every millisecond for at most `limit`.
  template <class F>
  static bool Eventually(F done, absl::Duration limit = kLong) {
    const absl::Time deadline = absl::Now() + limit;
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  std::unique_ptr<GpuDevice> device_;
  std::vector<std::unique_ptr<Module>> modules_;
  Module* samples_ = nullptr;
  std::shared_ptr<Buffer> counter_;
  std::shared_ptr<Flag> flag_;
  CUstream gate_stream_ = nullptr;
  uint64_t* gate_word_ = nullptr;
  std::vector<std::shared_ptr<Queue>> queues_;
  absl::flat_hash_map<Queue*, CUstream> streams_;
};

TEST_F(GpuAdmissionFakeTest, PrioritiesStayWithinTheDevicesRange) {
  const DeviceInfo& info = device_->info();
  ASSERT_EQ(info.priority_least, 0);  // The fake's range.
  ASSERT_EQ(info.priority_greatest, -5);
  const std::vector<int> requested = {0, -3, -5, -9, 4};
  const std::vector<int> expected = {0, -3, -5, -5, 0};
  auto account = std::make_shared<WorkAccount>("t");
  std::vector<int> got;
  for (int p : requested) {
    NewQueue(account, 0, p);
    absl::MutexLock lock(&seen().mu);
    got.push_back(seen().created.back().second);
  }
  EXPECT_EQ(got, expected);
  // Work still runs on each of them.
  for (auto& q : queues_) AddOne(*q);
  for (auto& q : queues_) ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(ReadCounter(*queues_.front()), requested.size());
}

// One tenant alone gets the whole device budget (and every queue its
// floor): the driver sees exactly what admission counts.
TEST_F(GpuAdmissionFakeTest, LoneTenantGetsTheWholeBudget) {
  auto account = std::make_shared<WorkAccount>("t", 1);
  constexpr int kQueues = 4, kOps = 600;
  ASSERT_NO_FATAL_FAILURE(CloseGate());
  for (int i = 0; i < kQueues; ++i) {
    auto q = NewQueue(account, /*session=*/i % 2);
    ASSERT_TRUE(q->WaitFlag(flag_, 1, WaitCondition::kEqual).ok());
    for (int j = 0; j < kOps; ++j) AddOne(*q);
  }
  const auto view = Settled(account.get());
  EXPECT_EQ(view.limit, kBudget);
  EXPECT_GE(view.inflight, kBudget);
  EXPECT_LE(view.inflight, kBudget + kQueues * GpuAdmission::kQueueFloor);
  EXPECT_TRUE(view.waiting);
  EXPECT_EQ(Issued(queues_), view.inflight);
  EXPECT_EQ(account->inflight_commands.load(), kQueues * (kOps + 1));
  // Released, everything runs and the counters settle.
  OpenGate();
  for (auto& q : queues_) ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(ReadCounter(*queues_.front()), uint64_t{kQueues * kOps});
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           device_->admission().total_inflight() == 0;
  }));
  EXPECT_EQ(account->commands_completed.load(),
            uint64_t{kQueues * (kOps + 1) + 1});  // And the read.
  EXPECT_FALSE(device_->admission().HasWaiting());
}

// Two tenants, weights 2:1, both backlogged; the heavier one with four
// queues in two sessions. While both have work held, each one's operations
// in flight (issued to the driver, not yet complete) stay within its share
// of the budget, and average about 2:1.
TEST_F(GpuAdmissionFakeTest, BackloggedTenantsGetTheirWeightedShares) {
  auto a = std::make_shared<WorkAccount>("a", 2);
  auto b = std::make_shared<WorkAccount>("b", 1);
  const uint64_t limit_a = kBudget * 2 / 3, limit_b = kBudget / 3;
  constexpr int kOps = 1200;
  constexpr uint64_t kSpinNs = 100'000;
  std::vector<std::shared_ptr<Queue>> qa, qb;
  ASSERT_NO_FATAL_FAILURE(CloseGate());
  qb.push_back(NewQueue(b, 7));
  for (int i = 0; i < 4; ++i) qa.push_back(NewQueue(a, i % 2));
  for (auto& q : queues_) {
    ASSERT_TRUE(q->WaitFlag(flag_, 1, WaitCondition::kEqual).ok());
  }
  for (int j = 0; j < kOps; ++j) {
    for (auto& q : queues_) Spin(*q, kSpinNs);
  }
  // Parked. Enqueued round-robin, A reached its share first and then
  // borrowed what B left free, up to the budget, until B waited too; B
  // still got its whole share at once.
  const auto va = Settled(a.get());
  const auto vb = device_->admission().View(b.get());
  EXPECT_EQ(va.limit, limit_a);
  EXPECT_EQ(vb.limit, limit_b);
  EXPECT_TRUE(va.waiting && vb.waiting);
  EXPECT_GE(va.inflight, limit_a);
  EXPECT_LE(va.inflight, kBudget);
  EXPECT_EQ(vb.inflight, limit_b);
  EXPECT_EQ(Issued(qa), va.inflight);
  EXPECT_EQ(Issued(qb), vb.inflight);

  OpenGate();
  uint64_t sum_a = 0, sum_b = 0, max_a = 0, max_b = 0;
  int samples = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; i < 20000 && absl::Now() < deadline; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
    // Issued first, completed after: work issued between the two reads
    // would otherwise count as in flight without its completion (an
    // overestimate that a loaded machine makes large).
    const int64_t issued_a = Issued(qa), issued_b = Issued(qb);
    const int64_t ia = issued_a - a->commands_completed.load(),
                  ib = issued_b - b->commands_completed.load();
    const int64_t held_a = a->inflight_commands.load() - ia,
                  held_b = b->inflight_commands.load() - ib;
    if (held_a <= 0 || held_b <= 0) {
      if (samples > 0) break;  // One of them ran out of work.
      continue;
    }
    // A's borrowed work drains to its share first.
    if (samples == 0 &&
        ia > static_cast<int64_t>(limit_a + 4 * GpuAdmission::kQueueFloor)) {
      continue;
    }
    sum_a += ia;
    sum_b += ib;
    max_a = std::max<uint64_t>(max_a, ia);
    max_b = std::max<uint64_t>(max_b, ib);
    ++samples;
  }
  ASSERT_GE(samples, 20) << "too few samples while both were backlogged";
  std::cout << "in flight while backlogged: A " << sum_a / samples << ", B "
            << sum_b / samples << " (" << samples << " samples)" << std::endl;
  EXPECT_LE(max_a, limit_a + 4 * GpuAdmission::kQueueFloor);
  EXPECT_LE(max_b, limit_b + GpuAdmission::kQueueFloor);
  const double ratio =
      static_cast<double>(sum_a) / std::max<uint64_t>(sum_b, 1);
  EXPECT_GT(ratio, 1.5) << sum_a / samples << " vs " << sum_b / samples;
  EXPECT_LT(ratio, 2.8) << sum_a / samples << " vs " << sum_b / samples;
  for (auto& q : queues_) ASSERT_TRUE(Sync(*q).ok());
  EXPECT_TRUE(Eventually([&] {
    return a->inflight_commands.load() == 0 &&
           b->inflight_commands.load() == 0 &&
           device_->admission().total_inflight() == 0;
  }));
  // Busy time: at least the longest stream's spinning, at most the wall
  // time since the flag (plus the parked time before it).
  EXPECT_GE(b->busy_ns.load(), kOps * kSpinNs * 9 / 10);
  EXPECT_GE(a->busy_ns.load(), kOps * kSpinNs * 9 / 10);
}

// Queues waiting for a flag that one of their tenant's queues writes later
// hold their work in the daemon, taking none of the tenant's share: the
// writer runs, and then all of them do.
TEST_F(GpuAdmissionFakeTest, QueueThatReleasesParkedWorkStillRuns) {
  auto account = std::make_shared<WorkAccount>("t");
  for (int i = 0; i < 3; ++i) {
    auto q = NewQueue(account);
    ASSERT_TRUE(q->WaitFlag(flag_, 1, WaitCondition::kEqual).ok());
    for (int j = 0; j < 500; ++j) AddOne(*q);
  }
  auto writer = NewQueue(account);
  for (int j = 0; j < 500; ++j) AddOne(*writer);
  ASSERT_TRUE(writer->WriteFlag(flag_, 1).ok());
  for (auto& q : queues_) ASSERT_TRUE(Sync(*q).ok());
  EXPECT_EQ(ReadCounter(*writer), 2000u);
}

// Cancelled queues waiting for admission leave it: nothing stays counted.
TEST_F(GpuAdmissionFakeTest, CancelledWaitingQueuesLeaveAdmission) {
  auto account = std::make_shared<WorkAccount>("t");
  ASSERT_NO_FATAL_FAILURE(CloseGate());
  // A buffer per queue: the streams run concurrently, and writes of two
  // streams to the same bytes would race.
  std::vector<std::shared_ptr<Buffer>> targets;
  for (int i = 0; i < 4; ++i) {
    auto q = NewQueue(account, i);
    targets.push_back(*device_->Allocate(8, MemoryKind::kDevice));
    ASSERT_TRUE(q->WaitFlag(flag_, 1, WaitCondition::kEqual).ok());
    for (int j = 0; j < 600; ++j) {
      ASSERT_TRUE(q->Write(targets.back(), 0, std::string(8, '\1')).ok());
    }
  }
  EXPECT_TRUE(Settled(account.get()).waiting);
  EXPECT_EQ(account->staged_bytes.load(), 4 * 600 * 8);
  const absl::Status reason = absl::CancelledError("closed");
  for (auto& q : queues_) q->Cancel(reason);
  flag_->Release(reason);
  OpenGate();  // What was issued runs: the gate's write lands.
  for (auto& q : queues_) {
    EXPECT_EQ(Sync(*q).code(), absl::StatusCode::kCancelled);
  }
  EXPECT_TRUE(Eventually([&] {
    return account->inflight_commands.load() == 0 &&
           account->staged_bytes.load() == 0 &&
           device_->admission().total_inflight() == 0 &&
           !device_->admission().HasWaiting();
  }));
  // What was on the streams ran; what was held did not.
  EXPECT_LT(account->commands_completed.load(), uint64_t{4 * 601});
}

}  // namespace
}  // namespace gpustream::backend
