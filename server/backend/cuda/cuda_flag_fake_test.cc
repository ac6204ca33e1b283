// CUDA flag waits held in the daemon, on the fake driver: a held wait sees
// every value stored after it was enqueued, however many follow.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"

namespace gpustream::backend {
namespace {

// The fake driver, with cuEventRecord refusing its next call once armed.
const CudaDriver* real_driver = nullptr;
std::atomic<bool> refuse_record{false};
CUresult RefusingRecord(CUevent event, CUstream stream) {
  if (refuse_record.exchange(false)) return CUDA_ERROR_INVALID_VALUE;
  return real_driver->cuEventRecord(event, stream);
}

// A device on the fake driver whose cuEventRecord refuses its next call
// once `refuse_record` is set.
absl::StatusOr<std::unique_ptr<GpuDevice>> OpenRefusingDevice() {
  if (real_driver == nullptr) {
    auto loaded = CudaDriver::Load(FakeCudaDriverPath());
    if (!loaded.ok()) return loaded.status();
    real_driver = loaded->release();  // Lives as long as the process.
    if (real_driver->cuInit(0) != CUDA_SUCCESS) {
      return absl::InternalError("cuInit failed on the fake driver");
    }
  }
  auto wrapped = std::make_unique<CudaDriver>(*real_driver);
  wrapped->cuEventRecord = &RefusingRecord;
  return OpenCudaDevice(std::make_shared<const CudaAdapter>(std::move(wrapped)),
                        0);
}

// Calls `attempt` every millisecond until it returns true or `timeout`
// passes; whether it did.
template <typename F>
bool Eventually(F attempt, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!attempt()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// A queue busy for a while reaches its EQUAL wait for 3 only after the host
// stored 1, 2, ..., 200: the flag holds 200 then, but 3 was stored after
// the wait was enqueued, so the work behind it runs.
TEST(CudaFlagFakeTest, HeldWaitSeesAValueStoredLongBeforeItIsReached) {
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_FALSE(modules.empty());
  const Kernel& spin = **modules.front()->FindKernel("spin_ns");
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto q = *device->CreateQueue(QueueOptions{});
  auto flag = *device->CreateFlag();
  auto counter = *device->Allocate(8, MemoryKind::kDevice);
  ASSERT_TRUE(q->Launch(spin, {{1}, {1}}, {uint64_t{200'000'000}}).ok());
  ASSERT_TRUE(q->WaitFlag(flag, 3, WaitCondition::kEqual).ok());
  ASSERT_TRUE(
      q->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{9}}).ok());
  for (uint64_t v = 1; v <= 200; ++v) flag->Store(v);
  absl::StatusOr<uint64_t> value = ReadU64(*q, counter, absl::Seconds(20));
  ASSERT_TRUE(value.ok()) << "the wait for 3 never passed: " << value.status();
  EXPECT_EQ(*value, 9u);
  EXPECT_EQ(flag->Load(), 200u);
}

// A device write of 7 is on its way (behind a long kernel) when the host
// stores 7 itself and then 9. Replacing its own 7 says nothing about the
// device's: that write is still coming, and a wait for 7 enqueued now must
// see it land, though the device overwrites it with 11 at once.
TEST(CudaFlagFakeTest, AHostStoreOfTheSameValueDoesNotRetireADeviceWrite) {
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_FALSE(modules.empty());
  const Kernel& spin = **modules.front()->FindKernel("spin_ns");
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto writer = *device->CreateQueue(QueueOptions{});
  auto waiter = *device->CreateQueue(QueueOptions{});
  auto flag = *device->CreateFlag();
  auto counter = *device->Allocate(8, MemoryKind::kDevice);
  // Two seconds: time enough for the host's part, even on a loaded machine.
  ASSERT_TRUE(writer->Launch(spin, {{1}, {1}}, {uint64_t{2'000'000'000}}).ok());
  ASSERT_TRUE(writer->WriteFlag(flag, 7).ok());
  ASSERT_TRUE(writer->WriteFlag(flag, 11).ok());
  flag->Store(7);
  flag->Store(9);
  ASSERT_TRUE(waiter->WaitFlag(flag, 7, WaitCondition::kEqual).ok());
  // The device's writes were still to come when the wait was enqueued (else
  // this case proves nothing).
  ASSERT_EQ(flag->Load(), 9u);
  ASSERT_FALSE(writer->IsIdle());
  ASSERT_TRUE(
      waiter->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}).ok());
  absl::StatusOr<uint64_t> value = ReadU64(*waiter, counter);
  ASSERT_TRUE(value.ok()) << "the wait for 7 missed the device's write: "
                          << value.status();
  EXPECT_EQ(*value, 1u);
  // The device's 11 follows its 7 on the writer's stream, which the waiter
  // did not wait for: it lands soon after, not necessarily before the read.
  EXPECT_TRUE(Eventually([&] { return flag->Load() == 11u; })) << flag->Load();
}

// A flag write is on the stream when the event recorded after it is
// refused: the command did not fail (its write lands), the queue reports
// the error, a host wait from before hears of it, and a wait for the value
// on another queue still passes.
TEST(CudaFlagFakeTest, AWriteOnTheStreamIsNotReportedFailedIfItsEventIsNot) {
  auto created = OpenRefusingDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_FALSE(modules.empty());
  const Kernel& add = **modules.front()->FindKernel("add_u64");
  auto writer = *device->CreateQueue(QueueOptions{});
  auto waiter = *device->CreateQueue(QueueOptions{});
  auto flag = *device->CreateFlag();
  auto counter = *device->Allocate(8, MemoryKind::kDevice);

  // A host wait for 5, from before the write.
  absl::Notification heard;
  absl::StatusOr<uint64_t> heard_value = absl::UnknownError("not called");
  flag->AsyncWait(5, WaitCondition::kEqual, [&](absl::StatusOr<uint64_t> v) {
    heard_value = v;
    heard.Notify();
  });
  refuse_record.store(true);
  const absl::Status written = writer->WriteFlag(flag, 5);
  EXPECT_TRUE(written.ok())
      << "reported failed, yet its write lands: " << written;
  EXPECT_TRUE(Eventually([&] { return flag->Load() == 5; }));
  EXPECT_TRUE(Eventually([&] { return !writer->error().ok(); }));
  EXPECT_EQ(writer->error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(writer->error().message(), "cuEventRecord"))
      << writer->error();
  ASSERT_TRUE(heard.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the host wait never heard of the write";
  EXPECT_TRUE(heard_value.ok()) << heard_value.status();

  ASSERT_TRUE(waiter->WaitFlag(flag, 5, WaitCondition::kEqual).ok());
  ASSERT_TRUE(
      waiter->Launch(add, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}).ok());
  absl::StatusOr<uint64_t> value = ReadU64(*waiter, counter);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 1u);
}

// The same refusal when the write leaves the queue's held work behind it
// (issued by the pump once a gate opens): the error drops that work, and it
// is answered after the write, in enqueue order. Here a SynchronizeQueue's
// watch, which must not hear of the queue's end before the write's host
// waiters do (an untracked write tells them when its stream gets there).
TEST(CudaFlagFakeTest, WorkHeldBehindAPartlyIssuedWriteIsAnsweredAfterIt) {
  auto created = OpenRefusingDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  auto writer = *device->CreateQueue(QueueOptions{});
  auto gate = *device->CreateFlag();
  auto flag = *device->CreateFlag();

  // What the callbacks touch outlives an early ASSERT.
  struct Seen {
    absl::Notification heard, idle;
    bool heard_first = false;
    absl::Status idle_status;
  };
  auto seen = std::make_shared<Seen>();
  flag->AsyncWait(5, WaitCondition::kEqual,
                  [seen](absl::StatusOr<uint64_t>) { seen->heard.Notify(); });
  // Held until the gate opens: the write, then the watch's no-op.
  ASSERT_TRUE(writer->WaitFlag(gate, 1, WaitCondition::kEqual).ok());
  ASSERT_TRUE(writer->WriteFlag(flag, 5).ok());
  std::shared_ptr<Watch> watch = writer->OnIdle([seen](absl::Status s) {
    seen->heard_first = seen->heard.HasBeenNotified();
    seen->idle_status = s;
    seen->idle.Notify();
  });
  ASSERT_FALSE(seen->idle.HasBeenNotified());
  refuse_record.store(true);
  gate->Store(1);
  ASSERT_TRUE(seen->idle.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(seen->heard_first)
      << "the watch behind the write was answered before the write's end";
  EXPECT_EQ(seen->idle_status.code(), absl::StatusCode::kInvalidArgument)
      << seen->idle_status;
  EXPECT_TRUE(seen->heard.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(flag->Load(), 5u);
}

}  // namespace
}  // namespace gpustream::backend
