#include "server/backend/gpu/gpu_dispatcher.h"

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace gpustream::backend {
namespace {

absl::Duration Idle() { return absl::InfiniteDuration(); }

// Posted work runs on the dispatcher's thread, which InDispatcher names;
// after Shutdown posts run on their callers' threads, which it does not.
TEST(GpuDispatcherTest, InDispatcherNamesOnlyTheLoopThread) {
  GpuDispatcher dispatcher(nullptr, Idle);
  EXPECT_FALSE(dispatcher.InDispatcher());
  absl::Notification ran;
  bool inside = false;
  dispatcher.Post([&] {
    inside = dispatcher.InDispatcher();
    ran.Notify();
  });
  ran.WaitForNotification();
  EXPECT_TRUE(inside);
  dispatcher.Shutdown();
  inside = true;
  dispatcher.Post([&] { inside = dispatcher.InDispatcher(); });
  EXPECT_FALSE(inside);
}

}  // namespace
}  // namespace gpustream::backend
