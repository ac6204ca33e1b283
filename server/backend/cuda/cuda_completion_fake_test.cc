// How the CUDA backend learns that work completed, on the fake driver: from
// the queue's own stream (a progress word its markers write, polled), never
// from a host function, which needs the driver's callback thread.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_testing.h"

namespace gpustream::backend {
namespace {

constexpr absl::Duration kPrompt = absl::Seconds(5);

// The order in which a test's callbacks ran, from any thread.
struct AnswerLog {
  absl::Mutex mu;
  std::vector<std::string> order ABSL_GUARDED_BY(mu);
  absl::Notification done;
  void Add(std::string what) {
    absl::MutexLock lock(&mu);
    order.push_back(std::move(what));
  }
};

// A host function holds its stream until the context's one callback
// thread has run it, and that thread runs the callbacks of every stream in
// turn. Here something else in the process (a library sharing the primary
// context) keeps the callback thread busy. A queue's launch, read, host
// function and synchronize still complete: the backend's completion
// tracking must not wait behind that thread.
TEST(CudaCompletionFakeTest, CompletionsDoNotWaitForTheCallbackThread) {
  // Before the device: its teardown runs callbacks still due.
  absl::Notification host_func, idle;
  absl::Status idle_status = absl::UnknownError("not called");
  struct Blocker {
    absl::Notification entered;
    absl::Notification release;
  } blocker;
  auto opened = OpenCudaDriver(FakeCudaDriverPath());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const CudaAdapter> adapter = *std::move(opened);
  auto created = OpenCudaDevice(adapter, 0);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  const CudaDriver& driver = adapter->table();
  // Whatever ends the test, the callback thread goes on before the device.
  absl::Cleanup free_callback_thread = [&] {
    if (!blocker.release.HasBeenNotified()) blocker.release.Notify();
  };
  ASSERT_TRUE(device->MakeCurrent().ok());

  // The other user's stream is created first: with the default 8 hardware
  // connections, round-robin, the queue's stream gets a connection of its
  // own, so only the callback thread is shared.
  CUstream other = nullptr;
  ASSERT_EQ(
      driver.cuStreamCreateWithPriority(&other, CU_STREAM_NON_BLOCKING, 0),
      CUDA_SUCCESS);
  ASSERT_EQ(driver.cuLaunchHostFunc(
                other,
                [](void* data) {
                  auto* b = static_cast<Blocker*>(data);
                  b->entered.Notify();
                  b->release.WaitForNotification();
                },
                &blocker),
            CUDA_SUCCESS);
  ASSERT_TRUE(blocker.entered.WaitForNotificationWithTimeout(kPrompt));

  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_FALSE(modules.empty());
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto q = *device->CreateQueue(QueueOptions{});
  auto counter = *device->Allocate(8, MemoryKind::kDevice);
  ASSERT_TRUE(
      q->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{41}}).ok());
  ASSERT_TRUE(q->HostFunc([&host_func] { host_func.Notify(); }).ok());
  ASSERT_TRUE(
      q->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}).ok());
  // Blocks for at most kPrompt; asserted once the callback thread is free.
  const absl::StatusOr<uint64_t> value = ReadU64(*q, counter, kPrompt);
  q->OnIdle([&](absl::Status s) {
    idle_status = s;
    idle.Notify();
  });

  const bool ran_host_func = host_func.WaitForNotificationWithTimeout(kPrompt);
  const bool went_idle = idle.WaitForNotificationWithTimeout(kPrompt);
  // Free the callback thread before any assertion can end the test.
  blocker.release.Notify();
  ASSERT_EQ(driver.cuStreamSynchronize(other), CUDA_SUCCESS);
  ASSERT_EQ(driver.cuStreamDestroy(other), CUDA_SUCCESS);
  EXPECT_TRUE(ran_host_func) << "the host function waited for the callback "
                                "thread";
  ASSERT_TRUE(value.ok()) << "the read waited for the callback thread: "
                          << value.status();
  EXPECT_EQ(*value, 42u);
  ASSERT_TRUE(went_idle) << "synchronize waited for the callback thread";
  EXPECT_TRUE(idle_status.ok()) << idle_status;
}

// A SynchronizeQueue is answered from an OnIdle callback, and a QueryQueue
// may follow at once: when the callback runs, the queue already says idle,
// though a read's delivery before it in the same batch was still running
// a moment ago. (Asked from the callback itself, where the answer goes.)
TEST(CudaCompletionFakeTest, AQueueIsIdleWhenItsOnIdleCallbackRuns) {
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_FALSE(modules.empty());
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto q = *device->CreateQueue(QueueOptions{});
  auto counter = *device->Allocate(8, MemoryKind::kDevice);
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(
        q->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}).ok());
    // Shared with the callbacks: an ASSERT may end the round first.
    struct Round {
      absl::Notification read, idle;
      bool idle_then = false;
      absl::Status idle_status = absl::UnknownError("not called");
    };
    auto r = std::make_shared<Round>();
    ASSERT_TRUE(q->Read(counter, 0, 8, [r](absl::StatusOr<std::string> data) {
                   EXPECT_TRUE(data.ok()) << data.status();
                   r->read.Notify();
                 }).ok());
    q->OnIdle([r, queue = std::weak_ptr<Queue>(q)](absl::Status s) {
      auto alive = queue.lock();
      r->idle_then = alive != nullptr && alive->IsIdle();
      r->idle_status = std::move(s);
      r->idle.Notify();
    });
    ASSERT_TRUE(r->idle.WaitForNotificationWithTimeout(kPrompt));
    EXPECT_TRUE(r->read.HasBeenNotified());
    EXPECT_TRUE(r->idle_status.ok()) << r->idle_status;
    EXPECT_TRUE(r->idle_then) << "round " << round;
  }
}

// Session teardown cancels a queue from another thread: the work it holds
// (a wait on a flag nobody sets, a SynchronizeQueue's no-op behind it) is
// dropped, but answered after the work issued before it (a read), and the
// teardown's drain, an OnIdle after the cancel, waits for that read too.
// The dispatcher is held meanwhile, so the read cannot complete first.
TEST(CudaCompletionFakeTest, ACancelledQueueAnswersHeldWorkAfterIssuedWork) {
  // Before the device: its teardown runs callbacks still due.
  absl::Notification read, idle, drained;
  std::atomic<int> answers{0};
  int read_answer = -1, idle_answer = -1, drained_answer = -1;
  absl::Status idle_status;
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  auto holder = *device->CreateQueue(QueueOptions{});
  auto q = *device->CreateQueue(QueueOptions{});
  auto buffer = *device->Allocate(8, MemoryKind::kDevice);
  auto flag = *device->CreateFlag();
  DispatcherHold hold(*holder);
  ASSERT_TRUE(hold.Held());
  ASSERT_TRUE(q->Read(buffer, 0, 8, [&](absl::StatusOr<std::string>) {
                 read_answer = answers++;
                 read.Notify();
               }).ok());
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  q->OnIdle([&](absl::Status s) {
    idle_status = std::move(s);
    idle_answer = answers++;
    idle.Notify();
  });
  q->Cancel(absl::CancelledError("torn down"));
  q->OnIdle([&](absl::Status) {
    drained_answer = answers++;
    drained.Notify();
  });
  EXPECT_FALSE(q->IsIdle()) << "the read is still due";
  hold.Release();
  ASSERT_TRUE(read.WaitForNotificationWithTimeout(kPrompt));
  ASSERT_TRUE(idle.WaitForNotificationWithTimeout(kPrompt));
  ASSERT_TRUE(drained.WaitForNotificationWithTimeout(kPrompt));
  EXPECT_EQ(read_answer, 0);
  EXPECT_EQ(idle_answer, 1);
  EXPECT_EQ(drained_answer, 2);
  EXPECT_EQ(idle_status.code(), absl::StatusCode::kCancelled) << idle_status;
  EXPECT_TRUE(q->IsIdle());
}

// A callback that enqueues on its own queue (here: a read's, asking for an
// OnIdle on the cancelled queue) makes another delivery while the first is
// running. It runs after the first, not inside it: the OnIdle is answered
// after the later read that was dropped before it was made.
TEST(CudaCompletionFakeTest, ACallbackEnqueuingOnItsQueueIsAnsweredInOrder) {
  // What the callbacks touch outlives an early ASSERT.
  auto seen = std::make_shared<AnswerLog>();
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  auto holder = *device->CreateQueue(QueueOptions{});
  std::shared_ptr<Queue> q = *device->CreateQueue(QueueOptions{});
  auto buffer = *device->Allocate(8, MemoryKind::kDevice);
  auto flag = *device->CreateFlag();
  // Both reads are held behind the wait; the cancel drops them, and their
  // answers go as one delivery once the dispatcher runs.
  DispatcherHold hold(*holder);
  ASSERT_TRUE(hold.Held());
  ASSERT_TRUE(q->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  std::weak_ptr<Queue> weak = q;
  ASSERT_TRUE(q->Read(buffer, 0, 8, [seen, weak](absl::StatusOr<std::string>) {
                 seen->Add("first read");
                 std::shared_ptr<Queue> queue = weak.lock();
                 if (queue == nullptr) return;
                 queue->OnIdle([seen](absl::Status) {
                   seen->Add("idle");
                   seen->done.Notify();
                 });
               }).ok());
  ASSERT_TRUE(q->Read(buffer, 0, 8, [seen](absl::StatusOr<std::string>) {
                 seen->Add("second read");
               }).ok());
  q->Cancel(absl::CancelledError("torn down"));
  hold.Release();
  ASSERT_TRUE(seen->done.WaitForNotificationWithTimeout(kPrompt));
  absl::MutexLock lock(&seen->mu);
  EXPECT_EQ(seen->order,
            (std::vector<std::string>{"first read", "second read", "idle"}));
}

// Two queues cancelled while the dispatcher is held: each posts the answer
// of its dropped read. The first read's callback asks the second queue for
// an OnIdle, answered at once on the dispatcher (the queue is sticky), yet
// after the second queue's read, whose answer was made first but is still
// on its way.
TEST(CudaCompletionFakeTest, AnAnswerMadeOnTheDispatcherWaitsForOnesPosted) {
  auto seen = std::make_shared<AnswerLog>();
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  auto holder = *device->CreateQueue(QueueOptions{});
  std::shared_ptr<Queue> x = *device->CreateQueue(QueueOptions{});
  std::shared_ptr<Queue> y = *device->CreateQueue(QueueOptions{});
  auto buffer = *device->Allocate(8, MemoryKind::kDevice);
  auto flag = *device->CreateFlag();
  DispatcherHold hold(*holder);
  ASSERT_TRUE(hold.Held());
  ASSERT_TRUE(x->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(y->WaitFlag(flag, 1, WaitCondition::kEqual).ok());
  std::weak_ptr<Queue> weak_y = y;
  ASSERT_TRUE(
      x->Read(buffer, 0, 8, [seen, weak_y](absl::StatusOr<std::string>) {
         seen->Add("x read");
         std::shared_ptr<Queue> queue = weak_y.lock();
         if (queue == nullptr) return;
         queue->OnIdle([seen](absl::Status) {
           seen->Add("y idle");
           seen->done.Notify();
         });
       }).ok());
  ASSERT_TRUE(y->Read(buffer, 0, 8, [seen](absl::StatusOr<std::string>) {
                 seen->Add("y read");
               }).ok());
  x->Cancel(absl::CancelledError("torn down"));
  y->Cancel(absl::CancelledError("torn down"));
  hold.Release();
  ASSERT_TRUE(seen->done.WaitForNotificationWithTimeout(kPrompt));
  absl::MutexLock lock(&seen->mu);
  EXPECT_EQ(seen->order,
            (std::vector<std::string>{"x read", "y read", "y idle"}));
}

}  // namespace
}  // namespace gpustream::backend
