// Tests of the timer thread.
#include "server/util/timer_thread.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace gpustream::util {
namespace {

TEST(TimerThreadTest, FiresInDeadlineOrder) {
  TimerThread timer;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  timer.Schedule(absl::Milliseconds(60), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(2);
    done.Notify();
  });
  timer.Schedule(absl::Milliseconds(20), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(TimerThreadTest, CancelledCallbackNeverRuns) {
  TimerThread timer;
  std::atomic<bool> ran{false};
  absl::Notification later;
  auto id = timer.Schedule(absl::Milliseconds(20), [&] { ran = true; });
  timer.Cancel(id);
  timer.Schedule(absl::Milliseconds(60), [&] { later.Notify(); });
  ASSERT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace gpustream::util
