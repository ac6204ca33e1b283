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

namespace gpustream {
namespace {

using grpc::StatusCode;

constexpr char kUnknownSession[] = "0123456789abcdef0123456789abcdef";

// alice and bob: plain tenants, carol: tight quotas, ops: an admin.
std::string Config(bool with_bob = true, uint64_t carol_inflight = 8) {
  auto tenant = [](const std::string& name, const std::string& extra) {
    return absl::StrCat("tenants { name: '", name, "' token_sha256: '",
                        tenants::Sha256Hex(name + "-token"), "' ", extra,
                        " }\n");
  };
  return absl::StrCat(
      "cpu_memory_bytes: 67108864\n", tenant("alice", ""),
      with_bob ? tenant("bob", "") : "",
      tenant("carol",
             absl::StrCat("quota { max_sessions: 1 max_queues: 2 "
                          "device_memory_bytes: 1048576 "
                          "max_staged_bytes: 12582912 max_inflight_commands: ",
                          carol_inflight, " }")),
      tenant("ops", "admin: true"));
}

class TenancyTest : public testing::BackendDaemonTest {
 protected:
  void SetUp() override {
    config_path_ = testing::TempPath(".txtpb");
    std::ofstream(config_path_) << Config();
    BackendDaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto channel = grpc::CreateChannel(daemon_->tcp_target(),
                                       grpc::InsecureChannelCredentials());
    stub_ = v1::GpuStream::NewStub(channel);
    admin_ = v1::Admin::NewStub(channel);
  }
  void TearDown() override { std::remove(config_path_.c_str()); }

  std::vector<std::string> DaemonArgs() const override {
    return {"--config=" + config_path_};
  }

  static std::unique_ptr<grpc::ClientContext> As(const std::string& tenant) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(20));
    ctx->AddMetadata("authorization", "Bearer " + tenant + "-token");
    return ctx;
  }

  v1::OpenSessionResponse Open(const std::string& tenant) {
    v1::OpenSessionResponse opened;
    grpc::Status s = stub_->OpenSession(As(tenant).get(), {}, &opened);
    EXPECT_TRUE(s.ok()) << tenant << ": " << s.error_message();
    return opened;
  }

  v1::TenantStats Stats(const std::string& tenant) {
    v1::GetStatsResponse stats;
    grpc::Status s = admin_->GetStats(As("ops").get(), {}, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const auto& t : stats.tenants()) {
      if (t.tenant() == tenant) return t;
    }
    ADD_FAILURE() << "no tenant " << tenant << " in " << stats.DebugString();
    return {};
  }

  // A flag and a queue of `s` stalled on it (client-minted ids 1).
  void Gate(const v1::OpenSessionResponse& s, const std::string& tenant) {
    v1::CreateFlagRequest flag;
    flag.set_session_id(s.session_id());
    flag.set_id(1);
    v1::CreateFlagResponse made;
    ASSERT_TRUE(stub_->CreateFlag(As(tenant).get(), flag, &made).ok());
    v1::WaitHostValueRequest wait;
    wait.set_session_id(s.session_id());
    wait.set_queue_id(s.default_queue_id());
    wait.set_flag_id(1);
    wait.set_value(1);
    v1::WaitHostValueResponse waiting;
    ASSERT_TRUE(stub_->WaitHostValue(As(tenant).get(), wait, &waiting).ok());
  }

  // Signals the gate's flag to `flag_value`.
  void Ungate(const v1::OpenSessionResponse& s, const std::string& tenant,
              uint64_t flag_value) {
    v1::SignalFlagRequest signal;
    signal.set_session_id(s.session_id());
    signal.set_flag_id(1);
    signal.set_value(flag_value);
    v1::SignalFlagResponse signalled;
    ASSERT_TRUE(stub_->SignalFlag(As(tenant).get(), signal, &signalled).ok());
  }

  // Carol allocates a 1 MiB buffer, gates her default queue, then writes
  // 1 MiB behind the gate up to `attempts` times, stopping at the first
  // refusal (left in `last`). Returns the writes accepted.
  int WritesBehindAGate(const v1::OpenSessionResponse& carol, int attempts,
                        grpc::Status* last) {
    v1::AllocateBufferRequest alloc;
    alloc.set_session_id(carol.session_id());
    alloc.set_id(7);
    alloc.set_size_bytes(1 << 20);
    v1::AllocateBufferResponse allocated;
    EXPECT_TRUE(
        stub_->AllocateBuffer(As("carol").get(), alloc, &allocated).ok());
    Gate(carol, "carol");
    if (HasFatalFailure()) return 0;
    v1::WriteBufferRequest write;
    write.set_session_id(carol.session_id());
    write.set_queue_id(carol.default_queue_id());
    write.set_buffer_id(7);
    write.set_data(std::string(1 << 20, 'c'));
    v1::WriteBufferResponse written;
    int accepted = 0;
    for (int i = 0; i < attempts; ++i) {
      *last = stub_->WriteBuffer(As("carol").get(), write, &written);
      if (!last->ok()) break;
      ++accepted;
    }
    return accepted;
  }

  std::string config_path_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

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
  std::ofstream(config_path_) << Config(/*with_bob=*/true,
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

// /proc/<pid>/status "Threads:".
int Threads(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "Threads:")) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST_P(TenancyTest, QueuesDestroyedWhileParkedAreBoundedAndCostNoThreads) {
  const v1::OpenSessionResponse alice = Open("alice");
  ASSERT_NO_FATAL_FAILURE(Gate(alice, "alice"));  // Flag 1, never signalled.
  const int threads_before = Threads(daemon_->pid());
  grpc::Status refused;
  int destroyed = 0;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    v1::CreateQueueRequest create;
    create.set_session_id(alice.session_id());
    v1::CreateQueueResponse created;
    refused = stub_->CreateQueue(As("alice").get(), create, &created);
    if (!refused.ok()) break;
    v1::WaitHostValueRequest wait;
    wait.set_session_id(alice.session_id());
    wait.set_queue_id(created.queue_id());
    wait.set_flag_id(1);
    wait.set_value(1);
    v1::WaitHostValueResponse waiting;
    ASSERT_TRUE(stub_->WaitHostValue(As("alice").get(), wait, &waiting).ok());
    // The destroy parks until the queue drains (never, here): give up on
    // the answer, not on the destroy. A deadline can pass before the
    // handler starts (slow sanitizer builds), so retry until the queue's id
    // is gone; a destroy that did start answers NOT_FOUND when repeated.
    v1::DestroyQueueRequest destroy;
    destroy.set_session_id(alice.session_id());
    destroy.set_queue_id(created.queue_id());
    v1::QueryQueueRequest query;
    query.set_session_id(alice.session_id());
    query.set_queue_id(created.queue_id());
    bool gone = false;
    for (int attempt = 0; attempt < 50 && !gone; ++attempt) {
      v1::DestroyQueueResponse answer;
      auto ctx = As("alice");
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(50));
      const StatusCode code =
          stub_->DestroyQueue(ctx.get(), destroy, &answer).error_code();
      ASSERT_TRUE(code == StatusCode::DEADLINE_EXCEEDED ||
                  (attempt > 0 && code == StatusCode::NOT_FOUND))
          << "destroy of a parked queue answered " << code;
      v1::QueryQueueResponse state;
      gone = stub_->QueryQueue(As("alice").get(), query, &state).error_code() ==
             StatusCode::NOT_FOUND;
    }
    ASSERT_TRUE(gone) << "queue " << created.queue_id() << " never destroyed";
    ++destroyed;
  }
  // 64 queues a session (the default one counts), draining ones included.
  EXPECT_EQ(destroyed, 63);
  EXPECT_EQ(refused.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(),
                                "63 of them destroyed and still draining"))
      << refused.error_message();
  // (The fake CUDA driver emulates each stream with a thread of its own, so
  // only the CPU backend's count says something about the daemon.)
  if (on_cpu()) {
    EXPECT_LE(Threads(daemon_->pid()), threads_before + 2)
        << "a parked queue holds no thread";
  }
  EXPECT_EQ(Stats("alice").queues(), 64u);
  // Closing the session releases them all.
  v1::CloseSessionRequest close;
  close.set_session_id(alice.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(As("alice").get(), close, &closed).ok());
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    const v1::TenantStats t = Stats("alice");
    return t.queues() == 0 && t.sessions() == 0 && t.inflight_commands() == 0;
  }));
}

// A host wait that times out leaves nothing behind: its watch on the event
// or queue and its pending-wait charge (8192 a tenant) go with the timeout,
// not when the awaited work completes (never, here).
TEST_P(TenancyTest, TimedOutSynchronizesLeaveNoWatchBehind) {
  const v1::OpenSessionResponse alice = Open("alice");
  ASSERT_NO_FATAL_FAILURE(Gate(alice, "alice"));  // Flag 1, never signalled.
  v1::CreateEventRequest create;
  create.set_session_id(alice.session_id());
  create.set_id(2);
  v1::CreateEventResponse created;
  ASSERT_TRUE(stub_->CreateEvent(As("alice").get(), create, &created).ok());
  v1::RecordEventRequest record;  // Behind the gate: never completes.
  record.set_session_id(alice.session_id());
  record.set_queue_id(alice.default_queue_id());
  record.set_event_id(2);
  v1::RecordEventResponse recorded;
  ASSERT_TRUE(stub_->RecordEvent(As("alice").get(), record, &recorded).ok());

  // More timed-out waits than the tenant may have pending at once, half on
  // the event and half on the gated queue, a window of them in flight.
  constexpr int kWaits = 9000;
  constexpr int kWindow = 256;
  struct Call {
    std::unique_ptr<grpc::ClientContext> ctx;
    grpc::Status status;
    v1::SynchronizeEventResponse event_resp;
    v1::SynchronizeQueueResponse queue_resp;
    std::unique_ptr<
        grpc::ClientAsyncResponseReader<v1::SynchronizeEventResponse>>
        event_call;
    std::unique_ptr<
        grpc::ClientAsyncResponseReader<v1::SynchronizeQueueResponse>>
        queue_call;
  };
  grpc::CompletionQueue cq;
  std::vector<Call> calls(kWaits);
  int started = 0, finished = 0, timed_out = 0;
  std::string first_other;  // The first answer that was not the timeout.
  auto start = [&](int i) {
    Call& c = calls[i];
    c.ctx = As("alice");
    if (i % 2 == 0) {
      v1::SynchronizeEventRequest req;
      req.set_session_id(alice.session_id());
      req.set_event_id(2);
      req.set_timeout_ms(1);
      c.event_call = stub_->AsyncSynchronizeEvent(c.ctx.get(), req, &cq);
      c.event_call->Finish(&c.event_resp, &c.status,
                           reinterpret_cast<void*>(intptr_t{i}));
    } else {
      v1::SynchronizeQueueRequest req;
      req.set_session_id(alice.session_id());
      req.set_queue_id(alice.default_queue_id());
      req.set_timeout_ms(1);
      c.queue_call = stub_->AsyncSynchronizeQueue(c.ctx.get(), req, &cq);
      c.queue_call->Finish(&c.queue_resp, &c.status,
                           reinterpret_cast<void*>(intptr_t{i}));
    }
  };
  while (started < std::min(kWindow, kWaits)) start(started++);
  void* tag;
  bool ok;
  while (finished < kWaits && cq.Next(&tag, &ok)) {
    Call& c = calls[reinterpret_cast<intptr_t>(tag)];
    ++finished;
    // The daemon's timeout, not the client's deadline.
    const bool daemon_timed_out =
        c.status.error_code() == StatusCode::DEADLINE_EXCEEDED &&
        absl::StrContains(c.status.error_message(), "timeout_ms");
    timed_out += daemon_timed_out;
    if (!daemon_timed_out && first_other.empty()) {
      first_other =
          absl::StrCat("wait ", reinterpret_cast<intptr_t>(tag), ": ",
                       c.status.error_code(), " ", c.status.error_message());
    }
    // Its memory goes now, not at the end: the readers first (they live in
    // the call's arena, which the context's destruction frees).
    c.event_call.reset();
    c.queue_call.reset();
    c.ctx.reset();
    if (started < kWaits) start(started++);
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(timed_out, kWaits) << first_other;
  // Still room to wait: each timeout gave its charge back.
  v1::SynchronizeEventRequest more;
  more.set_session_id(alice.session_id());
  more.set_event_id(2);
  more.set_timeout_ms(1);
  v1::SynchronizeEventResponse resp;
  const grpc::Status again =
      stub_->SynchronizeEvent(As("alice").get(), more, &resp);
  EXPECT_EQ(again.error_code(), StatusCode::DEADLINE_EXCEEDED)
      << again.error_message();
  // And the gate still opens: the record completes, a wait returns OK.
  Ungate(alice, "alice", 1);
  more.set_timeout_ms(20000);
  const grpc::Status done =
      stub_->SynchronizeEvent(As("alice").get(), more, &resp);
  EXPECT_TRUE(done.ok()) << done.error_message();
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
  std::ofstream(config_path_) << Config(/*with_bob=*/false);
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  v1::KeepAliveRequest keep;
  keep.set_session_id(bob.session_id());
  v1::KeepAliveResponse kept;
  // Bob's token no longer authenticates; his session ended.
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    return stub_->KeepAlive(As("bob").get(), keep, &kept).error_code() ==
           StatusCode::UNAUTHENTICATED;
  }));
  v1::ListSessionsResponse listed;
  ASSERT_TRUE(admin_->ListSessions(As("ops").get(), {}, &listed).ok());
  ASSERT_EQ(listed.sessions_size(), 1);
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
