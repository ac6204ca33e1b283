// The fixture of the tenancy suites (tenancy_test.cc, host_waits_test.cc):
// one real gpustreamd on each backend with tenants alice, bob, carol (tight
// quotas) and ops (an admin), and helpers that act as them.
#ifndef GPUSTREAM_TESTS_TENANCY_FIXTURE_H_
#define GPUSTREAM_TESTS_TENANCY_FIXTURE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/tenants/tenant_registry.h"
#include "tests/backend_daemon.h"
#include "tests/daemon_process.h"

namespace gpustream::testing {

// alice and bob: plain tenants, carol: tight quotas, ops: an admin.
inline std::string TenancyConfig(bool with_bob = true,
                                 uint64_t carol_inflight = 8) {
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

class TenancyTest : public BackendDaemonTest {
 protected:
  void SetUp() override {
    config_path_ = TempPath(".txtpb");
    std::ofstream(config_path_) << TenancyConfig();
    BackendDaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto channel = grpc::CreateChannel(daemon_->tcp_target(),
                                       grpc::InsecureChannelCredentials());
    // Connected before the test's first call, whose deadline is 20 s: once,
    // in the ThreadSanitizer phase, a connection to a fresh daemon took
    // longer (the test process had just run a storm of abandoned calls,
    // and two such tests in a row failed on their first call). A wait
    // over a second is printed, so a slow connect stays visible.
    const absl::Time start = absl::Now();
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(90)))
        << "no connection to " << daemon_->tcp_target() << " in 90 s";
    if (const absl::Duration took = absl::Now() - start;
        took > absl::Seconds(1)) {
      std::printf("connecting to the daemon took %s\n",
                  absl::FormatDuration(took).c_str());
    }
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

  // Event `event_id` of `s`, recorded behind its gate: it never completes
  // while the gate holds.
  void EventBehindGate(const v1::OpenSessionResponse& s,
                       const std::string& tenant, uint64_t event_id) {
    v1::CreateEventRequest create;
    create.set_session_id(s.session_id());
    create.set_id(event_id);
    v1::CreateEventResponse created;
    ASSERT_TRUE(stub_->CreateEvent(As(tenant).get(), create, &created).ok());
    v1::RecordEventRequest record;
    record.set_session_id(s.session_id());
    record.set_queue_id(s.default_queue_id());
    record.set_event_id(event_id);
    v1::RecordEventResponse recorded;
    ASSERT_TRUE(stub_->RecordEvent(As(tenant).get(), record, &recorded).ok());
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

}  // namespace gpustream::testing

#endif  // GPUSTREAM_TESTS_TENANCY_FIXTURE_H_
