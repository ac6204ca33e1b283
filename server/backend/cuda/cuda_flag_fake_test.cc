// CUDA flag waits held in the daemon, on the fake driver: a held wait sees
// every value stored after it was enqueued, however many follow.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_device.h"
#include "server/backend/cuda/cuda_fake_testing.h"

namespace gpustream::backend {
namespace {

// A queue busy for a while reaches its EQUAL wait for 3 only after the host
// stored 1, 2, ..., 200: the flag holds 200 then, but 3 was stored after
// the wait was enqueued, so the work behind it runs.
TEST(CudaFlagFakeTest, HeldWaitSeesAValueStoredLongBeforeItIsReached) {
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<CudaDevice> device = *std::move(created);
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
  auto read = std::make_shared<absl::Notification>();
  auto value = std::make_shared<uint64_t>(0);
  ASSERT_TRUE(
      q->Read(counter, 0, 8, [read, value](absl::StatusOr<std::string> data) {
         if (data.ok() && data->size() == 8) {
           std::memcpy(value.get(), data->data(), 8);
         }
         read->Notify();
       }).ok());
  ASSERT_TRUE(read->WaitForNotificationWithTimeout(absl::Seconds(20)))
      << "the wait for 3 never passed";
  EXPECT_EQ(*value, 9u);
  EXPECT_EQ(flag->Load(), 200u);
}

}  // namespace
}  // namespace gpustream::backend
