// End-to-end tests: gpustreamd as a real process on every backend, used over
// a unix socket and over TCP on 127.0.0.1 through the C++ client library and
// the raw gRPC service.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/gpustream.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/tenants/tenant_registry.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using client::Client;
using testing::DaemonProcess;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Whether the daemon process still runs (has not exited or been reaped).
bool Running(const DaemonProcess& daemon) {
  return waitpid(daemon.pid(), nullptr, WNOHANG) == 0;
}

std::string FloatBytes(std::initializer_list<float> values) {
  return std::string(reinterpret_cast<const char*>(values.begin()),
                     values.size() * sizeof(float));
}

// ---------------------------------------------------------------------------
// Every backend, over both transports.

// The backend under test, and the transport: true for TCP, false for the
// unix socket.
using BackendAndTransport = std::tuple<std::string, bool>;

class EndToEndTest : public ::testing::TestWithParam<BackendAndTransport> {
 protected:
  void SetUp() override {
    if (absl::Status s = testing::BackendAvailable(backend()); !s.ok()) {
      GTEST_SKIP() << backend() << " is unavailable here: " << s;
    }
    auto daemon =
        testing::StartDaemonOn(backend(), {"--cpu_memory_bytes=67108864"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    stub_ = v1::GpuStream::NewStub(
        grpc::CreateChannel(target(), grpc::InsecureChannelCredentials()));
  }

  const std::string& backend() const { return std::get<0>(GetParam()); }
  // The backend's name as the daemon reports it.
  std::string reported_backend() const {
    return testing::IsCuda(backend())  ? "cuda"
           : testing::IsHip(backend()) ? "hip"
                                       : backend();
  }
  std::string target() const {
    return std::get<1>(GetParam()) ? daemon_->tcp_target()
                                   : daemon_->unix_target();
  }

  // One unary RPC, bounded by 20 s.
  template <typename Req, typename Resp>
  grpc::Status Unary(grpc::Status (v1::GpuStream::Stub::*rpc)(
                         grpc::ClientContext*, const Req&, Resp*),
                     const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    return (stub_.get()->*rpc)(&ctx, req, resp);
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
};

TEST_P(EndToEndTest, VectorAddAcrossQueuesReadsBackSums) {
  auto c = Client::Connect(target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session({.client_name = "e2e"});
  ASSERT_TRUE(session.ok()) << session.status();
  client::Session& s = **session;
  constexpr uint64_t n = 10000;
  std::vector<float> a(n), b(n);
  for (uint64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i);
  }
  auto da = s.allocate(n * 4), db = s.allocate(n * 4), dc = s.allocate(n * 4);
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  client::Queue upload = s.create_queue();
  upload.write(*da, a);
  upload.write(*db, b);
  client::Event uploaded = upload.record_event();
  client::Queue& compute = s.default_queue();
  compute.wait_for(uploaded);
  compute.launch("samples", "vector_add_f32", {(n + 127) / 128}, {128},
                 {*da, *db, *dc, n});
  ASSERT_TRUE(compute.synchronize().ok());
  auto c_host = compute.read<float>(*dc, n);
  ASSERT_TRUE(c_host.ok()) << c_host.status();
  for (uint64_t i = 0; i < n; i += 997) {
    EXPECT_EQ((*c_host)[i], 1.5f * static_cast<float>(i)) << i;
  }
  EXPECT_TRUE(s.close().ok());
}

TEST_P(EndToEndTest, HealthAndReflectionAreServed) {
  auto channel =
      grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  auto reflection =
      grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext rctx;
  rctx.set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
  auto stream = reflection->ServerReflectionInfo(&rctx);
  grpc::reflection::v1alpha::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  std::vector<std::string> services;
  for (const auto& s : listed.list_services_response().service()) {
    services.push_back(s.name());
  }
  EXPECT_NE(
      std::find(services.begin(), services.end(), "gpustream.v1.GpuStream"),
      services.end());
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_P(EndToEndTest, SessionsAreIsolated) {
  auto c = Client::Connect(target());
  ASSERT_TRUE(c.ok());
  auto alice = c->open_session(), mallory = c->open_session();
  ASSERT_TRUE(alice.ok() && mallory.ok());
  auto secret = (*alice)->allocate(16);
  ASSERT_TRUE(secret.ok());
  (*alice)->default_queue().fill(*secret, 0, 16, 0x5ec7e7);
  const absl::Status filled = (*alice)->default_queue().synchronize();
  ASSERT_TRUE(filled.ok()) << filled;
  // Mallory names Alice's buffer id on the wire (the client library would
  // refuse a handle of another session): it does not exist in her session.
  v1::ReadBufferRequest steal;
  steal.set_session_id((*mallory)->id());
  steal.set_queue_id((*mallory)->default_queue().id());
  steal.set_buffer_id(secret->id());
  steal.set_size(16);
  v1::ReadBufferResponse stolen;
  const grpc::Status refused =
      Unary(&v1::GpuStream::Stub::ReadBuffer, steal, &stolen);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND)
      << refused.error_message();
  EXPECT_TRUE(stolen.data().empty());
  // Alice's data is untouched and her session still works.
  auto mine = (*alice)->default_queue().read<uint32_t>(*secret, 4);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ((*mine)[3], 0x5ec7e7u);
}

// Every v1 operation as a unary RPC, each with its documented effect:
// y = 3x + y on a pinned buffer between two timed events, copies ordered
// by an event and a queue wait, a gated add, a queue-written flag, a host
// function's notification, and every object destroyed.
TEST_P(EndToEndTest, EveryUnaryOperationDoesWhatItSays) {
  using Stub = v1::GpuStream::Stub;
  v1::GetVersionRequest version_req;
  version_req.set_min_version(1);
  version_req.set_max_version(1);
  v1::GetVersionResponse version;
  ASSERT_TRUE(Unary(&Stub::GetVersion, version_req, &version).ok());
  EXPECT_EQ(version.version(), 1u);
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(
      Unary(&Stub::GetServerInfo, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.protocol_version(), 1u);
  EXPECT_THAT(info.backends(), ElementsAre(reported_backend()));
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(
      Unary(&Stub::ListDevices, v1::ListDevicesRequest(), &devices).ok());
  ASSERT_GT(devices.devices_size(), 0);
  const v1::Device& device = devices.devices(0);
  EXPECT_EQ(device.backend(), reported_backend());
  EXPECT_GT(device.total_memory_bytes(), 0u);
  // ROCm 5.x's runtime aborts the process on a kernel fault.
  EXPECT_EQ(device.faults_recoverable(), !testing::IsHip(backend()));
  EXPECT_EQ(device.wait_value_mode(),
            testing::IsHip(backend()) ? "daemon" : "native");
  v1::ListModulesResponse modules;
  ASSERT_TRUE(
      Unary(&Stub::ListModules, v1::ListModulesRequest(), &modules).ok());
  ASSERT_GT(modules.modules_size(), 0);
  EXPECT_EQ(modules.modules(0).name(), "samples");
  EXPECT_EQ(modules.modules(0).kernels_size(), 9);

  v1::OpenSessionRequest open;
  open.set_client_name("every-op");
  v1::OpenSessionResponse session;
  ASSERT_TRUE(Unary(&Stub::OpenSession, open, &session).ok());
  const std::string& sid = session.session_id();
  const uint64_t dq = session.default_queue_id();
  EXPECT_GT(session.lease_seconds(), 0u);
  v1::KeepAliveRequest keep;
  keep.set_session_id(sid);
  v1::KeepAliveResponse kept;
  ASSERT_TRUE(Unary(&Stub::KeepAlive, keep, &kept).ok());
  EXPECT_GT(kept.lease_seconds(), 0u);

  // Objects: two queues (one client-minted, one server-assigned at the
  // highest priority), two timed events, two flags, three buffers.
  v1::CreateQueueRequest cq;
  cq.set_session_id(sid);
  cq.set_id(100);
  v1::CreateQueueResponse queue;
  ASSERT_TRUE(Unary(&Stub::CreateQueue, cq, &queue).ok());
  EXPECT_EQ(queue.queue_id(), 100u);
  cq.set_id(0);
  cq.set_priority(device.priority_greatest());
  v1::CreateQueueResponse urgent;
  ASSERT_TRUE(Unary(&Stub::CreateQueue, cq, &urgent).ok());
  EXPECT_GE(urgent.queue_id(), uint64_t{1} << 63);
  for (uint64_t id : {300, 301}) {
    v1::CreateEventRequest ce;
    ce.set_session_id(sid);
    ce.set_id(id);
    ce.set_enable_timing(true);
    v1::CreateEventResponse created;
    ASSERT_TRUE(Unary(&Stub::CreateEvent, ce, &created).ok()) << id;
  }
  for (uint64_t id : {400, 401}) {
    v1::CreateFlagRequest cf;
    cf.set_session_id(sid);
    cf.set_id(id);
    v1::CreateFlagResponse created;
    ASSERT_TRUE(Unary(&Stub::CreateFlag, cf, &created).ok()) << id;
  }
  for (auto [id, size, kind] :
       {std::tuple{200, 32, v1::MEMORY_KIND_DEVICE},
        std::tuple{201, 16, v1::MEMORY_KIND_HOST_PINNED},
        std::tuple{202, 8, v1::MEMORY_KIND_DEVICE}}) {
    v1::AllocateBufferRequest ab;
    ab.set_session_id(sid);
    ab.set_id(id);
    ab.set_size_bytes(size);
    ab.set_kind(kind);
    v1::AllocateBufferResponse allocated;
    ASSERT_TRUE(Unary(&Stub::AllocateBuffer, ab, &allocated).ok()) << id;
  }

  // Queue 100: x = {1, 2, 3, 4} into buffer 200, y = 2.0f four times into
  // pinned buffer 201, then y = 3x + y between events 300 and 301.
  v1::WriteBufferRequest wb;
  wb.set_session_id(sid);
  wb.set_queue_id(100);
  wb.set_buffer_id(200);
  wb.set_data(FloatBytes({1, 2, 3, 4}));
  v1::WriteBufferResponse written;
  ASSERT_TRUE(Unary(&Stub::WriteBuffer, wb, &written).ok());
  v1::FillBufferRequest fb;
  fb.set_session_id(sid);
  fb.set_queue_id(100);
  fb.set_buffer_id(201);
  fb.set_size(16);
  const float two = 2.0f;
  uint32_t two_bits;
  std::memcpy(&two_bits, &two, 4);
  fb.set_value(two_bits);
  v1::FillBufferResponse filled;
  ASSERT_TRUE(Unary(&Stub::FillBuffer, fb, &filled).ok());
  v1::RecordEventRequest re;
  re.set_session_id(sid);
  re.set_queue_id(100);
  re.set_event_id(300);
  v1::RecordEventResponse recorded;
  ASSERT_TRUE(Unary(&Stub::RecordEvent, re, &recorded).ok());
  v1::LaunchKernelRequest saxpy;
  saxpy.set_session_id(sid);
  saxpy.set_queue_id(100);
  saxpy.set_module("samples");
  saxpy.set_kernel("saxpy_f32");
  saxpy.mutable_grid()->set_x(1);
  saxpy.mutable_block()->set_x(4);
  saxpy.add_args()->set_f32(3.0f);
  saxpy.add_args()->mutable_buffer()->set_buffer_id(200);
  saxpy.add_args()->mutable_buffer()->set_buffer_id(201);
  saxpy.add_args()->set_u64(4);
  v1::LaunchKernelResponse launched;
  ASSERT_TRUE(Unary(&Stub::LaunchKernel, saxpy, &launched).ok());
  re.set_event_id(301);
  ASSERT_TRUE(Unary(&Stub::RecordEvent, re, &recorded).ok());

  // The default queue copies y behind x: after event 301 and queue 100.
  v1::WaitEventRequest we;
  we.set_session_id(sid);
  we.set_queue_id(dq);
  we.set_event_id(301);
  v1::WaitEventResponse waited_event;
  ASSERT_TRUE(Unary(&Stub::WaitEvent, we, &waited_event).ok());
  v1::WaitQueueRequest wq;
  wq.set_session_id(sid);
  wq.set_queue_id(dq);
  wq.set_other_queue_id(100);
  v1::WaitQueueResponse waited_queue;
  ASSERT_TRUE(Unary(&Stub::WaitQueue, wq, &waited_queue).ok());
  v1::CopyBufferRequest cb;
  cb.set_session_id(sid);
  cb.set_queue_id(dq);
  cb.set_src_buffer_id(201);
  cb.set_dst_buffer_id(200);
  cb.set_dst_offset(16);
  cb.set_size(16);
  v1::CopyBufferResponse copied;
  ASSERT_TRUE(Unary(&Stub::CopyBuffer, cb, &copied).ok());
  v1::ReadBufferRequest rb;
  rb.set_session_id(sid);
  rb.set_queue_id(dq);
  rb.set_buffer_id(200);
  rb.set_offset(16);
  rb.set_size(16);
  v1::ReadBufferResponse read;
  ASSERT_TRUE(Unary(&Stub::ReadBuffer, rb, &read).ok());
  EXPECT_EQ(read.data(), FloatBytes({5, 8, 11, 14}));
  v1::SynchronizeEventRequest se;
  se.set_session_id(sid);
  se.set_event_id(301);
  se.set_timeout_ms(10000);
  v1::SynchronizeEventResponse synced_event;
  ASSERT_TRUE(Unary(&Stub::SynchronizeEvent, se, &synced_event).ok());
  v1::QueryEventRequest qe;
  qe.set_session_id(sid);
  qe.set_event_id(301);
  v1::QueryEventResponse queried_event;
  ASSERT_TRUE(Unary(&Stub::QueryEvent, qe, &queried_event).ok());
  EXPECT_TRUE(queried_event.complete());
  v1::EventElapsedTimeRequest et;
  et.set_session_id(sid);
  et.set_start_event_id(300);
  et.set_end_event_id(301);
  v1::EventElapsedTimeResponse elapsed;
  ASSERT_TRUE(Unary(&Stub::EventElapsedTime, et, &elapsed).ok());
  EXPECT_GE(elapsed.milliseconds(), 0.0f);

  // Flags: queue 100 adds 7 once flag 400 reaches 1, then stores 99 into
  // flag 401, which the host waits for.
  v1::WaitHostValueRequest wh;
  wh.set_session_id(sid);
  wh.set_queue_id(100);
  wh.set_flag_id(400);
  wh.set_value(1);
  wh.set_condition(v1::WAIT_CONDITION_GREATER_EQUAL);
  v1::WaitHostValueResponse gated;
  ASSERT_TRUE(Unary(&Stub::WaitHostValue, wh, &gated).ok());
  v1::LaunchKernelRequest add;
  add.set_session_id(sid);
  add.set_queue_id(100);
  add.set_module("samples");
  add.set_kernel("add_u64");
  add.mutable_grid()->set_x(1);
  add.mutable_block()->set_x(1);
  add.add_args()->mutable_buffer()->set_buffer_id(202);
  add.add_args()->set_u64(7);
  ASSERT_TRUE(Unary(&Stub::LaunchKernel, add, &launched).ok());
  v1::WriteFlagRequest wf;
  wf.set_session_id(sid);
  wf.set_queue_id(100);
  wf.set_flag_id(401);
  wf.set_value(99);
  v1::WriteFlagResponse wrote_flag;
  ASSERT_TRUE(Unary(&Stub::WriteFlag, wf, &wrote_flag).ok());
  v1::QueryQueueRequest qq;
  qq.set_session_id(sid);
  qq.set_queue_id(100);
  v1::QueryQueueResponse queried_queue;
  ASSERT_TRUE(Unary(&Stub::QueryQueue, qq, &queried_queue).ok());
  EXPECT_FALSE(queried_queue.idle());  // Held by flag 400.
  v1::SignalFlagRequest sf;
  sf.set_session_id(sid);
  sf.set_flag_id(400);
  sf.set_value(1);
  v1::SignalFlagResponse signaled;
  ASSERT_TRUE(Unary(&Stub::SignalFlag, sf, &signaled).ok());
  v1::ReadFlagRequest rf;
  rf.set_session_id(sid);
  rf.set_flag_id(400);
  v1::ReadFlagResponse flag_value;
  ASSERT_TRUE(Unary(&Stub::ReadFlag, rf, &flag_value).ok());
  EXPECT_EQ(flag_value.value(), 1u);
  v1::WaitFlagRequest wfl;
  wfl.set_session_id(sid);
  wfl.set_flag_id(401);
  wfl.set_value(99);
  wfl.set_condition(v1::WAIT_CONDITION_EQUAL);
  wfl.set_timeout_ms(10000);
  v1::WaitFlagResponse flag_seen;
  ASSERT_TRUE(Unary(&Stub::WaitFlag, wfl, &flag_seen).ok());
  EXPECT_EQ(flag_seen.value(), 99u);

  // A host function reached is announced on the notification stream (a
  // watcher attaching later gets the backlog).
  v1::EnqueueHostFuncRequest hf;
  hf.set_session_id(sid);
  hf.set_queue_id(100);
  hf.set_callback_id(55);
  v1::EnqueueHostFuncResponse enqueued;
  ASSERT_TRUE(Unary(&Stub::EnqueueHostFunc, hf, &enqueued).ok());
  v1::SynchronizeQueueRequest sq;
  sq.set_session_id(sid);
  sq.set_queue_id(100);
  sq.set_timeout_ms(10000);
  v1::SynchronizeQueueResponse synced;
  ASSERT_TRUE(Unary(&Stub::SynchronizeQueue, sq, &synced).ok());
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::WatchNotificationsRequest watch;
    watch.set_session_id(sid);
    auto notifications = stub_->WatchNotifications(&ctx, watch);
    v1::Notification note;
    ASSERT_TRUE(notifications->Read(&note));
    EXPECT_EQ(note.host_func_reached().queue_id(), 100u);
    EXPECT_EQ(note.host_func_reached().callback_id(), 55u);
    ctx.TryCancel();
    (void)notifications->Finish();
  }
  ASSERT_TRUE(Unary(&Stub::QueryQueue, qq, &queried_queue).ok());
  EXPECT_TRUE(queried_queue.idle());
  EXPECT_EQ(queried_queue.error().code(), 0);
  rb.set_buffer_id(202);
  rb.set_offset(0);
  rb.set_size(8);
  ASSERT_TRUE(Unary(&Stub::ReadBuffer, rb, &read).ok());
  uint64_t sum = 0;
  ASSERT_EQ(read.data().size(), 8u);
  std::memcpy(&sum, read.data().data(), 8);
  EXPECT_EQ(sum, 7u);

  // Every object goes, then the session.
  for (uint64_t id : {300, 301}) {
    v1::DestroyEventRequest de;
    de.set_session_id(sid);
    de.set_event_id(id);
    v1::DestroyEventResponse destroyed;
    EXPECT_TRUE(Unary(&Stub::DestroyEvent, de, &destroyed).ok()) << id;
  }
  for (uint64_t id : {400, 401}) {
    v1::DestroyFlagRequest df;
    df.set_session_id(sid);
    df.set_flag_id(id);
    v1::DestroyFlagResponse destroyed;
    EXPECT_TRUE(Unary(&Stub::DestroyFlag, df, &destroyed).ok()) << id;
  }
  for (uint64_t id : {200, 201, 202}) {
    v1::FreeBufferRequest fr;
    fr.set_session_id(sid);
    fr.set_buffer_id(id);
    v1::FreeBufferResponse freed;
    EXPECT_TRUE(Unary(&Stub::FreeBuffer, fr, &freed).ok()) << id;
  }
  for (uint64_t id : {uint64_t{100}, urgent.queue_id()}) {
    v1::DestroyQueueRequest dq_req;
    dq_req.set_session_id(sid);
    dq_req.set_queue_id(id);
    v1::DestroyQueueResponse destroyed;
    EXPECT_TRUE(Unary(&Stub::DestroyQueue, dq_req, &destroyed).ok()) << id;
  }
  v1::CloseSessionRequest close;
  close.set_session_id(sid);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(Unary(&Stub::CloseSession, close, &closed).ok());
  EXPECT_EQ(Unary(&Stub::KeepAlive, keep, &kept).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

INSTANTIATE_TEST_SUITE_P(
    BackendsAndTransports, EndToEndTest,
    ::testing::Combine(::testing::ValuesIn(conformance::BackendsUnderTest()),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<BackendAndTransport>& info) {
      return absl::StrCat(std::get<0>(info.param),
                          std::get<1>(info.param) ? "_Tcp" : "_Unix");
    });

// ---------------------------------------------------------------------------
// Every backend, over the unix socket.

class DeviceWorkTest : public testing::BackendDaemonTest {
 protected:
  // Waits up to `timeout` for `done`; if it does not come, kills the daemon
  // (so that every call blocked on it returns, and the test ends) and says
  // so.
  bool WaitOrKillDaemon(absl::Notification& done, absl::Duration timeout) {
    if (done.WaitForNotificationWithTimeout(timeout)) return true;
    ADD_FAILURE() << "no answer within " << timeout
                  << "; killing the daemon. Its log:\n"
                  << daemon_->log();
    daemon_->Stop(SIGKILL);
    done.WaitForNotification();
    return false;
  }
};

TEST_P(DeviceWorkTest, KernelFaultIsContainedAndTheDaemonServesOn) {
  auto c = Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto faulty = c->open_session({.client_name = "faulty"});
  auto bystander = c->open_session({.client_name = "bystander"});
  ASSERT_TRUE(faulty.ok() && bystander.ok());
  // The bystander has data on the device when the fault comes.
  auto kept = (*bystander)->allocate(16);
  ASSERT_TRUE(kept.ok()) << kept.status();
  (*bystander)->default_queue().fill(*kept, 0, 16, 0x5afe);
  ASSERT_TRUE((*bystander)->default_queue().synchronize().ok());

  client::Queue& q = (*faulty)->default_queue();
  // The samples' trap faults on every backend (an out-of-bounds write need
  // not fault on a GPU: it may land in the same page as other memory).
  q.launch("samples", "trap", {1}, {1}, {});
  const absl::Status fault = q.synchronize(absl::Seconds(10));
  if (on_hip()) {
    // ROCm 5.x's runtime aborts the process on a kernel fault (ListDevices
    // says faults_recoverable false): every connection drops, and the
    // daemon is gone for its supervisor (systemd, Kubernetes) to restart.
    EXPECT_EQ(fault.code(), absl::StatusCode::kUnavailable) << fault;
    EXPECT_EQ(testing::WaitForExit(daemon_->pid(), absl::Seconds(20)),
              128 + SIGABRT)
        << daemon_->log();
    EXPECT_FALSE((*bystander)->allocate(8).ok());
    return;
  }
  if (on_cuda()) {
    // The context is lost: the faulting session ends with ABORTED naming
    // the cause, and so does every other session on the device.
    EXPECT_EQ(fault.code(), absl::StatusCode::kAborted) << fault;
    EXPECT_THAT(std::string(fault.message()), HasSubstr("device 0 failed"));
    EXPECT_THAT(std::string(fault.message()),
                HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
    // The operator's log names the session whose kernel was running (and
    // its tenant), not the bystander whose work had completed.
    std::string failed_line;
    EXPECT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
      for (absl::string_view line : absl::StrSplit(daemon_->log(), '\n')) {
        if (absl::StrContains(line, "event=device_failed")) {
          failed_line = std::string(line);
          return true;
        }
      }
      return false;
    })) << daemon_->log();
    EXPECT_THAT(failed_line,
                HasSubstr(absl::StrCat("session ", (*faulty)->public_id(),
                                       " (tenant '")))
        << failed_line;
    EXPECT_THAT(failed_line, HasSubstr("sessions_with_kernels=1"))
        << failed_line;
    EXPECT_THAT(failed_line, Not(HasSubstr((*bystander)->public_id())))
        << failed_line;
    // Later calls of both sessions say the device failed, or, once the
    // daemon stops because the reset did not clear the fault (below), that
    // it is shutting down.
    auto ended = [](const absl::Status& s) {
      return (s.code() == absl::StatusCode::kAborted &&
              absl::StrContains(s.message(), "device 0 failed")) ||
             (s.code() == absl::StatusCode::kUnavailable &&
              absl::StrContains(s.message(), "shutting down"));
    };
    const absl::Status after = (*faulty)->allocate(8).status();
    EXPECT_TRUE(ended(after)) << after << "\nDaemon log:\n" << daemon_->log();
    absl::Status bystanding;
    EXPECT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
      bystanding = (*bystander)->allocate(8).status();
      return !bystanding.ok();
    })) << "the bystander's session outlived the device's context";
    EXPECT_TRUE(ended(bystanding)) << bystanding << "\nDaemon log:\n"
                                   << daemon_->log();
    // The fake driver, like a real one may, keeps the fault through the
    // reset: the daemon proves the device, finds it still failed, drains and
    // exits 3 for its supervisor to restart it. (A real GPU whose reset
    // clears the trap serves on, checked below.)
    const int exit_status = testing::WaitForExit(
        daemon_->pid(), absl::Seconds(backend() == "cuda_fake" ? 20 : 5));
    if (backend() == "cuda_fake" || exit_status != -1) {
      EXPECT_EQ(exit_status, 3) << daemon_->log();
      EXPECT_THAT(daemon_->log(), HasSubstr("device_unrecoverable"));
      EXPECT_THAT(daemon_->log(), HasSubstr("still fails after a reset"));
      return;
    }
  } else {
    // The queue's error is sticky and names the kernel; nobody else's work
    // is touched.
    EXPECT_EQ(fault.code(), absl::StatusCode::kInternal) << fault;
    EXPECT_THAT(std::string(fault.message()), HasSubstr("trap"));
    q.launch("samples", "noop", {1}, {1}, {});
    const absl::Status sticky = q.synchronize(absl::Seconds(10));
    EXPECT_EQ(sticky.code(), absl::StatusCode::kFailedPrecondition) << sticky;
    auto data = (*bystander)->default_queue().read<uint32_t>(*kept, 4);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ((*data)[3], 0x5afeu);
  }
  // The daemon serves on: a new session works.
  EXPECT_TRUE(Running(*daemon_)) << daemon_->log();
  std::string last;
  const bool served = testing::PollUntil(absl::Seconds(10), [&] {
    auto fresh = c->open_session({.client_name = "fresh"});
    if (!fresh.ok()) {
      last = fresh.status().ToString();
      return false;
    }
    auto counter = (*fresh)->allocate(8);
    if (!counter.ok()) {
      last = counter.status().ToString();
      return false;
    }
    client::Queue& fq = (*fresh)->default_queue();
    fq.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{42}});
    auto value = fq.read<uint64_t>(*counter, 1);
    if (!value.ok()) {
      last = value.status().ToString();
      return false;
    }
    last = absl::StrCat("read ", (*value)[0]);
    return (*value)[0] == 42;
  });
  EXPECT_TRUE(served) << last << "\nDaemon log:\n" << daemon_->log();
  EXPECT_TRUE(Running(*daemon_)) << daemon_->log();
}

TEST_P(DeviceWorkTest, ClosingSessionCancelsSynchronizesBehindEqualWaits) {
  auto c = Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  auto counter = (*session)->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  // Three queues wait for three different values of one flag: no single
  // store can release them all.
  client::Flag flag = (*session)->create_flag();
  constexpr uint64_t kValues[] = {5, 7, 9};
  std::vector<client::Queue> queues;
  for (uint64_t value : kValues) {
    queues.push_back((*session)->create_queue());
    queues.back().wait_for_host_value(flag, value,
                                      client::WaitCondition::kEqual);
    queues.back().launch("samples", "add_u64", {1}, {1},
                         {*counter, uint64_t{1}});
  }
  ASSERT_TRUE((*session)->flush().ok());

  struct Blocked {
    absl::Status status;
    absl::Time returned;
    absl::Notification done;
  };
  std::vector<Blocked> blocked(queues.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < queues.size(); ++i) {
    threads.emplace_back([&, i] {
      blocked[i].status = queues[i].synchronize();
      blocked[i].returned = absl::Now();
      blocked[i].done.Notify();
    });
  }
  absl::SleepFor(absl::Milliseconds(200));  // Let the synchronizes park.
  for (size_t i = 0; i < blocked.size(); ++i) {
    EXPECT_FALSE(blocked[i].done.HasBeenNotified())
        << "queue " << i << " returned before the close: " << blocked[i].status;
  }
  const absl::Time closing = absl::Now();
  absl::Notification closed;
  std::thread closer([&] {
    (void)(*session)->close();
    closed.Notify();
  });
  for (size_t i = 0; i < blocked.size(); ++i) {
    if (!WaitOrKillDaemon(blocked[i].done, absl::Seconds(10))) break;
    EXPECT_EQ(blocked[i].status.code(), absl::StatusCode::kCancelled)
        << "queue waiting for " << kValues[i] << ": " << blocked[i].status;
    EXPECT_LT(blocked[i].returned - closing, absl::Seconds(2))
        << "queue waiting for " << kValues[i];
  }
  WaitOrKillDaemon(closed, absl::Seconds(10));
  for (auto& t : threads) t.join();
  closer.join();
}

TEST_P(DeviceWorkTest, EnqueueNeverBlocksBehindAGatedQueue) {
  auto c = Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  client::Session& s = **session;
  auto counter = s.allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  client::Flag gate = s.create_flag();
  client::Queue gated = s.create_queue();
  client::Queue idle = s.create_queue();
  // Both queues exist on the server before the unary call below names one.
  ASSERT_TRUE(idle.synchronize(absl::Seconds(10)).ok());
  constexpr uint64_t kLaunches = 5000;
  gated.wait_for_host_value(gate, 1);
  for (uint64_t i = 0; i < kLaunches; ++i) {
    gated.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
  }
  ASSERT_TRUE(s.flush().ok());

  // Another queue answers, on a unary call: not behind the gated queue (the
  // gate opens only after it answers; no bound on how fast, which a loaded
  // machine would break)...
  v1::SynchronizeQueueRequest sync;
  sync.set_session_id(s.id());
  sync.set_queue_id(idle.id());
  v1::SynchronizeQueueResponse synced;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status unary = c->stub().SynchronizeQueue(&ctx, sync, &synced);
  EXPECT_TRUE(unary.ok()) << unary.error_code() << ": "
                          << unary.error_message();
  // ... and on the Submit stream, behind the 5000 launches, all accepted.
  EXPECT_TRUE(idle.synchronize(absl::Seconds(10)).ok());
  EXPECT_TRUE(s.take_error().ok());
  auto before = idle.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ((*before)[0], 0u);  // Nothing behind the gate has run.

  ASSERT_TRUE(gate.signal(1).ok());
  ASSERT_TRUE(gated.synchronize(absl::Seconds(30)).ok());
  auto after = idle.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)[0], kLaunches);
}

TEST_P(DeviceWorkTest, SigtermReleasesParkedWaitsWithUnavailable) {
  auto c = Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session();
  ASSERT_TRUE(session.ok());
  client::Flag never = (*session)->create_flag();
  client::Queue gated = (*session)->create_queue();
  gated.wait_for_host_value(never, 1);
  gated.launch("samples", "noop", {1}, {1}, {});
  absl::Status waited, synced;
  std::thread waiter([&] { waited = never.wait(1).status(); });
  std::thread syncer([&] { synced = gated.synchronize(); });
  absl::SleepFor(absl::Milliseconds(200));  // Let the waits park.
  const int exit_status = daemon_->Stop(SIGTERM);
  EXPECT_EQ(exit_status, 0) << daemon_->log();
  if (exit_status == -1) daemon_->Stop(SIGKILL);  // Unblock the threads.
  waiter.join();
  syncer.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_EQ(synced.code(), absl::StatusCode::kUnavailable) << synced;
}

// A large allocation zeroes its memory on the device: seconds for gigabytes.
// The session's lock is not held meanwhile, so an enqueue on the same
// session (which looks its queue up under that lock) goes on. Proved by
// order, not by a latency bound (which a loaded two-core machine breaks):
// of the enqueues that start while a 256 MiB allocation is in flight, most
// end before it does. Were the lock held, an enqueue that started during
// an allocation could end inside it only by reaching the daemon before the
// allocation did (a round trip's head start), and the next one would wait
// for the whole allocation: at most about half would, in practice a few.
// Done, one ends outside only by starting within its own duration of the
// allocation's end (a few percent of it).
// Only where an allocation is long device work: the fake drivers zero it
// on the host (a quarter of a second for 256 MiB). The CPU backend's is a
// lazily zeroed mapping and a real GPU zeroes at hundreds of GB/s (both
// well under a millisecond, as short as an enqueue): there the order would
// prove nothing.
class LargeAllocationTest : public DeviceWorkTest {};

TEST_P(LargeAllocationTest, EnqueuesDoNotWaitForALargeAllocation) {
  auto c = Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  client::Session& s = **session;
  client::Flag flag = s.create_flag();
  ASSERT_TRUE(s.default_queue().synchronize(absl::Seconds(10)).ok());

  struct Span {
    absl::Time start, end;
  };
  constexpr uint64_t kBytes = uint64_t{256} << 20;
  constexpr size_t kEnqueues = 200;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::Mutex mu;
  std::vector<Span> allocations;  // Guarded by mu.
  std::atomic<bool> enqueued_all{false};
  std::atomic<bool> allocated_once{false};
  std::thread allocator([&] {
    while (!enqueued_all.load() && absl::Now() < deadline) {
      const absl::Time start = absl::Now();
      auto buffer = s.allocate(kBytes);  // Freed as it goes.
      // The previous buffer's free may not have reached the device yet (it
      // travels after the allocation's answer): try again shortly.
      if (buffer.status().code() == absl::StatusCode::kResourceExhausted) {
        absl::SleepFor(absl::Milliseconds(1));
        continue;
      }
      EXPECT_TRUE(buffer.ok()) << buffer.status();
      if (!buffer.ok()) break;
      absl::MutexLock lock(&mu);
      allocations.push_back({start, absl::Now()});
      allocated_once = true;
    }
  });
  // Unary enqueues (WriteFlag) on the session while the allocations go on.
  while (!allocated_once.load() && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(100));
  }
  std::vector<Span> enqueues;
  uint64_t value = 0;
  while (enqueues.size() < kEnqueues && absl::Now() < deadline) {
    v1::WriteFlagRequest req;
    req.set_session_id(s.id());
    req.set_queue_id(s.default_queue().id());
    req.set_flag_id(flag.id());
    req.set_value(++value);
    v1::WriteFlagResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    const absl::Time start = absl::Now();
    const grpc::Status status = c->stub().WriteFlag(&ctx, req, &resp);
    enqueues.push_back({start, absl::Now()});
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) break;  // The allocator is joined first.
  }
  enqueued_all = true;
  allocator.join();
  ASSERT_EQ(enqueues.size(), kEnqueues);

  absl::MutexLock lock(&mu);
  ASSERT_GE(allocations.size(), 1u);
  int started_during = 0, ended_during = 0, most_within_one = 0;
  for (const Span& e : enqueues) {
    for (const Span& a : allocations) {
      if (e.start < a.start || e.start >= a.end) continue;
      ++started_during;
      if (e.end <= a.end) ++ended_during;
      break;
    }
  }
  for (const Span& a : allocations) {
    int within = 0;
    for (const Span& e : enqueues)
      within += e.start >= a.start && e.end <= a.end;
    most_within_one = std::max(most_within_one, within);
  }
  std::vector<absl::Duration> took;
  for (const Span& a : allocations) took.push_back(a.end - a.start);
  std::sort(took.begin(), took.end());
  const std::string context = absl::StrCat(
      allocations.size(), " allocations of 256 MiB, ",
      absl::FormatDuration(took[took.size() / 2]), " each (median); ",
      started_during, " of ", kEnqueues, " enqueues started during one, ",
      ended_during, " of them ended in it, ", most_within_one,
      " within a single one");
  EXPECT_GE(started_during, static_cast<int>(kEnqueues / 4)) << context;
  EXPECT_GE(3 * ended_during, 2 * started_during) << context;
  // The lock held would let at most the enqueue that reached the daemon
  // first and the one released with the lock end within an allocation's
  // span (as the client sees it, from its call to its answer).
  EXPECT_GE(most_within_one, 10) << context;
}

INSTANTIATE_TEST_SUITE_P(GpuBackends, LargeAllocationTest,
                         ::testing::Values("cuda_fake", "hip_fake"),
                         testing::BackendName);

INSTANTIATE_TEST_SUITE_P(Backends, DeviceWorkTest,
                         ::testing::ValuesIn(conformance::BackendsUnderTest()),
                         testing::BackendName);

// ---------------------------------------------------------------------------
// The daemon process itself, and single-backend features.

TEST(DaemonTest, HelpDocumentsEveryFlag) {
  std::string out;
  EXPECT_EQ(testing::RunCommand(
                {testing::RunfilePath("server/gpustreamd"), "--help"}, &out),
            1);  // absl's --help exits 1 after printing.
  for (const char* flag :
       {"--listen", "--backend", "--modules", "--config", "--cuda_driver",
        "--cpu_memory_bytes", "--lease_seconds", "--ready_file"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
}

// CPU modules are shared libraries (tests/modules).
TEST(DaemonTest, OperatorModuleFolderIsLoaded) {
  const std::string folder = testing::RunfilePath("tests/modules");
  auto daemon = testing::StartDaemonOn("cpu", {"--modules=" + folder});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto c = Client::Connect((*daemon)->unix_target());
  ASSERT_TRUE(c.ok());
  auto modules = c->list_modules();
  ASSERT_TRUE(modules.ok());
  ASSERT_EQ(modules->size(), 2u);
  EXPECT_EQ((*modules)[0].name(), "samples");
  EXPECT_EQ((*modules)[1].name(), "testmod");
  auto session = c->open_session();
  ASSERT_TRUE(session.ok());
  auto out = (*session)->allocate(8 * 4);
  auto sum = (*session)->allocate(8);
  ASSERT_TRUE(out.ok() && sum.ok());
  client::Queue& q = (*session)->default_queue();
  q.launch("testmod", "iota_i64", {1}, {4}, {*out, int64_t{10}, 2.5});
  q.launch("testmod", "sum_bytes", {1}, {1},
           {*sum, client::Arg::Bytes(std::string("\x01\x02\x03", 3))});
  auto values = q.read<int64_t>(*out, 4);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<int64_t>{10, 12, 15, 17}));
  auto total = q.read<uint64_t>(*sum, 1);
  ASSERT_TRUE(total.ok());
  EXPECT_EQ((*total)[0], 6u);
}

// A kernel with a BUFFER param that declares no extent is unchecked
// (ListModules says so, the log warns); with tenants configured only a
// tenant allowed unchecked kernels may launch it: the others get
// PERMISSION_DENIED naming the kernel and the tenant.
TEST(DaemonTest, UncheckedKernelsNeedTheTenantsPermission) {
  const std::string config = testing::TempPath(".txtpb");
  std::ofstream(config) << absl::StrCat(
      "tenants { name: \"alice\" token_sha256: \"",
      tenants::Sha256Hex("alice-token"),
      "\" }\ntenants { name: \"bob\" allow_unchecked_kernels: true "
      "token_sha256: \"",
      tenants::Sha256Hex("bob-token"), "\" }\n");
  auto daemon = testing::StartDaemonOn(
      "cpu", {"--config=" + config,
              "--modules=" + testing::RunfilePath("tests/modules")});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  for (const auto& [token, allowed] :
       {std::pair<std::string, bool>{"alice-token", false},
        std::pair<std::string, bool>{"bob-token", true}}) {
    SCOPED_TRACE(token);
    auto c = Client::Connect((*daemon)->tcp_target(), {.token = token});
    ASSERT_TRUE(c.ok()) << c.status();
    auto modules = c->list_modules();
    ASSERT_TRUE(modules.ok()) << modules.status();
    for (const v1::Module& m : *modules) {
      for (const v1::Kernel& k : m.kernels()) {
        EXPECT_EQ(k.checked(), k.name() != "iota_i64") << k.name();
      }
    }
    auto session = c->open_session();
    ASSERT_TRUE(session.ok()) << session.status();
    auto out = (*session)->allocate(8 * 4);
    auto sum = (*session)->allocate(8);
    ASSERT_TRUE(out.ok() && sum.ok());
    client::Queue& q = (*session)->default_queue();
    q.launch("testmod", "iota_i64", {1}, {4}, {*out, int64_t{10}, 2.5});
    const absl::Status iota = q.synchronize(absl::Seconds(10));
    if (allowed) {
      EXPECT_TRUE(iota.ok()) << iota;
      auto values = q.read<int64_t>(*out, 4);
      ASSERT_TRUE(values.ok()) << values.status();
      EXPECT_EQ(*values, (std::vector<int64_t>{10, 12, 15, 17}));
    } else {
      EXPECT_EQ(iota.code(), absl::StatusCode::kPermissionDenied) << iota;
      EXPECT_THAT(iota.message(), HasSubstr("kernel testmod.iota_i64"));
      EXPECT_THAT(iota.message(), HasSubstr("tenant 'alice'"));
    }
    // A checked kernel of the same module runs for every tenant.
    q.launch("testmod", "sum_bytes", {1}, {1},
             {*sum, client::Arg::Bytes(std::string("\x01\x02", 2))});
    auto total = q.read<uint64_t>(*sum, 1);
    ASSERT_TRUE(total.ok()) << total.status();
    EXPECT_EQ((*total)[0], 3u);
  }
  EXPECT_THAT((*daemon)->log(), HasSubstr("event=module_unchecked_kernels"));
  EXPECT_THAT((*daemon)->log(), HasSubstr("kernels=iota_i64"));
  std::remove(config.c_str());
}

// A CUDA module is an image plus a manifest that matches it: an image
// without one, or with one that disagrees with the binary, is refused alone
// (named in the log) and the daemon serves the rest.
TEST(DaemonTest, CudaModuleFolderServesOnlyImagesWithAMatchingManifest) {
  if (absl::Status s = testing::BackendAvailable("cuda_fake"); !s.ok()) {
    GTEST_SKIP() << "cuda_fake is unavailable here: " << s;
  }
  const std::string fatbin =
      testing::RunfilePath("kernels/cuda/samples.fatbin");
  if (!std::filesystem::exists(fatbin)) {
    GTEST_SKIP() << "no " << fatbin << ": this build found no nvcc";
  }
  const std::filesystem::path folder = testing::TempPath("-modules");
  std::filesystem::create_directory(folder);
  for (const char* name : {"other.fatbin", "bad.fatbin", "good.fatbin"}) {
    std::filesystem::copy_file(fatbin, folder / name);
  }
  // fill_u32 takes 3 params in the binary.
  std::ofstream(folder / "bad.manifest.textproto") << R"pb(
    kernels {
      name: "fill_u32"
      params { name: "out" kind: PARAM_KIND_BUFFER }
      params { name: "value" kind: PARAM_KIND_U32 }
    }
  )pb";
  std::ofstream(folder / "good.manifest.textproto") << R"pb(
    name: "good"
    kernels {
      name: "add_u64"
      params { name: "counter" kind: PARAM_KIND_BUFFER }
      params { name: "value" kind: PARAM_KIND_U64 }
    }
  )pb";
  auto daemon = testing::StartDaemonOn(
      "cuda_fake", {absl::StrCat("--modules=", folder.string())});
  std::filesystem::remove_all(folder);  // Loaded at start.
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string log = (*daemon)->log();
  auto refusal_of = [&](const std::string& file) {
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, "refused") && absl::StrContains(line, file)) {
        return std::string(line);
      }
    }
    return std::string();
  };
  EXPECT_NE(refusal_of("other.fatbin"), "") << log;
  EXPECT_THAT(refusal_of("bad.fatbin"), HasSubstr("fill_u32")) << log;
  EXPECT_EQ(refusal_of("good.fatbin"), "") << log;

  auto c = Client::Connect((*daemon)->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto modules = c->list_modules();
  ASSERT_TRUE(modules.ok()) << modules.status();
  ASSERT_EQ(modules->size(), 2u) << log;
  const v1::Module& good = (*modules)[0];
  EXPECT_EQ(good.name(), "good");
  EXPECT_EQ((*modules)[1].name(), "samples");
  EXPECT_EQ(good.backend(), "cuda");
  ASSERT_EQ(good.kernels_size(), 1);
  const v1::Kernel& add = good.kernels(0);
  EXPECT_EQ(add.name(), "add_u64");
  EXPECT_THAT(add.params(),
              ElementsAre(v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_U64));
  ASSERT_EQ(add.layout_size(), 2);
  EXPECT_EQ(add.layout(0).size_bytes(), 8u);
  EXPECT_EQ(add.layout(0).offset_bytes(), 0u);
  EXPECT_EQ(add.layout(1).size_bytes(), 8u);
  EXPECT_EQ(add.layout(1).offset_bytes(), 8u);

  auto session = c->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  auto counter = (*session)->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  client::Queue& q = (*session)->default_queue();
  q.launch("good", "add_u64", {1}, {1}, {*counter, uint64_t{5}});
  q.launch("good", "add_u64", {1}, {1}, {*counter, uint64_t{6}});
  const absl::Status added = q.synchronize(absl::Seconds(10));
  EXPECT_TRUE(added.ok()) << added;
  auto value = q.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)[0], 11u);
}

// The memory limit of the CPU backend, and a session limit.
TEST(DaemonTest, ConfigFileSetsLimits) {
  const std::string config = testing::TempPath(".txtpb");
  {
    std::ofstream out(config);
    out << "cpu_memory_bytes: 4096\nlimits { max_sessions: 1 }\n";
  }
  auto daemon = testing::StartDaemonOn("cpu", {"--config=" + config});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto c = Client::Connect((*daemon)->tcp_target());
  ASSERT_TRUE(c.ok());
  auto devices = c->list_devices();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ((*devices)[0].total_memory_bytes(), 4096u);
  auto first = c->open_session();
  ASSERT_TRUE(first.ok());
  auto second = c->open_session();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  std::remove(config.c_str());
}

// The reflection service runs on gRPC's synchronous API, where the handler
// polls IsCancelled() and each poll may finish the call's completion op
// right there, running the daemon's interceptors inside it. An interceptor
// that asked IsCancelled() again from that hook re-entered it without end
// (a stack overflow in about one call in a hundred and twenty). Many short
// streams, each closed as the handler polls, give the race its chances.
TEST(DaemonTest, ManyReflectionStreamsEndingAtOnceKeepTheDaemonUp) {
  auto daemon = testing::StartDaemonOn("cpu", {});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto channel = grpc::CreateChannel((*daemon)->unix_target(),
                                     grpc::InsecureChannelCredentials());
  auto reflection =
      grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  constexpr int kStreams = 1500;
  int finished = 0;
  for (int i = 0; i < kStreams && Running(**daemon); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    auto stream = reflection->ServerReflectionInfo(&ctx);
    grpc::reflection::v1alpha::ServerReflectionRequest list;
    list.set_list_services("");
    stream->WriteLast(list, grpc::WriteOptions());
    grpc::reflection::v1alpha::ServerReflectionResponse listed;
    if (stream->Read(&listed) && stream->Finish().ok()) ++finished;
  }
  EXPECT_EQ(finished, kStreams);
  EXPECT_TRUE(Running(**daemon));
}

}  // namespace
}  // namespace gpustream
