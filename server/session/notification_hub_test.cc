// The hub's bounded backlog: the oldest notifications kept, the rest counted
// and reported once to the next sink.
#include "server/session/notification_hub.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace gpustream::session {
namespace {

// Keeps everything delivered. The hub serializes calls; the mutex makes
// what it kept visible to the test thread.
class CollectingSink : public NotificationSink {
 public:
  void Deliver(const v1::Notification& n) override {
    absl::MutexLock lock(&mu_);
    got_.push_back(n);
  }
  void Close() override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  std::vector<v1::Notification> got() {
    absl::MutexLock lock(&mu_);
    return got_;
  }
  bool closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::Notification> got_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

v1::Notification HostFunc(uint64_t callback_id) {
  v1::Notification n;
  n.mutable_host_func_reached()->set_callback_id(callback_id);
  return n;
}

void PublishRange(NotificationHub& hub, uint64_t first, uint64_t last) {
  for (uint64_t id = first; id <= last; ++id) hub.Publish(HostFunc(id));
}

constexpr uint64_t kBound = NotificationHub::kMaxBacklog;

TEST(NotificationHubTest, BacklogKeepsTheOldestAndReportsTheRestOnce) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound + 100);
  CollectingSink sink;
  hub.Attach(&sink);
  std::vector<v1::Notification> got = sink.got();
  ASSERT_EQ(got.size(), kBound + 1);
  for (uint64_t i = 0; i < kBound; ++i) {
    ASSERT_EQ(got[i].host_func_reached().callback_id(), i + 1) << i;
  }
  ASSERT_TRUE(got[kBound].has_notifications_dropped());
  EXPECT_EQ(got[kBound].notifications_dropped().count(), 100u);

  // With a sink attached, notifications pass straight through: no second
  // report.
  PublishRange(hub, kBound + 101, kBound + 101);
  got = sink.got();
  ASSERT_EQ(got.size(), kBound + 2);
  EXPECT_EQ(got.back().host_func_reached().callback_id(), kBound + 101);
  hub.Detach(&sink);
}

TEST(NotificationHubTest, NoReportWithoutDrops) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound);
  CollectingSink sink;
  hub.Attach(&sink);
  std::vector<v1::Notification> got = sink.got();
  ASSERT_EQ(got.size(), kBound);
  for (const v1::Notification& n : got) {
    EXPECT_FALSE(n.has_notifications_dropped());
  }
  hub.Detach(&sink);
}

TEST(NotificationHubTest, EachGapIsReportedWithItsOwnCount) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound + 7);
  CollectingSink first;
  hub.Attach(&first);
  hub.Detach(&first);
  ASSERT_EQ(first.got().size(), kBound + 1);
  EXPECT_EQ(first.got().back().notifications_dropped().count(), 7u);

  // The backlog starts again, empty, and counts from zero.
  PublishRange(hub, kBound + 8, 2 * kBound + 7 + 3);
  CollectingSink second;
  hub.Attach(&second);
  std::vector<v1::Notification> got = second.got();
  ASSERT_EQ(got.size(), kBound + 1);
  EXPECT_EQ(got.front().host_func_reached().callback_id(), kBound + 8);
  EXPECT_EQ(got.back().notifications_dropped().count(), 3u);
  hub.Detach(&second);
}

// A report published into a full backlog adds its count: every
// notification is delivered or counted exactly once.
TEST(NotificationHubTest, ReportsPublishedIntoAFullBacklogAddTheirCount) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound);
  hub.Publish(NotificationHub::DroppedReport(40));
  PublishRange(hub, kBound + 41, kBound + 42);
  CollectingSink sink;
  hub.Attach(&sink);
  std::vector<v1::Notification> got = sink.got();
  ASSERT_EQ(got.size(), kBound + 1);
  EXPECT_EQ(got.back().notifications_dropped().count(), 42u);
  hub.Detach(&sink);
}

TEST(NotificationHubTest, CloseAllForgetsTheBacklogAndItsCount) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound + 5);
  hub.CloseAll();
  CollectingSink sink;
  hub.Attach(&sink);
  EXPECT_TRUE(sink.closed());
  EXPECT_TRUE(sink.got().empty());
}

}  // namespace
}  // namespace gpustream::session
