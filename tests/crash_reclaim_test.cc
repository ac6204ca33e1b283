// A client killed with SIGKILL mid-stream: its memory, queues and flags are
// reclaimed (free memory in ListDevices and its tenant's usage in GetStats
// return to their values before), and the daemon serves on.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/tenants/tenant_registry.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

constexpr char kAdminToken[] = "ops-token";
constexpr char kAppToken[] = "app-token";
constexpr char kOtherToken[] = "other-token";

std::unique_ptr<grpc::ClientContext> AsAdmin() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", kAdminToken));
  return ctx;
}

uint64_t FreeMemory(v1::GpuStream::Stub& stub) {
  v1::ListDevicesResponse devices;
  EXPECT_TRUE(stub.ListDevices(AsAdmin().get(), {}, &devices).ok());
  return devices.devices(0).free_memory_bytes();
}

int SessionCount(v1::Admin::Stub& admin) {
  v1::ListSessionsResponse sessions;
  EXPECT_TRUE(admin.ListSessions(AsAdmin().get(), {}, &sessions).ok());
  return sessions.sessions_size();
}

// The "app" tenant's usage, as GetStats reports it.
v1::TenantStats AppUsage(v1::Admin::Stub& admin) {
  v1::GetStatsResponse stats;
  EXPECT_TRUE(admin.GetStats(AsAdmin().get(), {}, &stats).ok());
  for (const auto& t : stats.tenants()) {
    if (t.tenant() == "app") return t;
  }
  ADD_FAILURE() << "no tenant 'app' in " << stats.DebugString();
  return {};
}

std::string Config() {
  return absl::StrCat("tenants { name: 'app' token_sha256: '",
                      tenants::Sha256Hex(kAppToken),
                      "' }\n"
                      "tenants { name: 'other' token_sha256: '",
                      tenants::Sha256Hex(kOtherToken),
                      "' }\n"
                      "tenants { name: 'ops' admin: true token_sha256: '",
                      tenants::Sha256Hex(kAdminToken), "' }\n");
}

// A session of the tenant "other": fills its buffer with a value and reads
// it back, proving its work goes on whatever happens to "app".
class Bystander {
 public:
  explicit Bystander(v1::GpuStream::Stub& stub) : stub_(stub) {
    EXPECT_TRUE(stub_.OpenSession(As().get(), {}, &session_).ok());
    v1::AllocateBufferRequest alloc;
    alloc.set_session_id(session_.session_id());
    alloc.set_id(1);
    alloc.set_size_bytes(4096);
    v1::AllocateBufferResponse allocated;
    EXPECT_TRUE(stub_.AllocateBuffer(As().get(), alloc, &allocated).ok());
  }

  void Check(uint32_t value) {
    v1::FillBufferRequest fill;
    fill.set_session_id(session_.session_id());
    fill.set_queue_id(session_.default_queue_id());
    fill.set_buffer_id(1);
    fill.set_size(4096);
    fill.set_value(value);
    v1::FillBufferResponse filled;
    ASSERT_TRUE(stub_.FillBuffer(As().get(), fill, &filled).ok());
    v1::ReadBufferRequest read;
    read.set_session_id(session_.session_id());
    read.set_queue_id(session_.default_queue_id());
    read.set_buffer_id(1);
    read.set_size(4096);
    v1::ReadBufferResponse data;
    ASSERT_TRUE(stub_.ReadBuffer(As().get(), read, &data).ok());
    ASSERT_EQ(data.data().size(), 4096u);
    uint32_t last;
    std::memcpy(&last, data.data().data() + 4092, 4);
    EXPECT_EQ(last, value);
  }

  void Close() {
    v1::CloseSessionRequest close;
    close.set_session_id(session_.session_id());
    v1::CloseSessionResponse closed;
    EXPECT_TRUE(stub_.CloseSession(As().get(), close, &closed).ok());
  }

 private:
  static std::unique_ptr<grpc::ClientContext> As() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", kOtherToken));
    return ctx;
  }

  v1::GpuStream::Stub& stub_;
  v1::OpenSessionResponse session_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CrashReclaimTest, KilledClientsResourcesComeBack) {
  const std::string config = testing::TempPath(".txtpb");
  std::ofstream(config) << Config();
  auto daemon = testing::DaemonProcess::Start({"--config=" + config});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto channel = grpc::CreateChannel((*daemon)->unix_target(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::GpuStream::NewStub(channel);
  auto admin = v1::Admin::NewStub(channel);
  // Another tenant's session works before, during and after every crash.
  Bystander other(*stub);
  const uint64_t before = FreeMemory(*stub);

  // Round 0: killed while its queues are gated; round 1: also while large
  // copies are in flight.
  for (int round = 0; round < 2; ++round) {
    const std::string out = testing::TempPath(".out");
    pid_t client = testing::StartProcess(
        {testing::RunfilePath("tests/crash_client"),
         "--target=" + (*daemon)->unix_target(), "--megabytes=8",
         absl::StrCat("--token=", kAppToken),
         absl::StrCat("--copying=", round == 1)},
        out);
    ASSERT_GT(client, 0);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!absl::StrContains(ReadFile(out), "READY") &&
           absl::Now() < deadline) {
      ASSERT_EQ(testing::WaitForExit(client, absl::Milliseconds(10)), -1)
          << "crash_client exited early: " << ReadFile(out);
    }
    ASSERT_TRUE(absl::StrContains(ReadFile(out), "READY"));
    EXPECT_EQ(before - FreeMemory(*stub), (9u << 20));
    EXPECT_EQ(SessionCount(*admin), 2);  // The client's and the bystander's.
    const v1::TenantStats held = AppUsage(*admin);
    EXPECT_EQ(held.sessions(), 1u);
    // The default queue and two more (and the copying one).
    EXPECT_EQ(held.queues(), round == 1 ? 4u : 3u);
    EXPECT_EQ(held.memory_bytes(), 9u << 20);
    EXPECT_GT(held.inflight_commands(), 0u);

    ASSERT_NO_FATAL_FAILURE(other.Check(round * 2 + 1));
    kill(client, SIGKILL);
    EXPECT_EQ(testing::WaitForExit(client, absl::Seconds(10)), 128 + SIGKILL);
    ASSERT_NO_FATAL_FAILURE(other.Check(round * 2 + 2));
    std::remove(out.c_str());

    // The 1 s lease runs out; teardown releases the stalled queues.
    const absl::Time reclaim_deadline = absl::Now() + absl::Seconds(15);
    while (FreeMemory(*stub) != before && absl::Now() < reclaim_deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(FreeMemory(*stub), before) << "round " << round;
    EXPECT_EQ(SessionCount(*admin), 1);
    const v1::TenantStats left = AppUsage(*admin);
    EXPECT_EQ(left.sessions(), 0u);
    EXPECT_EQ(left.queues(), 0u);
    EXPECT_EQ(left.memory_bytes(), 0u);
    EXPECT_EQ(left.inflight_commands(), 0u);
    EXPECT_EQ(left.staged_bytes(), 0u);
  }
  other.Close();
  std::remove(config.c_str());
  EXPECT_EQ((*daemon)->Stop(SIGTERM), 0) << (*daemon)->log();
}

}  // namespace
}  // namespace gpustream
