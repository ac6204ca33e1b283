// The GPU sharing modes end to end, on a real gpustreamd: a context per
// tenant keeps a fault to the faulting tenant while another's verified work
// runs with zero errors; SM partitions follow the tenants' weights (and a
// SIGHUP's new ones) in GetStats; the CPU backend says it keeps its
// weighted fair queuing; a device that cannot serve a mode refuses it at
// start. The conformance and tenancy suites run in every mode too
// (conformance::BackendsAndSharingModesUnderTest(); in the uninstrumented
// builds only, where this suite covers the modes under the sanitizers).
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/tenants/tenant_registry.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

// Tenants alice (weight `alice_weight`), bob (weight 1) and ops (an admin).
std::string Config(uint32_t alice_weight = 2) {
  auto tenant = [](const std::string& name, const std::string& extra) {
    return absl::StrCat("tenants { name: '", name, "' token_sha256: '",
                        tenants::Sha256Hex(name + "-token"), "' ", extra,
                        " }\n");
  };
  return absl::StrCat(tenant("alice", absl::StrCat("weight: ", alice_weight)),
                      tenant("bob", "weight: 1"),
                      tenant("ops", "admin: true weight: 1"));
}

class GpuSharingTest : public testing::BackendDaemonTest {
 protected:
  void SetUp() override {
    config_path_ = testing::TempPath(".txtpb");
    std::ofstream(config_path_) << Config();
    BackendDaemonTest::SetUp();
  }
  void TearDown() override { std::remove(config_path_.c_str()); }
  std::vector<std::string> DaemonArgs() const override {
    return {"--config=" + config_path_};
  }

  absl::StatusOr<client::Client> As(const std::string& tenant) {
    return client::Client::Connect(daemon_->unix_target(),
                                   {.token = tenant + "-token"});
  }

  v1::GetStatsResponse Stats() {
    auto channel = grpc::CreateChannel(daemon_->tcp_target(),
                                       grpc::InsecureChannelCredentials());
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ops-token");
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    v1::GetStatsResponse stats;
    grpc::Status s = v1::Admin::NewStub(channel)->GetStats(&ctx, {}, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats;
  }
  static uint32_t SmCount(const v1::GetStatsResponse& stats,
                          const std::string& tenant) {
    for (const auto& t : stats.tenants()) {
      if (t.tenant() == tenant) return t.sm_count();
    }
    ADD_FAILURE() << "no tenant " << tenant;
    return 0;
  }

  std::string config_path_;
};

using ContextPerTenantTest = GpuSharingTest;
using SmPartitionsTest = GpuSharingTest;

// alice faults her context in a loop (each fault ends her session with
// ABORTED naming the cause; she opens a new one) while bob fills and reads
// back buffers on the same device: bob sees every value he wrote and not
// one error.
TEST_P(ContextPerTenantTest, AFaultingTenantNeverDisturbsAnother) {
  auto alice = As("alice");
  auto bob = As("bob");
  ASSERT_TRUE(alice.ok() && bob.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bob_rounds{0}, bob_errors{0};
  std::string bob_first_error;
  std::thread bystander([&] {
    auto session = bob->open_session({.client_name = "bob"});
    if (!session.ok()) {
      bob_errors = 1;
      bob_first_error = session.status().ToString();
      return;
    }
    auto buffer = (*session)->allocate(4096);
    if (!buffer.ok()) {
      bob_errors = 1;
      bob_first_error = buffer.status().ToString();
      return;
    }
    client::Queue& q = (*session)->default_queue();
    const absl::Time end = absl::Now() + absl::Seconds(60);
    for (uint32_t round = 1;
         !stop.load() && round < 100'000 && absl::Now() < end; ++round) {
      q.launch("samples", "fill_u32", {4}, {256}, {*buffer, round, 1024u});
      auto data = q.read<uint32_t>(*buffer, 1024);
      if (!data.ok() || (*data)[0] != round || (*data)[1023] != round) {
        if (bob_errors.fetch_add(1) == 0) {
          bob_first_error = data.ok() ? absl::StrCat("read ", (*data)[0],
                                                     " after filling ", round)
                                      : data.status().ToString();
        }
      }
      bob_rounds.fetch_add(1);
    }
  });
  // An ASSERT below returns early: the bystander still stops and joins.
  absl::Cleanup join_bystander = [&] {
    stop = true;
    if (bystander.joinable()) bystander.join();
  };
  int faults = 0;
  const absl::Time end = absl::Now() + absl::Seconds(30);
  for (; faults < 20 && absl::Now() < end; ++faults) {
    auto session = alice->open_session({.client_name = "alice"});
    ASSERT_TRUE(session.ok()) << session.status() << "\n" << daemon_->log();
    client::Queue& q = (*session)->default_queue();
    q.launch("samples", "trap", {1}, {1}, {});
    const absl::Status fault = q.synchronize(absl::Seconds(20));
    ASSERT_EQ(fault.code(), absl::StatusCode::kAborted)
        << "fault " << faults << ": " << fault << "\n"
        << daemon_->log();
    EXPECT_TRUE(absl::StrContains(fault.message(), "tenant's context"))
        << fault;
    EXPECT_TRUE(absl::StrContains(fault.message(), "LAUNCH_FAILED")) << fault;
  }
  // Bob keeps going a while after the last fault too, on the one context
  // left: each of alice's failed ones went with its session.
  const int before = bob_rounds.load();
  EXPECT_TRUE(testing::PollUntil(
      absl::Seconds(20), [&] { return bob_rounds.load() > before + 5; }));
  EXPECT_TRUE(testing::PollUntil(absl::Seconds(20), [&] {
    return Stats().devices(0).tenant_contexts() == 1;
  })) << Stats().DebugString();
  stop = true;
  bystander.join();
  EXPECT_EQ(faults, 20);
  EXPECT_EQ(bob_errors.load(), 0) << bob_first_error;
  EXPECT_GT(bob_rounds.load(), 5);
  EXPECT_FALSE(absl::StrContains(daemon_->log(), "event=device_failed"))
      << "the shared context failed:\n"
      << daemon_->log();
  // Bob's context goes after his last session, and every one of alice's
  // failed contexts went too (none leaks): 20 of hers, 1 of his.
  EXPECT_TRUE(testing::PollUntil(absl::Seconds(20), [&] {
    return Stats().devices(0).tenant_contexts() == 0;
  })) << Stats().DebugString();
  auto released = [&](const std::string& tenant) {
    const std::string line =
        absl::StrCat("event=tenant_context_released tenant=", tenant);
    int n = 0;
    const std::string log = daemon_->log();
    for (size_t at = log.find(line); at != std::string::npos;
         at = log.find(line, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(testing::PollUntil(
      absl::Seconds(20),
      [&] { return released("alice") == 20 && released("bob") == 1; }))
      << "alice's contexts released: " << released("alice")
      << ", bob's: " << released("bob") << "\n"
      << daemon_->log();
  EXPECT_EQ(Stats().devices(0).sharing(), "context_per_tenant");
}

INSTANTIATE_TEST_SUITE_P(Backends, ContextPerTenantTest,
                         ::testing::Values("cuda_fake_context_per_tenant",
                                           "cuda_context_per_tenant"),
                         testing::BackendName);

// 2:1 weights get 2:1 SMs at the device's granularity (the fake's 132 SMs
// are 16 groups of 8: weights 2:1:1 get 8, 4 and 4 groups); a SIGHUP that
// changes the weights splits again, and new sessions run on the new split.
TEST_P(SmPartitionsTest, PartitionsFollowWeightsAndReloads) {
  v1::GetStatsResponse stats = Stats();
  EXPECT_EQ(stats.devices(0).sharing(), "sm_partitions");
  const uint32_t alice = SmCount(stats, "alice");
  const uint32_t bob = SmCount(stats, "bob");
  EXPECT_EQ(SmCount(stats, "ops"), bob);
  if (backend() == "cuda_fake_sm_partitions") {
    EXPECT_EQ(alice, 64u);
    EXPECT_EQ(bob, 32u);
  } else {
    // Whole groups, rounded down: exactly 2:1 only where they divide so.
    EXPECT_GE(alice, 2 * bob - 8) << stats.DebugString();
    EXPECT_GT(bob, 0u);
  }
  // The local operator administers but gets no SMs, so no session.
  const std::string socket(absl::StripPrefix(daemon_->unix_target(), "unix:"));
  std::ifstream token_file(socket + ".operator-token");
  std::string token;
  token_file >> token;
  ASSERT_FALSE(token.empty());
  auto op = client::Client::Connect(daemon_->unix_target(), {.token = token});
  ASSERT_TRUE(op.ok()) << op.status();
  const absl::Status refused = op->open_session({}).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "tenant 'local-operator' has no SM partition"))
      << refused;
  std::ofstream(config_path_) << Config(/*alice_weight=*/1);
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(20), [&] {
    stats = Stats();
    return SmCount(stats, "alice") == SmCount(stats, "bob");
  })) << stats.DebugString();
  // Sessions open and run on the new split.
  auto client = As("alice");
  ASSERT_TRUE(client.ok());
  auto session = client->open_session({});
  ASSERT_TRUE(session.ok()) << session.status();
  auto buffer = (*session)->allocate(64);
  ASSERT_TRUE(buffer.ok());
  client::Queue& q = (*session)->default_queue();
  q.launch("samples", "fill_u32", {1}, {16}, {*buffer, 9u, 16u});
  auto data = q.read<uint32_t>(*buffer, 16);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)[15], 9u);
  // A reload whose tenants do not fit the SMs is refused as at start: the
  // tenants and their split stay.
  {
    std::ofstream out(config_path_);
    out << Config(/*alice_weight=*/1);
    for (int i = 0; i < 17; ++i) {
      out << "tenants { name: 't" << i << "' token_sha256: '"
          << tenants::Sha256Hex(absl::StrCat("t", i)) << "' }\n";
    }
  }
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  EXPECT_TRUE(testing::PollUntil(absl::Seconds(20), [&] {
    return absl::StrContains(daemon_->log(), "event=tenants_not_reloaded");
  })) << daemon_->log();
  EXPECT_TRUE(absl::StrContains(daemon_->log(), "do not fit"))
      << daemon_->log();
  stats = Stats();
  EXPECT_EQ(stats.tenants_size(), 4) << stats.DebugString();  // + operator
  EXPECT_EQ(SmCount(stats, "alice"), SmCount(stats, "bob"));
  EXPECT_GT(SmCount(stats, "alice"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, SmPartitionsTest,
                         ::testing::Values("cuda_fake_sm_partitions",
                                           "cuda_sm_partitions"),
                         testing::BackendName);

// The CPU backend has no contexts or SMs to split: it serves every mode
// with its weighted fair queuing, and says so.
TEST(CpuSharingTest, TheCpuBackendKeepsWeightedFairQueuingAndSaysSo) {
  for (const char* mode : {"context_per_tenant", "sm_partitions"}) {
    auto daemon =
        testing::StartDaemonOn("cpu", {absl::StrCat("--gpu_sharing=", mode)});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = client::Client::Connect((*daemon)->unix_target());
    ASSERT_TRUE(client.ok());
    auto session = client->open_session({});
    ASSERT_TRUE(session.ok()) << mode << ": " << session.status();
    EXPECT_TRUE(absl::StrContains(
        (*daemon)->log(), absl::StrCat("event=gpu_sharing mode=", mode)))
        << (*daemon)->log();
    // As the local operator (the token beside the socket): the admin.
    std::string output;
    ASSERT_EQ(testing::RunCommand(
                  {testing::RunfilePath("tools/gpustreamctl/gpustreamctl"),
                   "--target=" + (*daemon)->unix_target(), "stats", "--json"},
                  &output),
              0)
        << output;
    EXPECT_TRUE(absl::StrContains(output, "weighted_fair_queuing")) << output;
  }
}

// A vendor without contexts of their own (HIP) refuses CONTEXT_PER_TENANT,
// and too many tenants for the SM groups refuse SM_PARTITIONS: at start,
// exit 2, saying why.
TEST(SharingRefusedTest, ADeviceThatCannotServeAModeRefusesItAtStart) {
  std::string output;
  std::vector<std::string> hip = {testing::RunfilePath("server/gpustreamd"),
                                  "--listen=unix:" + testing::TempPath(".sock"),
                                  "--gpu_sharing=context_per_tenant"};
  for (const std::string& flag : conformance::DaemonFlagsFor("hip_fake")) {
    hip.push_back(flag);
  }
  EXPECT_EQ(testing::RunCommand(hip, &output), 2) << output;
  EXPECT_TRUE(absl::StrContains(output, "HIP has no context per tenant"))
      << output;
  if (!testing::BackendAvailable("cuda_fake").ok()) return;
  const std::string config = testing::TempPath(".txtpb");
  {
    std::ofstream out(config);
    for (int i = 0; i < 17; ++i) {
      out << "tenants { name: 't" << i << "' token_sha256: '"
          << tenants::Sha256Hex(absl::StrCat("t", i)) << "' }\n";
    }
  }
  std::vector<std::string> cuda = {
      testing::RunfilePath("server/gpustreamd"),
      "--listen=unix:" + testing::TempPath(".sock"), "--config=" + config};
  for (const std::string& flag :
       conformance::DaemonFlagsFor("cuda_fake_sm_partitions")) {
    cuda.push_back(flag);
  }
  EXPECT_EQ(testing::RunCommand(cuda, &output), 2) << output;
  EXPECT_TRUE(absl::StrContains(output, "17 partitions of at least one group"))
      << output;
  std::remove(config.c_str());
}

}  // namespace
}  // namespace gpustream
