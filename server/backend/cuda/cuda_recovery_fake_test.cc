// Recovery of a CUDA device on the fake driver with its default: a sticky
// error survives cuDevicePrimaryCtxReset, as the driver does not promise
// otherwise. Recover must prove the device and say that it is still
// failed, never report a dead GPU as recovered.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_device.h"
#include "server/backend/cuda/cuda_fake_testing.h"

namespace gpustream::backend {
namespace {

TEST(CudaRecoveryFakeTest, RecoverRefusesADeviceTheResetDidNotClear) {
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<CudaDevice> device = *std::move(created);
  absl::Notification fatal;
  device->SetFatalErrorHandler(
      [&fatal](const absl::Status&) { fatal.Notify(); });
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  ASSERT_FALSE(modules.empty());
  const Kernel& trap = **modules.front()->FindKernel("trap");
  {
    auto q = *device->CreateQueue(QueueOptions{});
    ASSERT_TRUE(q->Launch(trap, {{1}, {1}}, {}).ok());
    ASSERT_TRUE(fatal.WaitForNotificationWithTimeout(absl::Seconds(20)));
  }
  const absl::Status recovered = device->Recover();
  EXPECT_EQ(recovered.code(), absl::StatusCode::kAborted) << recovered;
  EXPECT_TRUE(
      absl::StrContains(recovered.message(), "still fails after a reset"))
      << recovered;
  EXPECT_TRUE(device->failed());
}

}  // namespace
}  // namespace gpustream::backend
