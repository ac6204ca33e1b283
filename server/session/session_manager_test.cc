// Tests of session lifecycle: opening, limits, leases and closing.
#include "server/session/session_manager.h"

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/session/recording_sink.h"

namespace gpustream::session {
namespace {

class SessionManagerTest : public ::testing::Test {
 protected:
  SessionManagerTest()
      : device_(backend::CpuDeviceOptions{1 << 20}),
        modules_(*modules::ModuleRegistry::Create(device_, {})) {}

  std::unique_ptr<SessionManager> NewManager(ManagerOptions options) {
    options.lease_check_period = absl::Milliseconds(20);
    return std::make_unique<SessionManager>(
        std::vector<DeviceSlot>{{&device_, modules_.get()}}, &timer_, options);
  }

  util::TimerThread timer_;
  backend::CpuDevice device_;
  std::unique_ptr<modules::ModuleRegistry> modules_;
};

TEST_F(SessionManagerTest, SessionIdsAreLongAndDistinct) {
  auto manager = NewManager({});
  v1::OpenSessionResponse a, b;
  ASSERT_TRUE(manager->Open("t", {}, &a).ok());
  ASSERT_TRUE(manager->Open("t", {}, &b).ok());
  EXPECT_EQ(a.session_id().size(), 32u);  // 128 bits, hex.
  EXPECT_NE(a.session_id(), b.session_id());
  EXPECT_EQ(a.lease_seconds(), 60u);
  EXPECT_TRUE(manager->Find("t", a.session_id()).ok());
  EXPECT_EQ(manager->Find("t", "nope").status().code(),
            absl::StatusCode::kNotFound);
  // Another tenant's session is indistinguishable from a missing one.
  auto foreign = manager->Find("other", a.session_id());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kNotFound);
  v1::ListSessionsResponse listed;
  manager->List(&listed);
  ASSERT_EQ(listed.sessions_size(), 2);
  EXPECT_EQ(listed.sessions(0).tenant(), "t");
  EXPECT_EQ(listed.sessions(0).queues(), 1u);
}

TEST_F(SessionManagerTest, MaxSessionsAndUnknownDevice) {
  ManagerOptions options;
  options.max_sessions = 1;
  auto manager = NewManager(options);
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open("t", {}, &resp).ok());
  EXPECT_EQ(manager->Open("t", {}, &resp).code(),
            absl::StatusCode::kResourceExhausted);
  v1::OpenSessionRequest other_device;
  other_device.set_device_id(3);
  EXPECT_EQ(manager->Open("t", other_device, &resp).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionManagerTest, LeaseExpiresUnlessKeptAlive) {
  auto manager = NewManager({});
  v1::OpenSessionRequest req;
  req.set_lease_seconds(1);
  v1::OpenSessionResponse kept, dropped;
  ASSERT_TRUE(manager->Open("t", req, &kept).ok());
  ASSERT_TRUE(manager->Open("t", req, &dropped).ok());
  // Keep one alive for 1.6 s, past the other's 1 s lease.
  for (int i = 0; i < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    v1::KeepAliveRequest keep;
    keep.set_session_id(kept.session_id());
    v1::KeepAliveResponse keep_resp;
    ASSERT_TRUE(manager->KeepAlive("t", keep, &keep_resp).ok());
  }
  EXPECT_TRUE(manager->Find("t", kept.session_id()).ok());
  EXPECT_EQ(manager->Find("t", dropped.session_id()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionManagerTest, LeaseExpiryIsAnnounced) {
  auto manager = NewManager({});
  v1::OpenSessionRequest req;
  req.set_lease_seconds(2);
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open("t", req, &resp).ok());
  auto session = *manager->Find("t", resp.session_id());
  RecordingSink sink(v1::Notification::kLeaseExpiring);
  session->notifications().Attach(&sink);
  // Warned once a quarter of the lease is left, then torn down.
  ASSERT_TRUE(sink.got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LE(sink.first.lease_expiring().seconds_left(), 1u);
  ASSERT_TRUE(sink.closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(manager->session_count(), 0u);
}

TEST_F(SessionManagerTest, OpenStreamHoldsTheLease) {
  auto manager = NewManager({});
  v1::OpenSessionRequest req;
  req.set_lease_seconds(1);
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open("t", req, &resp).ok());
  auto session = *manager->Find("t", resp.session_id());
  session->StreamOpened();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(manager->session_count(), 1u);
  session->StreamClosed();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(manager->session_count(), 0u);
}

TEST_F(SessionManagerTest, SlowTeardownDelaysNoOtherSession) {
  auto manager = NewManager({});
  v1::OpenSessionResponse slow, quick;
  ASSERT_TRUE(manager->Open("t", {}, &slow).ok());
  ASSERT_TRUE(manager->Open("t", {}, &quick).ok());
  // The slow session's queue runs a 1.5 s kernel that teardown must await.
  auto session = *manager->Find("t", slow.session_id());
  v1::LaunchKernelRequest spin;
  spin.set_queue_id(session->default_queue_id());
  spin.set_module("samples");
  spin.set_kernel("spin_ns");
  spin.mutable_grid()->set_x(1);
  spin.mutable_block()->set_x(1);
  spin.add_args()->set_u64(1'500'000'000);
  v1::LaunchKernelResponse launched;
  ASSERT_TRUE(session->LaunchKernel(spin, &launched).ok());
  session.reset();
  // Let the kernel start: teardown skips work that has not started, but
  // must await a kernel that is running.
  absl::SleepFor(absl::Milliseconds(200));
  absl::Notification slow_closed, quick_closed;
  manager->Close("t", slow.session_id(),
                 [&](absl::Status) { slow_closed.Notify(); });
  manager->Close("t", quick.session_id(),
                 [&](absl::Status) { quick_closed.Notify(); });
  ASSERT_TRUE(quick_closed.WaitForNotificationWithTimeout(absl::Seconds(1)));
  EXPECT_FALSE(slow_closed.HasBeenNotified());
  ASSERT_TRUE(slow_closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST_F(SessionManagerTest, CloseTearsDownInTheBackground) {
  auto manager = NewManager({});
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open("t", {}, &resp).ok());
  absl::Notification closed;
  manager->Close("t", resp.session_id(), [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    closed.Notify();
  });
  ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::Notification again;
  manager->Close("t", resp.session_id(), [&](absl::Status s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    again.Notify();
  });
  ASSERT_TRUE(again.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

}  // namespace
}  // namespace gpustream::session
