// One test per row of the error table (gpustream.proto), against a real
// gpustreamd on every backend: each bad request gets its code and a message
// naming the field or id, and the daemon and the other sessions carry on
// untouched.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/tenants/tenant_registry.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using grpc::StatusCode;

// Tokens are configured by their SHA-256 only.
std::string Config() {
  return absl::StrCat(
      R"pb(
        cpu_memory_bytes: 1048576
        limits { max_sessions: 4 max_queues_per_session: 2 }
        tenants { name: "alice" token_sha256: ")pb",
      tenants::Sha256Hex("alice-token"),
      R"pb(" }
           tenants { name: "bob" token_sha256: ")pb",
      tenants::Sha256Hex("bob-token"),
      R"pb(" }
           tenants { name: "ops" admin: true token_sha256: ")pb",
      tenants::Sha256Hex("ops-token"), R"pb(" }
      )pb");
}

// Parameterized by the backend. A kernel fault on CUDA loses the device's
// context, ending every session on it (Bob's too): a test that causes one
// sets device_lost_, and TearDown then checks that the daemon serves new
// sessions instead of Bob's data.
class ErrorTableTest : public testing::BackendDaemonTest {
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
    // Bob's canary: a buffer with known contents that no error may touch.
    bob_ = Open("bob-token");
    Alloc(bob_, "bob-token", 77, 64);
    v1::FillBufferRequest fill;
    fill.set_session_id(bob_.session_id());
    fill.set_queue_id(bob_.default_queue_id());
    fill.set_buffer_id(77);
    fill.set_size(64);
    fill.set_value(0xb0b);
    v1::FillBufferResponse filled;
    grpc::Status s = Call(&Stub::FillBuffer, fill, &filled, "bob-token");
    ASSERT_TRUE(s.ok()) << s.error_message();
    alice_ = Open("alice-token");
  }

  void TearDown() override {
    std::remove(config_path_.c_str());
    if (daemon_ == nullptr) return;  // Skipped, or the daemon never started.
    if (process_lost_) return;
    if (device_lost_) {
      ExpectDaemonServesNewSessions();
    } else {
      ExpectBobsDataIntact();
    }
  }

  std::vector<std::string> DaemonArgs() const override {
    return {"--config=" + config_path_};
  }

  grpc::Status ReadBobsCanary(uint32_t* value) {
    return Read(bob_, "bob-token", 77, 60, value);
  }

  // Reads sizeof(T) bytes at `offset` of buffer `id` of `session`.
  template <typename T>
  grpc::Status Read(const v1::OpenSessionResponse& session,
                    const std::string& token, uint64_t id, uint64_t offset,
                    T* value) {
    v1::ReadBufferRequest read;
    read.set_session_id(session.session_id());
    read.set_queue_id(session.default_queue_id());
    read.set_buffer_id(id);
    read.set_offset(offset);
    read.set_size(sizeof(T));
    v1::ReadBufferResponse data;
    grpc::Status s = Call(&Stub::ReadBuffer, read, &data, token);
    if (s.ok() && data.data().size() == sizeof(T)) {
      std::memcpy(value, data.data().data(), sizeof(T));
    }
    return s;
  }

  // The daemon still serves, and Bob's data is intact.
  void ExpectBobsDataIntact() {
    uint32_t v = 0;
    grpc::Status s = ReadBobsCanary(&v);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(v, 0xb0bu);
  }

  // After a device failure: Bob's session went with the device, and once
  // the daemon has reset the device (asynchronously) new sessions work.
  void ExpectDaemonServesNewSessions() {
    uint32_t v = 0;
    ExpectError(ReadBobsCanary(&v), StatusCode::ABORTED, "device 0 failed");
    grpc::Status last;
    const bool served = testing::PollUntil(absl::Seconds(10), [&] {
      v1::OpenSessionResponse opened;
      last = Call(&Stub::OpenSession, v1::OpenSessionRequest(), &opened,
                  "bob-token");
      if (!last.ok()) return false;
      last = Alloc(opened, "bob-token", 78, 64);
      v1::CloseSessionRequest close;
      close.set_session_id(opened.session_id());
      v1::CloseSessionResponse closed;
      (void)Call(&Stub::CloseSession, close, &closed, "bob-token");
      return last.ok();
    });
    EXPECT_TRUE(served) << last.error_message() << "\n" << daemon_->log();
  }

  // The samples' trap: a fault on every backend (an out-of-bounds write
  // need not fault on a GPU).
  void LaunchFault() {
    ASSERT_TRUE(Call(&Stub::LaunchKernel, Launch("trap"), &launched_).ok());
  }

  using Stub = v1::GpuStream::Stub;

  using AdminStub = v1::Admin::Stub;

  // A call of the GpuStream or the Admin service, as `token`'s tenant.
  template <typename S, typename Req, typename Resp>
  grpc::Status Call(grpc::Status (S::*rpc)(grpc::ClientContext*, const Req&,
                                           Resp*),
                    const Req& req, Resp* resp,
                    const std::string& token = "alice-token") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    if constexpr (std::is_same_v<S, AdminStub>) {
      return (admin_.get()->*rpc)(&ctx, req, resp);
    } else {
      return (stub_.get()->*rpc)(&ctx, req, resp);
    }
  }

  // Expects `code` and a message containing `words`.
  static void ExpectError(const grpc::Status& s, StatusCode code,
                          const std::string& words) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), words))
        << "'" << s.error_message() << "' lacks '" << words << "'";
  }

  v1::OpenSessionResponse Open(const std::string& token) {
    v1::OpenSessionResponse resp;
    grpc::Status s =
        Call(&Stub::OpenSession, v1::OpenSessionRequest(), &resp, token);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  grpc::Status Alloc(const v1::OpenSessionResponse& session,
                     const std::string& token, uint64_t id, uint64_t size) {
    v1::AllocateBufferRequest req;
    req.set_session_id(session.session_id());
    req.set_id(id);
    req.set_size_bytes(size);
    v1::AllocateBufferResponse resp;
    return Call(&Stub::AllocateBuffer, req, &resp, token);
  }

  v1::LaunchKernelRequest Launch(const std::string& kernel) {
    v1::LaunchKernelRequest req;
    req.set_session_id(alice_.session_id());
    req.set_queue_id(alice_.default_queue_id());
    req.set_module("samples");
    req.set_kernel(kernel);
    req.mutable_grid()->set_x(1);
    req.mutable_block()->set_x(1);
    return req;
  }

  grpc::Status Sync(uint32_t timeout_ms = 0) {
    v1::SynchronizeQueueRequest req;
    req.set_session_id(alice_.session_id());
    req.set_queue_id(alice_.default_queue_id());
    req.set_timeout_ms(timeout_ms);
    v1::SynchronizeQueueResponse resp;
    return Call(&Stub::SynchronizeQueue, req, &resp);
  }

  std::string config_path_;
  bool device_lost_ = false;
  // The daemon died of a fault, as it must where faults are not
  // recoverable (HIP: ROCm 5.x aborts); checked by ExpectDaemonAborted.
  bool process_lost_ = false;

  // On HIP a kernel fault aborts the daemon: the call in flight fails
  // UNAVAILABLE and the process dies of SIGABRT, for its supervisor to
  // restart.
  void ExpectDaemonAborted() {
    process_lost_ = true;
    ExpectError(Sync(), StatusCode::UNAVAILABLE, "");
    EXPECT_EQ(testing::WaitForExit(daemon_->pid(), absl::Seconds(20)),
              128 + SIGABRT)
        << daemon_->log();
  }
  std::unique_ptr<Stub> stub_;
  std::unique_ptr<AdminStub> admin_;
  v1::OpenSessionResponse alice_, bob_;
  v1::LaunchKernelResponse launched_;
};

TEST_P(ErrorTableTest, Unauthenticated) {
  v1::ListDevicesResponse devices;
  ExpectError(Call(&Stub::ListDevices, v1::ListDevicesRequest(), &devices, ""),
              StatusCode::UNAUTHENTICATED, "authorization");
  ExpectError(
      Call(&Stub::ListDevices, v1::ListDevicesRequest(), &devices, "forged"),
      StatusCode::UNAUTHENTICATED, "invalid bearer token");
}

TEST_P(ErrorTableTest, PermissionDenied) {
  v1::ListSessionsResponse sessions;
  ExpectError(
      Call(&AdminStub::ListSessions, v1::ListSessionsRequest(), &sessions),
      StatusCode::PERMISSION_DENIED, "ListSessions");
  v1::KillSessionRequest kill;
  kill.set_public_id("s-0000000000000000");
  v1::KillSessionResponse killed;
  ExpectError(Call(&AdminStub::KillSession, kill, &killed),
              StatusCode::PERMISSION_DENIED, "KillSession");
  v1::GetStatsResponse stats;
  ExpectError(Call(&AdminStub::GetStats, v1::GetStatsRequest(), &stats),
              StatusCode::PERMISSION_DENIED, "GetStats");
  ASSERT_TRUE(Call(&AdminStub::ListSessions, v1::ListSessionsRequest(),
                   &sessions, "ops-token")
                  .ok());
  EXPECT_EQ(sessions.sessions_size(), 2);
}

TEST_P(ErrorTableTest, NotFound) {
  v1::CreateQueueRequest create;
  v1::CreateQueueResponse created;
  create.set_session_id("feedfacefeedfacefeedfacefeedface");
  const grpc::Status unknown = Call(&Stub::CreateQueue, create, &created);
  ExpectError(unknown, StatusCode::NOT_FOUND, "unknown session_id");
  // A session id is a secret: named by its field, never echoed.
  EXPECT_FALSE(absl::StrContains(unknown.error_message(), "feedface"));
  // Bob's session is foreign to Alice: exactly as if it did not exist.
  create.set_session_id(bob_.session_id());
  const grpc::Status foreign = Call(&Stub::CreateQueue, create, &created);
  ExpectError(foreign, StatusCode::NOT_FOUND, "unknown session_id");
  EXPECT_EQ(foreign.error_message(), unknown.error_message());
  // Bob's buffer id means nothing in Alice's session.
  v1::FreeBufferRequest free;
  free.set_session_id(alice_.session_id());
  free.set_buffer_id(77);
  v1::FreeBufferResponse freed;
  ExpectError(Call(&Stub::FreeBuffer, free, &freed), StatusCode::NOT_FOUND,
              "buffer_id 77");
  v1::SynchronizeQueueRequest sync;
  sync.set_session_id(alice_.session_id());
  sync.set_queue_id(12);
  v1::SynchronizeQueueResponse synced;
  ExpectError(Call(&Stub::SynchronizeQueue, sync, &synced),
              StatusCode::NOT_FOUND, "queue_id 12");
  v1::QueryEventRequest query;
  query.set_session_id(alice_.session_id());
  query.set_event_id(13);
  v1::QueryEventResponse queried;
  ExpectError(Call(&Stub::QueryEvent, query, &queried), StatusCode::NOT_FOUND,
              "event_id 13");
  v1::SignalFlagRequest signal;
  signal.set_session_id(alice_.session_id());
  signal.set_flag_id(14);
  v1::SignalFlagResponse signaled;
  ExpectError(Call(&Stub::SignalFlag, signal, &signaled), StatusCode::NOT_FOUND,
              "flag_id 14");
  auto module = Launch("noop");
  module.set_module("nomodule");
  ExpectError(Call(&Stub::LaunchKernel, module, &launched_),
              StatusCode::NOT_FOUND, "nomodule");
  ExpectError(Call(&Stub::LaunchKernel, Launch("nokernel"), &launched_),
              StatusCode::NOT_FOUND, "nokernel");
}

TEST_P(ErrorTableTest, AlreadyExists) {
  ASSERT_TRUE(Alloc(alice_, "alice-token", 5, 16).ok());
  v1::CreateFlagRequest flag;
  flag.set_session_id(alice_.session_id());
  flag.set_id(5);
  v1::CreateFlagResponse created;
  ExpectError(Call(&Stub::CreateFlag, flag, &created),
              StatusCode::ALREADY_EXISTS, "id 5");
}

TEST_P(ErrorTableTest, InvalidArgument) {
  ExpectError(Alloc(alice_, "alice-token", uint64_t{1} << 63, 16),
              StatusCode::INVALID_ARGUMENT, "server-assigned range");
  auto zero_grid = Launch("noop");
  zero_grid.mutable_grid()->set_x(0);
  ExpectError(Call(&Stub::LaunchKernel, zero_grid, &launched_),
              StatusCode::INVALID_ARGUMENT, "grid.x is 0");
  auto zero_block = Launch("noop");
  zero_block.mutable_block()->set_x(0);
  ExpectError(Call(&Stub::LaunchKernel, zero_block, &launched_),
              StatusCode::INVALID_ARGUMENT, "block.x is 0");
  auto count = Launch("spin_ns");
  ExpectError(Call(&Stub::LaunchKernel, count, &launched_),
              StatusCode::INVALID_ARGUMENT, "takes 1 args, got 0");
  auto kind = Launch("spin_ns");
  kind.add_args()->set_f32(1.0f);
  ExpectError(Call(&Stub::LaunchKernel, kind, &launched_),
              StatusCode::INVALID_ARGUMENT, "args[0]");
  auto empty = Launch("noop");
  empty.clear_module();
  ExpectError(Call(&Stub::LaunchKernel, empty, &launched_),
              StatusCode::INVALID_ARGUMENT, "module is empty");
  ASSERT_TRUE(Alloc(alice_, "alice-token", 6, 16).ok());
  v1::FillBufferRequest fill;
  fill.set_session_id(alice_.session_id());
  fill.set_queue_id(alice_.default_queue_id());
  fill.set_buffer_id(6);
  fill.set_size(6);
  v1::FillBufferResponse filled;
  ExpectError(Call(&Stub::FillBuffer, fill, &filled),
              StatusCode::INVALID_ARGUMENT, "size 6");
  fill.set_size(4);
  fill.set_offset(2);  // Inside the buffer, but not on a 32-bit boundary.
  ExpectError(Call(&Stub::FillBuffer, fill, &filled),
              StatusCode::INVALID_ARGUMENT, "offset 2");
}

TEST_P(ErrorTableTest, OutOfRange) {
  ASSERT_TRUE(Alloc(alice_, "alice-token", 8, 16).ok());
  v1::ReadBufferRequest read;
  read.set_session_id(alice_.session_id());
  read.set_queue_id(alice_.default_queue_id());
  read.set_buffer_id(8);
  read.set_offset(12);
  read.set_size(8);
  v1::ReadBufferResponse data;
  ExpectError(Call(&Stub::ReadBuffer, read, &data), StatusCode::OUT_OF_RANGE,
              "buffer_id 8 of 16 bytes");
  auto grid = Launch("noop");
  grid.mutable_grid()->set_y(65536);
  ExpectError(Call(&Stub::LaunchKernel, grid, &launched_),
              StatusCode::OUT_OF_RANGE, "grid");
  auto block = Launch("noop");
  block.mutable_block()->set_x(64);
  block.mutable_block()->set_y(64);
  ExpectError(Call(&Stub::LaunchKernel, block, &launched_),
              StatusCode::OUT_OF_RANGE, "4096 threads");
  // Within the device's limit but beyond the kernel's own: CUDA's spin_ns
  // is compiled with __launch_bounds__(64); the CPU's has no such limit.
  auto bounded = Launch("spin_ns");
  bounded.mutable_block()->set_x(128);
  bounded.add_args()->set_u64(1000);
  if (on_gpu()) {
    ExpectError(Call(&Stub::LaunchKernel, bounded, &launched_),
                StatusCode::OUT_OF_RANGE, "spin_ns");
  } else {
    grpc::Status s = Call(&Stub::LaunchKernel, bounded, &launched_);
    EXPECT_TRUE(s.ok()) << s.error_message();
    s = Sync();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
}

// Every sample kernel's buffer arguments are checked against the extents
// its module declares, before the device sees the launch: one element too
// many, or an offset that pushes the last one past the end, is OUT_OF_RANGE
// naming the kernel, the param, the extent and the buffer's size; an exact
// fit runs.
TEST_P(ErrorTableTest, OutOfRangeExtents) {
  // Buffer 20 holds 4 words; 21 and 22 (the other operands) 16.
  ASSERT_TRUE(Alloc(alice_, "alice-token", 20, 16).ok());
  ASSERT_TRUE(Alloc(alice_, "alice-token", 21, 64).ok());
  ASSERT_TRUE(Alloc(alice_, "alice-token", 22, 64).ok());
  // The samples counted by n (their last param), by their params' kinds:
  // B a buffer, U a u32, F an f32, N the count.
  const std::pair<std::string, std::string> kernels[] = {
      {"fill_u32", "BUN"}, {"vector_add_f32", "BBBN"}, {"saxpy_f32", "FBBN"}};
  // Each BUFFER param in turn gets buffer 20 (the others 21, 22).
  const auto launch = [&](const std::string& kernel, const std::string& kinds,
                          size_t short_param, uint64_t n, uint64_t offset) {
    v1::LaunchKernelRequest req = Launch(kernel);
    req.mutable_grid()->set_x(4);
    uint64_t other = 21;
    for (size_t p = 0; p < kinds.size(); ++p) {
      v1::KernelArg* arg = req.add_args();
      switch (kinds[p]) {
        case 'B':
          arg->mutable_buffer()->set_buffer_id(p == short_param ? 20 : other++);
          arg->mutable_buffer()->set_offset(p == short_param ? offset : 0);
          break;
        case 'U':
          arg->set_u32(7);
          break;
        case 'F':
          arg->set_f32(2);
          break;
        default:
          arg->set_u64(n);
      }
    }
    return Call(&Stub::LaunchKernel, req, &launched_);
  };
  for (const auto& [kernel, kinds] : kernels) {
    for (size_t p = 0; p < kinds.size(); ++p) {
      if (kinds[p] != 'B') continue;
      SCOPED_TRACE(absl::StrCat(kernel, " param ", p));
      const std::string count =
          absl::StrCat("(args[", kinds.size() - 1, "]) from offset ");
      const grpc::Status over = launch(kernel, kinds, p, 5, 0);
      ExpectError(
          over, StatusCode::OUT_OF_RANGE,
          absl::StrCat("args[", p, "]: kernel samples.", kernel, " param ", p));
      ExpectError(over, StatusCode::OUT_OF_RANGE,
                  absl::StrCat("reaches 20 bytes for a count of 5 ", count,
                               "0, past the end of buffer_id 20 (16 bytes)"));
      ExpectError(launch(kernel, kinds, p, 4, 4), StatusCode::OUT_OF_RANGE,
                  absl::StrCat("reaches 16 bytes for a count of 4 ", count,
                               "4, past the end"));
      const grpc::Status fits = launch(kernel, kinds, p, 4, 0);
      EXPECT_TRUE(fits.ok()) << fits.error_message();
    }
  }
  // 4 * 2^62 overflows: past any buffer, not a wrapped small extent.
  ExpectError(launch("fill_u32", "BUN", 0, uint64_t{1} << 62, 0),
              StatusCode::OUT_OF_RANGE,
              "args[0]: kernel samples.fill_u32 param 0");
  ExpectError(launch("fill_u32", "BUN", 0, uint64_t{1} << 62, 0),
              StatusCode::OUT_OF_RANGE, "reaches more than 2^64 - 1 bytes");
  // add_u64's counter is 8 bytes.
  v1::LaunchKernelRequest add = Launch("add_u64");
  v1::BufferArg* counter = add.add_args()->mutable_buffer();
  counter->set_buffer_id(21);
  counter->set_offset(60);
  add.add_args()->set_u64(1);
  ExpectError(Call(&Stub::LaunchKernel, add, &launched_),
              StatusCode::OUT_OF_RANGE,
              "args[0]: kernel samples.add_u64 param 0");
  ExpectError(Call(&Stub::LaunchKernel, add, &launched_),
              StatusCode::OUT_OF_RANGE,
              "reaches 8 bytes from offset 60, past the end of buffer_id 21 "
              "(64 bytes)");
  add.mutable_args(0)->mutable_buffer()->set_offset(56);
  ASSERT_TRUE(Call(&Stub::LaunchKernel, add, &launched_).ok());
  // The launch that fit ran where it was told, once.
  ASSERT_TRUE(Sync().ok());
  uint64_t added = ~uint64_t{0};
  ASSERT_TRUE(Read(alice_, "alice-token", 21, 56, &added).ok());
  EXPECT_EQ(added, 1u);
}

TEST_P(ErrorTableTest, ResourceExhausted) {
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(
      Call(&Stub::ListDevices, v1::ListDevicesRequest(), &devices).ok());
  ASSERT_GT(devices.devices_size(), 0);
  const uint64_t too_big = devices.devices(0).total_memory_bytes() + (1 << 20);
  ExpectError(Alloc(alice_, "alice-token", 9, too_big),
              StatusCode::RESOURCE_EXHAUSTED,
              absl::StrCat("size_bytes ", too_big));
  v1::CreateQueueRequest create;
  create.set_session_id(alice_.session_id());
  v1::CreateQueueResponse created;
  ASSERT_TRUE(Call(&Stub::CreateQueue, create, &created).ok());
  ExpectError(Call(&Stub::CreateQueue, create, &created),
              StatusCode::RESOURCE_EXHAUSTED, "2 queues");
  // max_sessions 4 over three tenants of weight 1: a share of 1 each, and
  // one more for whoever comes first while it keeps the others' shares.
  Open("alice-token");
  v1::OpenSessionResponse opened;
  ExpectError(Call(&Stub::OpenSession, v1::OpenSessionRequest(), &opened),
              StatusCode::RESOURCE_EXHAUSTED, "fair share 1 of max_sessions 4");
  Open("ops-token");  // 4 sessions: the limit.
  ExpectError(
      Call(&Stub::OpenSession, v1::OpenSessionRequest(), &opened, "bob-token"),
      StatusCode::RESOURCE_EXHAUSTED, "maximum of 4 sessions");
}

TEST_P(ErrorTableTest, FailedPrecondition) {
  // The sticky error of a queue whose kernel faulted. On CUDA a fault loses
  // the context instead, and ends the session (the Aborted row).
  if (on_cpu()) {
    ASSERT_NO_FATAL_FAILURE(LaunchFault());
    ExpectError(Sync(), StatusCode::INTERNAL, "trap");
    ExpectError(Call(&Stub::LaunchKernel, Launch("noop"), &launched_),
                StatusCode::FAILED_PRECONDITION, "failed earlier");
  }
  v1::GetVersionRequest version;
  version.set_min_version(7);
  version.set_max_version(9);
  v1::GetVersionResponse negotiated;
  ExpectError(Call(&Stub::GetVersion, version, &negotiated),
              StatusCode::FAILED_PRECONDITION, "[7, 9]");
}

TEST_P(ErrorTableTest, Internal) {
  if (on_hip()) {
    // The trap may abort the daemon before the launch is even answered.
    grpc::Status launched =
        Call(&Stub::LaunchKernel, Launch("trap"), &launched_);
    EXPECT_TRUE(launched.ok() ||
                launched.error_code() == StatusCode::UNAVAILABLE)
        << launched.error_message();
    ExpectDaemonAborted();
    return;
  }
  ASSERT_NO_FATAL_FAILURE(LaunchFault());
  if (on_cuda()) {
    // A GPU context loss is ABORTED, naming the device and the driver's
    // error; every session on the device ends.
    device_lost_ = true;
    ExpectError(Sync(), StatusCode::ABORTED, "device 0 failed");
    ExpectError(Sync(), StatusCode::ABORTED, "CUDA_ERROR_LAUNCH_FAILED");
  } else {
    // The queue's sticky error names the kernel, and stays.
    ExpectError(Sync(), StatusCode::INTERNAL, "trap");
    ExpectError(Sync(), StatusCode::INTERNAL, "trap");
  }
}

TEST_P(ErrorTableTest, Aborted) {
  if (on_hip()) {
    GTEST_SKIP() << "a kernel fault aborts the process on HIP (ROCm 5.x): "
                    "no session outlives its device to hear ABORTED (the "
                    "Internal case proves the abort)";
  }
  if (!on_cuda()) {
    GTEST_SKIP() << "the CPU backend's device never fails, and this build "
                    "has no admin KillSession";
  }
  ASSERT_NO_FATAL_FAILURE(LaunchFault());
  device_lost_ = true;
  ExpectError(Sync(), StatusCode::ABORTED, "device 0 failed");
  // The session is gone: every later call on it says why, enqueues too.
  ExpectError(Call(&Stub::LaunchKernel, Launch("noop"), &launched_),
              StatusCode::ABORTED, "device 0 failed");
  ExpectError(Alloc(alice_, "alice-token", 11, 8), StatusCode::ABORTED,
              "device 0 failed");
  // Bob's session, on the same device, ends too (checked in TearDown, with
  // the daemon serving new sessions afterwards).
}

TEST_P(ErrorTableTest, DeadlineExceeded) {
  auto spin = Launch("spin_ns");
  spin.add_args()->set_u64(500'000'000);
  ASSERT_TRUE(Call(&Stub::LaunchKernel, spin, &launched_).ok());
  ExpectError(Sync(30), StatusCode::DEADLINE_EXCEEDED, "timeout_ms 30");
  v1::CreateFlagRequest create;
  create.set_session_id(alice_.session_id());
  create.set_id(11);
  v1::CreateFlagResponse created;
  ASSERT_TRUE(Call(&Stub::CreateFlag, create, &created).ok());
  v1::WaitFlagRequest wait;
  wait.set_session_id(alice_.session_id());
  wait.set_flag_id(11);
  wait.set_value(1);
  wait.set_timeout_ms(30);
  v1::WaitFlagResponse waited;
  ExpectError(Call(&Stub::WaitFlag, wait, &waited),
              StatusCode::DEADLINE_EXCEEDED, "flag_id 11");
}

INSTANTIATE_TEST_SUITE_P(Backends, ErrorTableTest,
                         ::testing::ValuesIn(conformance::BackendsUnderTest()),
                         testing::BackendName);

// UNIMPLEMENTED: a HIP runtime without an entry point the backend needs
// (here a library that is no HIP runtime at all) fails at start naming the
// library and the entry point.
TEST(ErrorTableStartupTest, Unimplemented) {
  std::string out;
  EXPECT_EQ(testing::RunCommand(
                {testing::RunfilePath("server/gpustreamd"), "--backend=hip",
                 "--hip_runtime=libm.so.6", "--listen=127.0.0.1:0"},
                &out),
            2);
  EXPECT_TRUE(absl::StrContains(out, "UNIMPLEMENTED")) << out;
  EXPECT_TRUE(absl::StrContains(
      out, "the HIP runtime libm.so.6 does not provide hipInit"))
      << out;
}

// --backend=cuda without a usable driver exits at start naming the library
// it tried (or saying the build has no CUDA support).
TEST(ErrorTableStartupTest, CudaWithoutDriverNamesTheLibrary) {
  std::string out;
  EXPECT_EQ(
      testing::RunCommand(
          {testing::RunfilePath("server/gpustreamd"), "--backend=cuda",
           "--cuda_driver=/nonexistent/libcuda.so.1", "--listen=127.0.0.1:0"},
          &out),
      2);
  EXPECT_TRUE(absl::StrContains(out, "/nonexistent/libcuda.so.1") ||
              absl::StrContains(out, "no CUDA support"))
      << out;
}

// A second daemon never takes over a live one's addresses: its unix socket
// (which answers) and its TCP port each make the second exit 2 naming the
// address, and the first still serves on both. Once the first is killed,
// the socket file it left is stale and a new daemon reclaims the path.
TEST(ErrorTableStartupTest, AddressesInUseAreRefusedStaleSocketsReclaimed) {
  auto first = testing::DaemonProcess::Start({"--backend=cpu"});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string unix_target = (*first)->unix_target();
  const std::string tcp_target = (*first)->tcp_target();
  for (const std::string& address : {unix_target, tcp_target}) {
    std::string out;
    EXPECT_EQ(testing::RunCommand({testing::RunfilePath("server/gpustreamd"),
                                   "--backend=cpu", "--listen=" + address},
                                  &out),
              2)
        << out;
    EXPECT_TRUE(absl::StrContains(out, "address in use")) << out;
    EXPECT_TRUE(absl::StrContains(out, address)) << out;
  }
  for (const std::string& target : {unix_target, tcp_target}) {
    auto stub = v1::GpuStream::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::GetVersionRequest req;
    v1::GetVersionResponse resp;
    const grpc::Status s = stub->GetVersion(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << target << ": " << s.error_message();
  }
  // Killed, the first leaves its socket file behind: nobody answers on it.
  // A new daemon on that path starts and serves (still running when the
  // command's 5 s are up, then killed).
  EXPECT_EQ((*first)->Stop(SIGKILL), 128 + SIGKILL);
  std::string out;
  EXPECT_EQ(testing::RunCommand({testing::RunfilePath("server/gpustreamd"),
                                 "--backend=cpu", "--listen=" + unix_target},
                                &out, absl::Seconds(5)),
            -1)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "listening address=" + unix_target))
      << out;
}

// UNAVAILABLE (daemon shutting down) is proved by
// e2e_test's DaemonTest.SigtermReleasesParkedWaitsWithUnavailable.

}  // namespace
}  // namespace gpustream
