// Tenants sharing one real gpustreamd, on every backend: no tenant can see
// or touch another's sessions, every quota refuses with RESOURCE_EXHAUSTED
// naming the limit and the use, admins list, kill and read stats, and
// SIGHUP reloads tenants.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/session/ops.h"
#include "server/tenants/tenant_registry.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"
#include "tests/daemon_process.h"
#include "tests/tenancy_fixture.h"

namespace gpustream {
namespace {

using grpc::StatusCode;
constexpr char kUnknownSession[] = "0123456789abcdef0123456789abcdef";

using testing::TenancyTest;

// Bob's objects (one id space per session).
constexpr uint64_t kBobQueue = 1, kBobEvent = 2, kBobFlag = 3, kBobBuffer = 4;

// Points every object id field of `msg` at Bob's object of that kind.
void PointAtBobsObjects(google::protobuf::Message& msg) {
  const auto* desc = msg.GetDescriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    const auto* field = desc->field(i);
    if (field->cpp_type() !=
            google::protobuf::FieldDescriptor::CPPTYPE_UINT64 ||
        field->is_repeated()) {
      continue;
    }
    static constexpr std::pair<const char*, uint64_t> kIds[] = {
        {"queue_id", kBobQueue},
        {"event_id", kBobEvent},
        {"flag_id", kBobFlag},
        {"buffer_id", kBobBuffer}};
    for (auto [suffix, id] : kIds) {
      if (absl::EndsWith(field->name(), suffix)) {
        msg.GetReflection()->SetUInt64(&msg, field, id);
      }
    }
  }
}

TEST_P(TenancyTest, AnotherTenantsSessionIsExactlyLikeOneThatDoesNotExist) {
  const v1::OpenSessionResponse bob = Open("bob");
  // Bob owns a queue, an event, a flag and a buffer.
  {
    v1::CreateQueueRequest q;
    q.set_session_id(bob.session_id());
    q.set_id(kBobQueue);
    v1::CreateQueueResponse qr;
    ASSERT_TRUE(stub_->CreateQueue(As("bob").get(), q, &qr).ok());
    v1::CreateEventRequest e;
    e.set_session_id(bob.session_id());
    e.set_id(kBobEvent);
    v1::CreateEventResponse er;
    ASSERT_TRUE(stub_->CreateEvent(As("bob").get(), e, &er).ok());
    v1::CreateFlagRequest f;
    f.set_session_id(bob.session_id());
    f.set_id(kBobFlag);
    v1::CreateFlagResponse fr;
    ASSERT_TRUE(stub_->CreateFlag(As("bob").get(), f, &fr).ok());
    v1::AllocateBufferRequest b;
    b.set_session_id(bob.session_id());
    b.set_id(kBobBuffer);
    b.set_size_bytes(4096);
    v1::AllocateBufferResponse br;
    ASSERT_TRUE(stub_->AllocateBuffer(As("bob").get(), b, &br).ok());
  }
  int probed = 0;
  // Every session operation, by Alice on Bob's session and on a session
  // that does not exist: the same code, the same words.
#define GPUSTREAM_PROBE(Name, field)                                      \
  {                                                                       \
    v1::Name##Request req;                                                \
    PointAtBobsObjects(req);                                              \
    v1::Name##Response resp;                                              \
    req.set_session_id(bob.session_id());                                 \
    grpc::Status foreign = stub_->Name(As("alice").get(), req, &resp);    \
    req.set_session_id(kUnknownSession);                                  \
    grpc::Status unknown = stub_->Name(As("alice").get(), req, &resp);    \
    EXPECT_EQ(foreign.error_code(), StatusCode::NOT_FOUND) << #Name;      \
    EXPECT_EQ(absl::StrReplaceAll(foreign.error_message(),                \
                                  {{bob.session_id(), kUnknownSession}}), \
              unknown.error_message())                                    \
        << #Name;                                                         \
    ++probed;                                                             \
  }
  GPUSTREAM_SESSION_OPS(GPUSTREAM_PROBE)
#undef GPUSTREAM_PROBE
  EXPECT_EQ(probed, 31);
  for (const char* op : {"KeepAlive", "CloseSession"}) {
    grpc::Status foreign, unknown;
    for (const std::string& id :
         {bob.session_id(), std::string(kUnknownSession)}) {
      grpc::Status& out = id == kUnknownSession ? unknown : foreign;
      if (std::string(op) == "KeepAlive") {
        v1::KeepAliveRequest req;
        req.set_session_id(id);
        v1::KeepAliveResponse resp;
        out = stub_->KeepAlive(As("alice").get(), req, &resp);
      } else {
        v1::CloseSessionRequest req;
        req.set_session_id(id);
        v1::CloseSessionResponse resp;
        out = stub_->CloseSession(As("alice").get(), req, &resp);
      }
    }
    EXPECT_EQ(foreign.error_code(), StatusCode::NOT_FOUND) << op;
    EXPECT_EQ(absl::StrReplaceAll(foreign.error_message(),
                                  {{bob.session_id(), kUnknownSession}}),
              unknown.error_message())
        << op;
  }
  // The streams too.
  {
    v1::WatchNotificationsRequest req;
    req.set_session_id(bob.session_id());
    auto ctx = As("alice");
    auto reader = stub_->WatchNotifications(ctx.get(), req);
    v1::Notification n;
    EXPECT_FALSE(reader->Read(&n));
    EXPECT_EQ(reader->Finish().error_code(), StatusCode::NOT_FOUND);
  }
  {
    auto ctx = As("alice");
    auto stream = stub_->Submit(ctx.get());
    v1::SubmitRequest req;
    req.set_session_id(bob.session_id());
    req.add_commands()->mutable_keep_alive();
    stream->Write(req);
    stream->WritesDone();
    v1::SubmitResponse resp;
    while (stream->Read(&resp)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), StatusCode::NOT_FOUND);
  }
  // Bob's objects are intact: his buffer still reads, his flag reads 0.
  v1::ReadFlagRequest read;
  read.set_session_id(bob.session_id());
  read.set_flag_id(kBobFlag);
  v1::ReadFlagResponse value;
  ASSERT_TRUE(stub_->ReadFlag(As("bob").get(), read, &value).ok());
  EXPECT_EQ(value.value(), 0u);
  EXPECT_EQ(Stats("bob").memory_bytes(), 4096u);
  EXPECT_EQ(Stats("bob").queues(), 2u);
}

TEST_P(TenancyTest, StagedBytesAreBoundedWhileAQueueIsStalled) {
  const v1::OpenSessionResponse carol = Open("carol");
  // 1 MiB writes behind the gate: 12 fit under max_staged_bytes (12 MiB),
  // but max_inflight_commands (8, the wait counts) stops them first.
  grpc::Status last;
  EXPECT_EQ(WritesBehindAGate(carol, 16, &last), 7);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(last.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(last.error_message(), "max_inflight_commands"))
      << last.error_message();
  EXPECT_TRUE(absl::StrContains(last.error_message(), "limit 8"))
      << last.error_message();
  const v1::TenantStats held = Stats("carol");
  EXPECT_EQ(held.staged_bytes(), 7u << 20);
  EXPECT_EQ(held.inflight_commands(), 8u);
  v1::ListSessionsResponse listed;
  ASSERT_TRUE(admin_->ListSessions(As("ops").get(), {}, &listed).ok());
  ASSERT_EQ(listed.sessions_size(), 1);
  EXPECT_EQ(listed.sessions(0).inflight_commands(), 8u);
  EXPECT_EQ(listed.sessions(0).memory_bytes(), 1u << 20);

  // Released, the writes run and every count returns to zero.
  ASSERT_NO_FATAL_FAILURE(Ungate(carol, "carol", 1));
  v1::SynchronizeQueueRequest sync;
  sync.set_session_id(carol.session_id());
  sync.set_queue_id(carol.default_queue_id());
  v1::SynchronizeQueueResponse synced;
  ASSERT_TRUE(stub_->SynchronizeQueue(As("carol").get(), sync, &synced).ok());
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(5), [&] {
    const v1::TenantStats t = Stats("carol");
    return t.staged_bytes() == 0 && t.inflight_commands() == 0;
  }));
  EXPECT_GE(Stats("carol").commands_completed(), 8u);
}

TEST_P(TenancyTest, StagingQuotaRefusesNamingItsLimit) {
  // carol with a generous in-flight quota: staging is the bound that bites.
  std::ofstream(config_path_)
      << testing::TenancyConfig(/*with_bob=*/true,
                                /*carol_inflight=*/1000);
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    return Stats("carol").quota().max_inflight_commands() == 1000;
  }));
  const v1::OpenSessionResponse carol = Open("carol");
  grpc::Status last;
  EXPECT_EQ(WritesBehindAGate(carol, 32, &last), 12);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(last.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(last.error_message(),
                                "max_staged_bytes exhausted: limit 12582912"))
      << last.error_message();
  EXPECT_TRUE(absl::StrContains(last.error_message(), "staged 12582912"))
      << last.error_message();
  ASSERT_NO_FATAL_FAILURE(Ungate(carol, "carol", 1));
  ASSERT_TRUE(testing::PollUntil(
      absl::Seconds(5), [&] { return Stats("carol").staged_bytes() == 0; }));
}

TEST_P(TenancyTest, SessionQueueAndMemoryQuotas) {
  const v1::OpenSessionResponse carol = Open("carol");
  v1::OpenSessionResponse second;
  grpc::Status s = stub_->OpenSession(As("carol").get(), {}, &second);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "quota.max_sessions"))
      << s.error_message();
  v1::CreateQueueRequest queue;
  queue.set_session_id(carol.session_id());
  v1::CreateQueueResponse created;
  ASSERT_TRUE(stub_->CreateQueue(As("carol").get(), queue, &created).ok());
  s = stub_->CreateQueue(As("carol").get(), queue, &created);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "quota.max_queues"))
      << s.error_message();
  v1::AllocateBufferRequest alloc;
  alloc.set_session_id(carol.session_id());
  alloc.set_size_bytes((1 << 20) + 1);
  v1::AllocateBufferResponse allocated;
  s = stub_->AllocateBuffer(As("carol").get(), alloc, &allocated);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "device_memory_bytes"))
      << s.error_message();
  // Others are not limited by carol's quota.
  const v1::OpenSessionResponse alice = Open("alice");
  alloc.set_session_id(alice.session_id());
  EXPECT_TRUE(stub_->AllocateBuffer(As("alice").get(), alloc, &allocated).ok());
}

TEST_P(TenancyTest, AdminListsKillsAndReadsStats) {
  const v1::OpenSessionResponse alice = Open("alice");
  v1::ListSessionsResponse listed;
  ASSERT_TRUE(admin_->ListSessions(As("ops").get(), {}, &listed).ok());
  ASSERT_EQ(listed.sessions_size(), 1);
  const v1::SessionInfo& info = listed.sessions(0);
  EXPECT_EQ(info.tenant(), "alice");
  EXPECT_EQ(info.queues(), 1u);
  EXPECT_FALSE(absl::StrContains(listed.DebugString(), alice.session_id()));
  // Not for tenants that are no admins.
  EXPECT_EQ(admin_->ListSessions(As("alice").get(), {}, &listed).error_code(),
            StatusCode::PERMISSION_DENIED);

  v1::KillSessionRequest kill;
  kill.set_public_id(info.public_id());
  v1::KillSessionResponse killed;
  ASSERT_TRUE(admin_->KillSession(As("ops").get(), kill, &killed).ok());
  v1::KeepAliveRequest keep;
  keep.set_session_id(alice.session_id());
  v1::KeepAliveResponse kept;
  grpc::Status after = stub_->KeepAlive(As("alice").get(), keep, &kept);
  EXPECT_EQ(after.error_code(), StatusCode::ABORTED);
  EXPECT_TRUE(absl::StrContains(after.error_message(), "administrator"))
      << after.error_message();
  EXPECT_EQ(admin_->KillSession(As("ops").get(), kill, &killed).error_code(),
            StatusCode::NOT_FOUND);
  ASSERT_TRUE(testing::PollUntil(
      absl::Seconds(10), [&] { return Stats("alice").sessions() == 0; }));
  v1::GetStatsResponse stats;
  ASSERT_TRUE(admin_->GetStats(As("ops").get(), {}, &stats).ok());
  EXPECT_EQ(stats.tenants_size(), 5);  // With local-operator.
  ASSERT_EQ(stats.devices_size(), 1);
  EXPECT_GT(stats.devices(0).memory_total_bytes(), 0u);
  EXPECT_TRUE(absl::StrContains(
      daemon_->log(),
      absl::StrCat("event=admin_kill_session tenant=ops session=",
                   kill.public_id(), " code=OK")))
      << daemon_->log();
}

TEST_P(TenancyTest, SighupReloadsTenantsAndEndsRemovedOnes) {
  const v1::OpenSessionResponse bob = Open("bob");
  const v1::OpenSessionResponse alice = Open("alice");
  std::ofstream(config_path_) << testing::TenancyConfig(/*with_bob=*/false);
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  v1::KeepAliveRequest keep;
  keep.set_session_id(bob.session_id());
  v1::KeepAliveResponse kept;
  // Bob's token no longer authenticates; his session ended.
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    return stub_->KeepAlive(As("bob").get(), keep, &kept).error_code() ==
           StatusCode::UNAUTHENTICATED;
  }));
  // His session's teardown may still be running when his token stops
  // working: wait for it to leave the list.
  v1::ListSessionsResponse listed;
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    listed.Clear();
    return admin_->ListSessions(As("ops").get(), {}, &listed).ok() &&
           listed.sessions_size() == 1;
  })) << listed.DebugString();
  EXPECT_EQ(listed.sessions(0).tenant(), "alice");
  keep.set_session_id(alice.session_id());
  EXPECT_TRUE(stub_->KeepAlive(As("alice").get(), keep, &kept).ok());
  // A config that does not parse keeps the tenants served now, and the log
  // says where it is wrong.
  std::ofstream(config_path_) << "tenants {\n  name: \"x\"\n  admn: true }";
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    return absl::StrContains(daemon_->log(), "event=tenants_not_reloaded");
  }));
  EXPECT_TRUE(absl::StrContains(
      daemon_->log(),
      absl::StrCat("--config ", config_path_,
                   ": line 3, column 7: Message type "
                   "\\\"gpustream.v1.Tenant\\\" has no field named "
                   "\\\"admn\\\".")))
      << daemon_->log();
  EXPECT_TRUE(stub_->KeepAlive(As("alice").get(), keep, &kept).ok());
  EXPECT_FALSE(absl::StrContains(daemon_->log(), "alice-token"))
      << "tokens are never logged";
}

INSTANTIATE_TEST_SUITE_P(
    Backends, TenancyTest,
    ::testing::ValuesIn(conformance::BackendsAndSharingModesUnderTest()),
    testing::BackendName);

}  // namespace
}  // namespace gpustream
