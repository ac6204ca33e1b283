// A client killed with SIGKILL mid-stream: its memory, queues and flags are
// reclaimed (free memory in ListDevices returns to its value before), and
// the daemon serves on.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

uint64_t FreeMemory(v1::GpuStream::Stub& stub) {
  grpc::ClientContext ctx;
  v1::ListDevicesResponse devices;
  EXPECT_TRUE(stub.ListDevices(&ctx, {}, &devices).ok());
  return devices.devices(0).free_memory_bytes();
}

int SessionCount(v1::GpuStream::Stub& stub) {
  grpc::ClientContext ctx;
  v1::ListSessionsResponse sessions;
  EXPECT_TRUE(stub.ListSessions(&ctx, {}, &sessions).ok());
  return sessions.sessions_size();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CrashReclaimTest, KilledClientsResourcesComeBack) {
  auto daemon = testing::DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = v1::GpuStream::NewStub(grpc::CreateChannel(
      (*daemon)->unix_target(), grpc::InsecureChannelCredentials()));
  const uint64_t before = FreeMemory(*stub);

  for (int round = 0; round < 2; ++round) {
    const std::string out = testing::TempPath(".out");
    pid_t client = testing::StartProcess(
        {testing::RunfilePath("tests/crash_client"),
         "--target=" + (*daemon)->unix_target(), "--megabytes=8"},
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
    EXPECT_EQ(SessionCount(*stub), 1);

    kill(client, SIGKILL);
    EXPECT_EQ(testing::WaitForExit(client, absl::Seconds(10)), 128 + SIGKILL);
    std::remove(out.c_str());

    // The 1 s lease runs out; teardown releases the stalled queues.
    const absl::Time reclaim_deadline = absl::Now() + absl::Seconds(15);
    while (FreeMemory(*stub) != before && absl::Now() < reclaim_deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(FreeMemory(*stub), before) << "round " << round;
    EXPECT_EQ(SessionCount(*stub), 0);
  }
  EXPECT_EQ((*daemon)->Stop(SIGTERM), 0) << (*daemon)->log();
}

}  // namespace
}  // namespace gpustream
