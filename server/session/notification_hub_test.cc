// The hub's numbering and bounded retention: what nobody watched kept (the
// oldest) and the rest counted and reported once to the next sink; what a
// resuming sink acknowledged not sent again, what followed replayed.
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

constexpr uint64_t kBound = NotificationHub::kMaxRetained;

TEST(NotificationHubTest, BacklogKeepsTheOldestAndReportsTheRestOnce) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound + 100);
  CollectingSink sink;
  ASSERT_TRUE(hub.Attach(&sink).ok());
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
  ASSERT_TRUE(hub.Attach(&sink).ok());
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
  ASSERT_TRUE(hub.Attach(&first).ok());
  hub.Detach(&first);
  ASSERT_EQ(first.got().size(), kBound + 1);
  EXPECT_EQ(first.got().back().notifications_dropped().count(), 7u);

  // The backlog starts again, empty, and counts from zero.
  PublishRange(hub, kBound + 8, 2 * kBound + 7 + 3);
  CollectingSink second;
  ASSERT_TRUE(hub.Attach(&second).ok());
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
  ASSERT_TRUE(hub.Attach(&sink).ok());
  std::vector<v1::Notification> got = sink.got();
  ASSERT_EQ(got.size(), kBound + 1);
  EXPECT_EQ(got.back().notifications_dropped().count(), 42u);
  hub.Detach(&sink);
}

// The callback ids of what `sink` got, with 0 for a drop report of `count`
// written as -count.
std::vector<int64_t> Walk(CollectingSink& sink) {
  std::vector<int64_t> out;
  for (const v1::Notification& n : sink.got()) {
    if (n.has_notifications_dropped()) {
      EXPECT_EQ(n.id(), 0u);
      out.push_back(-static_cast<int64_t>(n.notifications_dropped().count()));
    } else {
      // PublishRange's callback ids are the hub's ids, on a fresh hub.
      EXPECT_EQ(n.id(), n.host_func_reached().callback_id());
      out.push_back(static_cast<int64_t>(n.host_func_reached().callback_id()));
    }
  }
  return out;
}

// Publishes first..last while a sink is attached (they are then handed,
// and kept), and returns what that sink got.
std::vector<int64_t> HandOut(NotificationHub& hub, uint64_t first,
                             uint64_t last) {
  CollectingSink sink;
  EXPECT_TRUE(hub.Attach(&sink).ok());
  PublishRange(hub, first, last);
  hub.Detach(&sink);
  return Walk(sink);
}

// A stream that broke after its client handled notification 4 of 10 (the
// rest were sent into the broken stream): the next one, acknowledging 4,
// gets 5 to 10 again and then the live ones; one attaching without an id
// gets only what no sink was handed.
TEST(NotificationHubTest, ASinkResumesAfterTheIdItAcknowledged) {
  NotificationHub hub;
  EXPECT_EQ(HandOut(hub, 1, 10).size(), 10u);
  EXPECT_EQ(hub.last_id(), 10u);

  CollectingSink resumed, plain;
  ASSERT_TRUE(hub.Attach(&resumed, 4).ok());
  ASSERT_TRUE(hub.Attach(&plain).ok());
  PublishRange(hub, 11, 11);
  EXPECT_EQ(Walk(resumed), (std::vector<int64_t>{5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(Walk(plain), (std::vector<int64_t>{11}));
  hub.Detach(&resumed);
  hub.Detach(&plain);

  // Acknowledging all: nothing again.
  CollectingSink caught_up;
  ASSERT_TRUE(hub.Attach(&caught_up, 11).ok());
  EXPECT_TRUE(caught_up.got().empty());
  hub.Detach(&caught_up);
}

// With a sink attached the hub keeps the latest kBound: a resume from
// further back gets one report for the ids no longer kept, then the rest.
TEST(NotificationHubTest, AResumePastWhatIsKeptReportsTheGapFirst) {
  NotificationHub hub;
  HandOut(hub, 1, kBound + 50);

  CollectingSink resumed;
  ASSERT_TRUE(hub.Attach(&resumed, 10).ok());
  std::vector<int64_t> got = Walk(resumed);
  ASSERT_EQ(got.size(), kBound + 1);
  EXPECT_EQ(got[0], -40);  // 11 to 50.
  EXPECT_EQ(got[1], 51);
  EXPECT_EQ(got.back(), static_cast<int64_t>(kBound + 50));
  hub.Detach(&resumed);
}

// A resume that spans ids dropped while nobody watched gets the report
// where they were.
TEST(NotificationHubTest, AResumeAcrossDroppedIdsReportsThemInPlace) {
  NotificationHub hub;
  HandOut(hub, 1, 2);
  // Nobody watches: kBound - 2 more fill the hub, the next 2 take the room
  // of 1 and 2 (handed already), and the last 3 are dropped.
  PublishRange(hub, 3, kBound + 5);
  HandOut(hub, kBound + 6, kBound + 6);  // The kept ones, then this one.

  CollectingSink resumed;
  ASSERT_TRUE(hub.Attach(&resumed, kBound - 1).ok());
  EXPECT_EQ(Walk(resumed),
            (std::vector<int64_t>{static_cast<int64_t>(kBound),
                                  static_cast<int64_t>(kBound + 1),
                                  static_cast<int64_t>(kBound + 2), -3,
                                  static_cast<int64_t>(kBound + 6)}));
  hub.Detach(&resumed);
}

TEST(NotificationHubTest, AnAcknowledgementPastTheLastIdIsRefused) {
  NotificationHub hub;
  PublishRange(hub, 1, 3);
  CollectingSink sink;
  const absl::Status refused = hub.Attach(&sink, 4);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("acknowledged_id 4"), std::string::npos)
      << refused;
  PublishRange(hub, 4, 4);
  EXPECT_TRUE(sink.got().empty());  // Never attached.
  // The backlog is still there for a sink that asks properly.
  CollectingSink next;
  ASSERT_TRUE(hub.Attach(&next).ok());
  EXPECT_EQ(Walk(next), (std::vector<int64_t>{1, 2, 3, 4}));
  hub.Detach(&next);
}

TEST(NotificationHubTest, CloseAllForgetsTheBacklogAndItsCount) {
  NotificationHub hub;
  PublishRange(hub, 1, kBound + 5);
  hub.CloseAll();
  CollectingSink sink;
  ASSERT_TRUE(hub.Attach(&sink).ok());
  EXPECT_TRUE(sink.closed());
  EXPECT_TRUE(sink.got().empty());
}

}  // namespace
}  // namespace gpustream::session
