// Recovery of a CUDA device on the fake driver. With the fake's default, a
// sticky error survives cuDevicePrimaryCtxReset, as the driver does not
// promise otherwise: Recover must prove the device and say that it is still
// failed, never report a dead GPU as recovered. Where a reset does clear it,
// callers racing a recovery must never hand the driver a handle of the
// context being reset (the fake aborts the process if they do).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/graph.h"

namespace gpustream::backend {
namespace {

TEST(CudaRecoveryFakeTest, RecoverRefusesADeviceTheResetDidNotClear) {
  auto created = OpenFakeCudaDevice();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<GpuDevice> device = *std::move(created);
  absl::Notification fatal;
  device->SetFatalErrorHandler(
      [&fatal](const DeviceFailure&) { fatal.Notify(); });
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

// The child of the case below; its objects are gone when it returns (the
// leak checker of the ASan build would abort the child otherwise).
void RaceRecoveriesChild() {
  setenv("FAKEGPU_RESET_CLEARS_STICKY", "1", 1);
  auto fail = [](const std::string& why) {
    std::cerr << "FAILED: " << why << "\n";
    std::exit(1);
  };
  auto created = OpenFakeCudaDevice();
  if (!created.ok()) fail(created.status().ToString());
  std::unique_ptr<GpuDevice> device = *std::move(created);
  std::atomic<int> faults{0};
  device->SetFatalErrorHandler([&faults](const DeviceFailure&) {
    faults.fetch_add(1, std::memory_order_release);
  });
  std::vector<std::unique_ptr<Module>> modules = device->BuiltinModules();
  if (modules.empty()) fail("no samples");
  const Kernel& trap = **modules.front()->FindKernel("trap");
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::thread caller([&] {
    for (int i = 0; i < 1'000'000 && !stop.load(); ++i) {
      const MemoryInfo m = device->memory();
      if (m.total_bytes == 0) fail("no total memory");
      auto q = device->CreateQueue(QueueOptions{});
      // Either works or says the device failed (or was reset); a
      // flag's and a write's pinned memory is never touched after
      // the reset freed it (ASan sees that), nor is a capture made on
      // the reset context.
      auto flag = device->CreateFlag();
      if (flag.ok()) {
        (*flag)->Store(static_cast<uint64_t>(i) + 1);
        (*flag)->Load();
      }
      if (q.ok()) {
        auto buffer = device->Allocate(4096, MemoryKind::kDevice);
        if (buffer.ok()) {
          (*q)->Write(*buffer, 0, std::string(4096, 'x')).IgnoreError();
          // A graph captured on its first launch: the capture holds the
          // context as any driver call does.
          std::vector<GraphCommand> commands;
          commands.push_back(GraphFill{*buffer, 0, 4096, 0});
          commands.push_back(GraphFill{*buffer, 0, 4096, 1});
          const absl::Status launched = (*q)->LaunchGraph(
              std::make_shared<const Graph>(std::move(commands)), nullptr);
          if (!launched.ok() && launched.code() != absl::StatusCode::kAborted) {
            fail(launched.ToString());
          }
        }
      }
      if (!q.ok() && q.status().code() != absl::StatusCode::kAborted) {
        fail(q.status().ToString());
      }
      if (!flag.ok() && flag.status().code() != absl::StatusCode::kAborted) {
        fail(flag.status().ToString());
      }
      calls.fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (int round = 1; round <= 200; ++round) {
    auto q = device->CreateQueue(QueueOptions{});
    if (!q.ok()) fail(q.status().ToString());
    if (!(*q)->Launch(trap, {{1}, {1}}, {}).ok()) fail("trap launch");
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (faults.load(std::memory_order_acquire) < round) {
      if (absl::Now() > deadline) fail("the fault was never reported");
      absl::SleepFor(absl::Milliseconds(1));
    }
    q->reset();
    const absl::Status recovered = device->Recover();
    if (!recovered.ok()) fail(recovered.ToString());
  }
  stop.store(true);
  caller.join();
  if (calls.load() < 10) fail("the caller hardly ran");
}

// In a child process: the fake reads FAKEGPU_RESET_CLEARS_STICKY once.
// 200 rounds of fault and recovery while another thread keeps asking the
// device for its memory figures and for new queues and flags (a stats
// scrape, a session opening): each call either works or says the device
// failed, and none reaches the driver with the old context's handles (a
// graph's capture included).
TEST(CudaRecoveryFakeTest, CallersRacingARecoveryNeverUseTheResetContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        RaceRecoveriesChild();
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gpustream::backend
