// The conformance suite of the neutral backend interface: every backend
// present runs the same tests (cpu; cuda on the fake driver; cuda on a real
// driver where one exists), as StreamExecutor runs one stream suite on CUDA
// and ROCm. Parameterized by backend; a backend that is absent is skipped
// with the reason.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/backend_factory.h"
#include "server/backend/device.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream::backend {
namespace {

constexpr absl::Duration kLong = absl::Seconds(20);

class DeviceConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (absl::Status absent = conformance::AbsentReason(GetParam());
        !absent.ok()) {
      GTEST_SKIP() << absent;
    }
    auto device = conformance::OpenBackend(GetParam());
    ASSERT_TRUE(device.ok())
        << GetParam() << " is present but does not open: " << device.status();
    device_ = *std::move(device);
    device_->SetFatalErrorHandler([this](const absl::Status& s) {
      fatal_status_ = s;
      fatal_.Notify();
    });
    modules_ = device_->BuiltinModules();
    ASSERT_FALSE(modules_.empty());
    for (auto& m : modules_) {
      if (m->info().name == "samples") samples_ = m.get();
    }
    ASSERT_NE(samples_, nullptr);
  }

  bool IsCpu() const { return GetParam() == "cpu"; }

  const Kernel& K(const char* name) { return **samples_->FindKernel(name); }

  std::shared_ptr<Queue> NewQueue() {
    return *device_->CreateQueue(QueueOptions{});
  }
  std::shared_ptr<Buffer> Alloc(uint64_t size) {
    return *device_->Allocate(size, MemoryKind::kDevice);
  }

  // Waits for the queue to be idle; the sticky status.
  absl::Status Sync(Queue& q, absl::Duration limit = kLong) {
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

  // Reads `size` bytes (the error text if the read fails).
  std::string ReadBack(Queue& q, std::shared_ptr<Buffer> b, uint64_t offset,
                       uint64_t size) {
    auto n = std::make_shared<absl::Notification>();
    auto out = std::make_shared<std::string>();
    absl::Status s =
        q.Read(b, offset, size, [n, out](absl::StatusOr<std::string> data) {
          *out = data.ok() ? *data : "error:" + data.status().ToString();
          n->Notify();
        });
    if (!s.ok()) return "error:" + s.ToString();
    if (!n->WaitForNotificationWithTimeout(kLong)) return "error:timeout";
    return *out;
  }

  uint64_t ReadU64(Queue& q, std::shared_ptr<Buffer> b) {
    std::string bytes = ReadBack(q, b, 0, 8);
    EXPECT_EQ(bytes.size(), 8u) << bytes;
    uint64_t v = 0;
    if (bytes.size() == 8) std::memcpy(&v, bytes.data(), 8);
    return v;
  }

  // Polls until `q` is idle or `limit` passes.
  static bool EventuallyIdle(Queue& q, absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      if (q.IsIdle()) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return q.IsIdle();
  }

  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<Module>> modules_;
  Module* samples_ = nullptr;
  absl::Notification fatal_;
  absl::Status fatal_status_;
};

TEST_P(DeviceConformanceTest, SamplesModuleListsApiKernelsWithLayouts) {
  std::vector<std::string> names;
  for (const auto& k : samples_->info().kernels) names.push_back(k.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"add_u64", "fill_u32", "noop",
                                             "saxpy_f32", "spin_ns", "trap",
                                             "vector_add_f32"}));
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

// A fault poisons a GPU context (the device fails: ABORTED through the
// fatal-error handler, then Recover), and fails only its queue on the CPU
// (INTERNAL). Either way later work, waits included, is skipped: a wait on
// a flag nobody signals must not hang the queue.
TEST_P(DeviceConformanceTest, FaultIsStickyAndSkipsLaterWorkAndWaits) {
  auto q = NewQueue();
  auto counter = Alloc(8);
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
  // Everything of the failed context goes, then the device recovers.
  q.reset();
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

// --- Work accounting (server/backend/work_account.h) ----------------------
// Every backend keeps the WorkAccount counters of the queues created with
// it; these tests use nothing but that contract.

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

INSTANTIATE_TEST_SUITE_P(Backends, DeviceConformanceTest,
                         ::testing::ValuesIn(conformance::BackendsUnderTest()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gpustream::backend
