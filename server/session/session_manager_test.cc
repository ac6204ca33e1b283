// Tests of session lifecycle: opening, limits, leases and closing.
#include "server/session/session_manager.h"

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/session/recording_sink.h"

namespace gpustream::session {
namespace {

class SessionManagerTest : public ::testing::Test {
 protected:
  SessionManagerTest()
      : device_(backend::CpuDeviceOptions{1 << 20}),
        modules_(*modules::ModuleRegistry::Create(device_, {})),
        sharing_(*DeviceSharing::Create(v1::GPU_SHARING_SHARED_CONTEXT,
                                        &device_, modules_.get(), {}, {})) {}

  std::unique_ptr<SessionManager> NewManager(ManagerOptions options) {
    options.lease_check_period = absl::Milliseconds(20);
    return std::make_unique<SessionManager>(
        std::vector<DeviceSlot>{{sharing_.get()}}, &timer_, tenants_.get(),
        options);
  }

  // Tenants "t" and "other", known by their certificate subjects.
  static std::unique_ptr<tenants::TenantRegistry> NewTenants() {
    v1::ServerConfig config;
    for (const char* name : {"t", "other"}) {
      v1::Tenant* tenant = config.add_tenants();
      tenant->set_name(name);
      tenant->add_tls_subject(name);
    }
    return *tenants::TenantRegistry::Create(config);
  }
  // Flag 1 of `session`, and `queue` stalled on it until Ungate.
  static void Gate(Session& session, uint64_t queue) {
    v1::CreateFlagRequest flag;
    flag.set_id(1);
    v1::CreateFlagResponse made;
    ASSERT_TRUE(session.CreateFlag(flag, &made).ok());
    v1::WaitHostValueRequest wait;
    wait.set_queue_id(queue);
    wait.set_flag_id(1);
    wait.set_value(1);
    v1::WaitHostValueResponse waiting;
    ASSERT_TRUE(session.WaitHostValue(wait, &waiting).ok());
  }
  static void Ungate(Session& session) {
    v1::SignalFlagRequest signal;
    signal.set_flag_id(1);
    signal.set_value(1);
    v1::SignalFlagResponse signalled;
    ASSERT_TRUE(session.SignalFlag(signal, &signalled).ok());
  }

  tenants::Principal Who(const std::string& name) {
    return *tenants_->Authenticate({{}, name});
  }

  util::TimerThread timer_;
  std::unique_ptr<tenants::TenantRegistry> tenants_ = NewTenants();
  backend::CpuDevice device_;
  std::unique_ptr<modules::ModuleRegistry> modules_;
  std::unique_ptr<DeviceSharing> sharing_;
};

TEST_F(SessionManagerTest, SessionIdsAreLongAndDistinct) {
  auto manager = NewManager({});
  v1::OpenSessionResponse a, b;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &a).ok());
  ASSERT_TRUE(manager->Open(Who("t"), {}, &b).ok());
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
  ASSERT_TRUE(manager->Open(Who("t"), {}, &resp).ok());
  EXPECT_EQ(manager->Open(Who("t"), {}, &resp).code(),
            absl::StatusCode::kResourceExhausted);
  v1::OpenSessionRequest other_device;
  other_device.set_device_id(3);
  EXPECT_EQ(manager->Open(Who("t"), other_device, &resp).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionManagerTest, LeaseExpiresUnlessKeptAlive) {
  auto manager = NewManager({});
  v1::OpenSessionRequest req;
  req.set_lease_seconds(1);
  v1::OpenSessionResponse kept, dropped;
  ASSERT_TRUE(manager->Open(Who("t"), req, &kept).ok());
  ASSERT_TRUE(manager->Open(Who("t"), req, &dropped).ok());
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
  ASSERT_TRUE(manager->Open(Who("t"), req, &resp).ok());
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
  ASSERT_TRUE(manager->Open(Who("t"), req, &resp).ok());
  auto session = *manager->Find("t", resp.session_id());
  session->StreamOpened();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(manager->session_count(), 1u);
  session->StreamClosed();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(manager->session_count(), 0u);
}

TEST_F(SessionManagerTest, TeardownStopsARunningKernel) {
  auto manager = NewManager({});
  v1::OpenSessionResponse busy, quick;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &busy).ok());
  ASSERT_TRUE(manager->Open(Who("t"), {}, &quick).ok());
  // The busy session's queue runs a kernel of 2^62 ns: teardown must stop
  // it (Queue::Cancel), never wait for it.
  auto session = *manager->Find("t", busy.session_id());
  v1::LaunchKernelRequest spin;
  spin.set_queue_id(session->default_queue_id());
  spin.set_module("samples");
  spin.set_kernel("spin_ns");
  spin.mutable_grid()->set_x(1);
  spin.mutable_block()->set_x(1);
  spin.add_args()->set_u64(uint64_t{1} << 62);
  v1::LaunchKernelResponse launched;
  ASSERT_TRUE(session->LaunchKernel(spin, &launched).ok());
  session.reset();
  absl::SleepFor(absl::Milliseconds(200));  // Let the kernel start.
  absl::Notification busy_closed, quick_closed;
  const absl::Time start = absl::Now();
  manager->Close("t", busy.session_id(),
                 [&](absl::Status) { busy_closed.Notify(); });
  manager->Close("t", quick.session_id(),
                 [&](absl::Status) { quick_closed.Notify(); });
  ASSERT_TRUE(quick_closed.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(busy_closed.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(SessionManagerTest, CloseTearsDownInTheBackground) {
  auto manager = NewManager({});
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &resp).ok());
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

TEST_F(SessionManagerTest, NoTenantLocksTheOthersOut) {
  ManagerOptions options;
  options.max_sessions = 4;  // Shares: 2 for "t", 2 for "other".
  auto manager = NewManager(options);
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &resp).ok());
  ASSERT_TRUE(manager->Open(Who("t"), {}, &resp).ok());
  absl::Status third = manager->Open(Who("t"), {}, &resp);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("fair share 2 of max_sessions 4"),
            std::string::npos)
      << third;
  ASSERT_TRUE(manager->Open(Who("other"), {}, &resp).ok());
  ASSERT_TRUE(manager->Open(Who("other"), {}, &resp).ok());
  EXPECT_EQ(manager->Open(Who("other"), {}, &resp).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SessionManagerTest, UnusedSharesAreOpenToAnyoneUntilClaimed) {
  ManagerOptions options;
  options.max_sessions = 4;
  auto manager = NewManager(options);
  v1::OpenSessionResponse a, b, c;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &a).ok());
  ASSERT_TRUE(manager->Open(Who("other"), {}, &b).ok());
  ASSERT_TRUE(manager->Open(Who("other"), {}, &c).ok());
  // "other" has its share; "t" has one of its two, so the last slot is t's.
  EXPECT_EQ(manager->Open(Who("other"), {}, &c).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(manager->Open(Who("t"), {}, &c).ok());
}

TEST_F(SessionManagerTest, KillEndsTheSessionWithAbortedForItsOwner) {
  auto manager = NewManager({});
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &resp).ok());
  v1::ListSessionsResponse listed;
  manager->List(&listed);
  ASSERT_EQ(listed.sessions_size(), 1);
  const std::string public_id = listed.sessions(0).public_id();
  EXPECT_NE(public_id, resp.session_id());
  EXPECT_EQ(listed.DebugString().find(resp.session_id()), std::string::npos)
      << "no listing shows a session id";
  EXPECT_EQ(manager->Kill("s-nope", "ops").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(manager->Kill(public_id, "ops").ok());
  auto found = manager->Find("t", resp.session_id());
  EXPECT_EQ(found.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(found.status().message().find("administrator"), std::string::npos);
  // Only to its owner: to another tenant the id is simply unknown.
  EXPECT_EQ(manager->Find("other", resp.session_id()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager->Kill(public_id, "ops").code(),
            absl::StatusCode::kNotFound);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Who("t").tenant->sessions() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Who("t").tenant->sessions(), 0u);
  EXPECT_EQ(Who("t").tenant->queues(), 0u);
}

TEST_F(SessionManagerTest, EndTenantAbortsOnlyThatTenantsSessions) {
  auto manager = NewManager({});
  v1::OpenSessionResponse mine, theirs;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &mine).ok());
  ASSERT_TRUE(manager->Open(Who("other"), {}, &theirs).ok());
  manager->EndTenant("t");
  EXPECT_EQ(manager->Find("t", mine.session_id()).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(manager->Find("other", theirs.session_id()).ok());
}

TEST_F(SessionManagerTest, TenantQuotasBoundSessionsQueuesAndMemory) {
  v1::ServerConfig config;
  v1::Tenant* t = config.add_tenants();
  t->set_name("t");
  t->add_tls_subject("t");
  t->mutable_quota()->set_max_sessions(1);
  t->mutable_quota()->set_max_queues(2);
  t->mutable_quota()->set_device_memory_bytes(4096);
  ASSERT_TRUE(tenants_->Reload(config).ok());
  auto manager = NewManager({});
  v1::OpenSessionResponse resp;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &resp).ok());
  EXPECT_EQ(manager->Open(Who("t"), {}, &resp).code(),
            absl::StatusCode::kResourceExhausted);
  auto session = *manager->Find("t", resp.session_id());
  v1::CreateQueueResponse queue;
  ASSERT_TRUE(session->CreateQueue({}, &queue).ok());  // 2 with the default.
  absl::Status third = session->CreateQueue({}, &queue);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("max_queues"), std::string::npos);
  v1::AllocateBufferRequest alloc;
  alloc.set_size_bytes(4096);
  v1::AllocateBufferResponse buffer;
  ASSERT_TRUE(session->AllocateBuffer(alloc, &buffer).ok());
  alloc.set_size_bytes(1);
  absl::Status over = session->AllocateBuffer(alloc, &buffer);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("device_memory_bytes"), std::string::npos);
  EXPECT_NE(over.message().find("in use 4096"), std::string::npos) << over;
  session.reset();
  absl::Notification closed;
  manager->Close("t", resp.session_id(),
                 [&](absl::Status) { closed.Notify(); });
  ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(Who("t").tenant->sessions(), 0u);
  EXPECT_EQ(Who("t").tenant->queues(), 0u);
  EXPECT_EQ(Who("t").tenant->memory_bytes(), 0u);
}

// Weights 100:1 over 16 sessions: the light tenant's share rounds to 0,
// but every tenant is guaranteed at least one session.
TEST_F(SessionManagerTest, ALightTenantIsNeverLockedOut) {
  v1::ServerConfig config;
  for (auto [name, weight] : {std::pair{"t", 100}, std::pair{"other", 1}}) {
    v1::Tenant* t = config.add_tenants();
    t->set_name(name);
    t->add_tls_subject(name);
    t->set_weight(weight);
  }
  ASSERT_TRUE(tenants_->Reload(config).ok());
  ManagerOptions options;
  options.max_sessions = 16;
  auto manager = NewManager(options);
  int heavy = 0;
  v1::OpenSessionResponse resp;
  for (int i = 0; i < 32 && manager->Open(Who("t"), {}, &resp).ok(); ++i) {
    ++heavy;
  }
  EXPECT_EQ(heavy, 15);
  EXPECT_TRUE(manager->Open(Who("other"), {}, &resp).ok());
}

// Memory freed by id but still used by stalled work stays charged: the
// quota is credited when the memory really goes.
TEST_F(SessionManagerTest, FreedBuffersStayChargedUntilTheirWorkIsDone) {
  v1::ServerConfig config;
  v1::Tenant* t = config.add_tenants();
  t->set_name("t");
  t->add_tls_subject("t");
  t->mutable_quota()->set_device_memory_bytes(256 << 10);
  ASSERT_TRUE(tenants_->Reload(config).ok());
  auto manager = NewManager({});
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &opened).ok());
  auto session = *manager->Find("t", opened.session_id());
  ASSERT_NO_FATAL_FAILURE(Gate(*session, opened.default_queue_id()));
  v1::AllocateBufferRequest alloc;
  alloc.set_id(100);
  alloc.set_size_bytes(256 << 10);
  v1::AllocateBufferResponse allocated;
  ASSERT_TRUE(session->AllocateBuffer(alloc, &allocated).ok());
  v1::FillBufferRequest fill;  // Behind the gate: holds the buffer.
  fill.set_queue_id(opened.default_queue_id());
  fill.set_buffer_id(100);
  fill.set_size(4);
  v1::FillBufferResponse filled;
  ASSERT_TRUE(session->FillBuffer(fill, &filled).ok());
  v1::FreeBufferRequest free;
  free.set_buffer_id(100);
  v1::FreeBufferResponse freed;
  ASSERT_TRUE(session->FreeBuffer(free, &freed).ok());
  alloc.set_id(101);
  absl::Status again = session->AllocateBuffer(alloc, &allocated);
  EXPECT_EQ(again.code(), absl::StatusCode::kResourceExhausted) << again;
  EXPECT_EQ(Who("t").tenant->memory_bytes(), 256u << 10);
  // The gate opens, the fill runs, the memory and the charge go.
  ASSERT_NO_FATAL_FAILURE(Ungate(*session));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Who("t").tenant->memory_bytes() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Who("t").tenant->memory_bytes(), 0u);
  EXPECT_TRUE(session->AllocateBuffer(alloc, &allocated).ok());
}

// Synchronize calls that time out keep their watch until the work is done:
// they are bounded per tenant, and released when the work completes.
// The waits pending at once are bounded per tenant; each gives its charge
// back when it ends (a timed-out one at its timeout: tenancy_test's
// TimedOutSynchronizesLeaveNoWatchBehind).
TEST_F(SessionManagerTest, PendingWaitsAreBoundedAndReleased) {
  auto manager = NewManager({});
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(manager->Open(Who("t"), {}, &opened).ok());
  auto session = *manager->Find("t", opened.session_id());
  ASSERT_NO_FATAL_FAILURE(Gate(*session, opened.default_queue_id()));
  struct Outcome {
    absl::Mutex mu;
    int ok = 0, refused = 0;
  };
  auto outcome = std::make_shared<Outcome>();
  v1::SynchronizeQueueResponse synced;
  v1::SynchronizeQueueRequest sync;
  sync.set_queue_id(opened.default_queue_id());
  sync.set_timeout_ms(60000);
  absl::Status refusal;
  for (uint32_t i = 0; i < tenants::Tenant::kMaxPendingWaits + 10; ++i) {
    session->SynchronizeQueue(
        sync, &synced, [outcome, &refusal](absl::Status s) {
          absl::MutexLock lock(&outcome->mu);
          if (s.ok()) ++outcome->ok;
          if (s.code() == absl::StatusCode::kResourceExhausted) {
            if (outcome->refused++ == 0) refusal = s;
          }
        });
  }
  {
    absl::MutexLock lock(&outcome->mu);
    EXPECT_EQ(outcome->refused, 10);
    EXPECT_NE(refusal.message().find("pending waits"), std::string::npos)
        << refusal;
  }
  ASSERT_NO_FATAL_FAILURE(Ungate(*session));
  // Drained, every wait ends OK and gives its charge back (on whichever
  // thread ran the queue dry, maybe after this one's Ungate returned).
  auto all_ended = [outcome]() {
    absl::MutexLock lock(&outcome->mu);
    return outcome->ok == static_cast<int>(tenants::Tenant::kMaxPendingWaits);
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!all_ended() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(all_ended());
  absl::Notification again;
  session->SynchronizeQueue(sync, &synced, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    again.Notify();
  });
  ASSERT_TRUE(again.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

}  // namespace
}  // namespace gpustream::session
