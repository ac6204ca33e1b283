// gpustreamctl end to end: the real binary, run as a subprocess, against a
// real gpustreamd with tenants (one admin) serving plaintext on a unix
// socket and TLS on 127.0.0.1. Checks what each command prints (tables and
// --json), what sessions show and hide, that kill ends a C++ client's
// session, and every exit code of the contract in docs/gpustreamctl.md.
#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/gpustream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/tenants/tenant_registry.h"
#include "server/version.h"
#include "tests/daemon_process.h"
#include "tests/test_certs.h"

extern char** environ;

namespace gpustream {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// alice: a plain tenant (also by certificate CN=alice), carol: quotas to
// read back in stats, ops: the admin.
constexpr char kAliceToken[] = "alice-token-93aa7e10c4";
constexpr char kCarolToken[] = "carol-token-0d17b6e2f8";
constexpr char kOpsToken[] = "ops-token-5be1c0d2a7";
constexpr uint64_t kMiB = 1 << 20;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What one run of gpustreamctl did.
struct CtlRun {
  int exit_code = -1;  // -1: it did not finish within the bound.
  std::string out, err;
  absl::Duration elapsed;
};

// Runs gpustreamctl with `args`. Its environment is the test's without any
// GPUSTREAM_* variable, plus `env` ("NAME=value"). Bounded by 30 s. Checks
// that no token appears in anything it printed.
CtlRun RunCtl(const std::vector<std::string>& args,
              const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {
      testing::RunfilePath("tools/gpustreamctl/gpustreamctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> envv;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "GPUSTREAM_")) envv.push_back(*e);
  }
  envv.insert(envv.end(), env.begin(), env.end());
  const std::string out_path = testing::TempPath(".out");
  const std::string err_path = testing::TempPath(".err");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : envv) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  CtlRun run;
  const absl::Time start = absl::Now();
  pid_t pid = -1;
  const int spawned =
      posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ADD_FAILURE() << "cannot spawn " << argv[0];
    return run;
  }
  run.exit_code = testing::WaitForExit(pid, absl::Seconds(30));
  run.elapsed = absl::Now() - start;
  if (run.exit_code == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    ADD_FAILURE() << "gpustreamctl " << absl::StrJoin(args, " ")
                  << " did not finish within 30 s";
  }
  run.out = ReadFile(out_path);
  run.err = ReadFile(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  for (const char* token : {kAliceToken, kCarolToken, kOpsToken}) {
    EXPECT_FALSE(absl::StrContains(run.out + run.err, token))
        << "a token was printed by: " << absl::StrJoin(args, " ");
  }
  return run;
}

std::ostream& operator<<(std::ostream& os, const CtlRun& run) {
  return os << "exit " << run.exit_code << "\nstdout:\n"
            << run.out << "stderr:\n"
            << run.err;
}

// The lines of a table, each split into its whitespace-separated words.
std::vector<std::vector<std::string>> Words(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    if (line.empty()) continue;
    rows.push_back(absl::StrSplit(line, ' ', absl::SkipEmpty()));
  }
  return rows;
}

// The first line of `text` holding `needle` ("" if none).
std::string LineWith(const std::string& text, const std::string& needle) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, needle)) return std::string(line);
  }
  return "";
}

template <typename Message>
Message ParseJson(const std::string& json) {
  Message message;
  const auto status =
      google::protobuf::util::JsonStringToMessage(json, &message);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return message;
}

class GpustreamctlTest : public ::testing::Test {
 protected:
  struct Shared {
    std::string error;  // Why the suite could not be set up.
    std::string dir;
    testing::TestCerts certs;
    std::unique_ptr<testing::DaemonProcess> daemon;
  };

  static void SetUpTestSuite() {
    shared_ = new Shared;
    const char* tmp = std::getenv("TEST_TMPDIR");
    shared_->dir = tmp != nullptr ? tmp : "/tmp";
    auto certs = testing::GenerateTestCerts(shared_->dir);
    if (!certs.ok()) {
      shared_->error = certs.status().ToString();
      return;
    }
    shared_->certs = *certs;
    const std::string config = absl::StrCat(shared_->dir, "/ctl.textproto");
    std::ofstream(config) << absl::StrCat(
        "tenants { name: 'alice' tls_subject: 'CN=alice' token_sha256: '",
        tenants::Sha256Hex(kAliceToken), "' }\n",
        "tenants { name: 'carol' token_sha256: '",
        tenants::Sha256Hex(kCarolToken),
        "' quota { max_sessions: 2 device_memory_bytes: 8388608 } }\n",
        "tenants { name: 'ops' admin: true token_sha256: '",
        tenants::Sha256Hex(kOpsToken), "' }\n");
    auto daemon = testing::DaemonProcess::Start(
        {"--backend=cpu", "--cpu_memory_bytes=268435456", "--config=" + config,
         "--tls_cert=" + certs->server.cert, "--tls_key=" + certs->server.key,
         "--tls_client_ca=" + certs->ca_cert});
    if (!daemon.ok()) {
      shared_->error = daemon.status().ToString();
      return;
    }
    shared_->daemon = *std::move(daemon);
  }

  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    // A test may freeze the daemon; never leave it frozen for the next.
    kill(daemon().pid(), SIGCONT);
  }
  void TearDown() override { kill(daemon().pid(), SIGCONT); }

  static testing::DaemonProcess& daemon() { return *shared_->daemon; }
  static std::string UnixTarget() {
    return "--target=" + daemon().unix_target();
  }

  // gpustreamctl on the unix socket as the admin, the token in the
  // environment.
  static CtlRun AsOps(std::vector<std::string> args) {
    args.insert(args.begin(), UnixTarget());
    return RunCtl(args, {absl::StrCat("GPUSTREAM_TOKEN=", kOpsToken)});
  }

  // A C++ client of `token`'s tenant on the unix socket.
  static absl::StatusOr<client::Client> Connect(const std::string& token) {
    return client::Client::Connect(
        daemon().unix_target(), {.timeout = absl::Seconds(20), .token = token});
  }

  // The public id of the one live session named `client_name`, from
  // `sessions --json` ("" if there is none, or more than one).
  static std::string PublicIdOf(const std::string& client_name) {
    const CtlRun run = AsOps({"sessions", "--json"});
    EXPECT_EQ(run.exit_code, 0) << run;
    std::string id;
    int found = 0;
    const auto listed = ParseJson<v1::ListSessionsResponse>(run.out);
    for (const auto& s : listed.sessions()) {
      if (s.client_name() == client_name) {
        id = s.public_id();
        ++found;
      }
    }
    return found == 1 ? id : "";
  }

  static Shared* shared_;
};

GpustreamctlTest::Shared* GpustreamctlTest::shared_ = nullptr;

TEST_F(GpustreamctlTest, HealthPrintsServing) {
  // The health service needs no credentials.
  CtlRun run = RunCtl({"health", UnixTarget()});
  EXPECT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(run.out, "SERVING\n");
  EXPECT_THAT(run.err, IsEmpty());
  run = RunCtl({UnixTarget(), "--json", "health"});
  EXPECT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(run.out, "{\"status\":\"SERVING\"}\n");
}

// A server whose health service says NOT_SERVING (gpustreamd says so only
// while it shuts down, when it also stops answering).
TEST_F(GpustreamctlTest, HealthNotServingExits5) {
  grpc::EnableDefaultHealthCheckService(true);
  const std::string target = "unix:" + testing::TempPath(".sock");
  grpc::ServerBuilder builder;
  builder.AddListeningPort(target, grpc::InsecureServerCredentials());
  // gRPC wants one synchronous service to poll for; every method of this
  // one is UNIMPLEMENTED.
  v1::GpuStream::Service unimplemented;
  builder.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  absl::Cleanup stop = [&] { server->Shutdown(); };
  server->GetHealthCheckService()->SetServingStatus(false);
  CtlRun run = RunCtl({"health", "--target=" + target});
  EXPECT_EQ(run.exit_code, 5) << run;
  EXPECT_EQ(run.out, "NOT_SERVING\n");
  run = RunCtl({"health", "--json", "--target=" + target});
  EXPECT_EQ(run.exit_code, 5) << run;
  EXPECT_EQ(run.out, "{\"status\":\"NOT_SERVING\"}\n");
  server->GetHealthCheckService()->SetServingStatus(true);
  run = RunCtl({"health", "--target=" + target});
  EXPECT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(run.out, "SERVING\n");
}

TEST_F(GpustreamctlTest, VersionFlagNeedsNoDaemon) {
  const CtlRun run = RunCtl({"--version", "--target=unix:/nonexistent.sock"});
  EXPECT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(run.out, absl::StrCat("gpustreamctl ", kServerVersion, "\n"));
}

TEST_F(GpustreamctlTest, VersionShowsBothSides) {
  CtlRun run = AsOps({"version"});
  ASSERT_EQ(run.exit_code, 0) << run;
  const auto rows = Words(run.out);
  ASSERT_GE(rows.size(), 5u) << run;
  EXPECT_THAT(rows[0], ElementsAre("COMPONENT", "VERSION", "PROTOCOL"));
  EXPECT_THAT(rows[1],
              ElementsAre("gpustreamctl", gpustream::kServerVersion, "1..1"));
  EXPECT_THAT(rows[2],
              ElementsAre("gpustreamd", gpustream::kServerVersion, "1"));
  EXPECT_THAT(run.out, HasSubstr("\nnegotiated protocol: 1\n"));
  EXPECT_THAT(run.out, HasSubstr("\nbackends: cpu\n"));
  EXPECT_THAT(run.out, HasSubstr("submit_stream"));

  run = AsOps({"version", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run;
  const auto doc = ParseJson<google::protobuf::Struct>(run.out);
  const auto& client = doc.fields().at("client").struct_value().fields();
  EXPECT_EQ(client.at("name").string_value(), "gpustreamctl");
  EXPECT_EQ(client.at("version").string_value(), gpustream::kServerVersion);
  const auto& server = doc.fields().at("server").struct_value().fields();
  EXPECT_EQ(server.at("serverVersion").string_value(),
            gpustream::kServerVersion);
  EXPECT_EQ(server.at("protocolVersion").number_value(), 1);
  EXPECT_EQ(server.at("backends").list_value().values(0).string_value(), "cpu");
  EXPECT_EQ(doc.fields().at("negotiatedProtocolVersion").number_value(), 1);
}

TEST_F(GpustreamctlTest, DevicesAndModules) {
  CtlRun run = AsOps({"devices"});
  ASSERT_EQ(run.exit_code, 0) << run;
  auto rows = Words(run.out);
  ASSERT_EQ(rows.size(), 2u) << run;
  EXPECT_THAT(rows[0],
              ElementsAre("ID", "BACKEND", "NAME", "ARCH", "UNITS", "FREE",
                          "TOTAL", "PRIORITIES", "WAIT_VALUE"));
  EXPECT_EQ(rows[1][0], "0");
  EXPECT_EQ(rows[1][1], "cpu");
  EXPECT_EQ(rows[1][2], "CPU");  // "CPU (N hardware threads)".
  EXPECT_EQ(rows[1].end()[-3], "256.0MiB");
  EXPECT_EQ(rows[1].end()[-2], "-5..0");
  // Right-aligned: the id ends where its header does.
  const std::vector<std::string> lines = absl::StrSplit(run.out, '\n');
  EXPECT_EQ(lines[0].find("ID") + 2, lines[1].find("0") + 1) << run;

  run = AsOps({"devices", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run;
  const auto devices = ParseJson<v1::ListDevicesResponse>(run.out);
  ASSERT_EQ(devices.devices_size(), 1) << run;
  EXPECT_EQ(devices.devices(0).backend(), "cpu");
  EXPECT_EQ(devices.devices(0).total_memory_bytes(), 256 * kMiB);
  // 64-bit integers are JSON strings, 32-bit ones numbers, names lowerCamel.
  EXPECT_THAT(run.out, HasSubstr("\"totalMemoryBytes\":\"268435456\""));
  EXPECT_THAT(run.out, HasSubstr("\"priorityGreatest\":-5"));

  run = AsOps({"modules"});
  ASSERT_EQ(run.exit_code, 0) << run;
  rows = Words(run.out);
  EXPECT_THAT(rows[0], ElementsAre("MODULE", "BACKEND", "KERNEL", "MAX_THREADS",
                                   "CHECKED", "PARAMS"));
  const auto saxpy = Words(LineWith(run.out, "saxpy_f32"));
  ASSERT_EQ(saxpy.size(), 1u) << run;
  EXPECT_EQ(saxpy[0][0], "samples");
  EXPECT_EQ(saxpy[0][1], "cpu");
  EXPECT_EQ(saxpy[0].back(), "f32,buffer,buffer,u64");
  EXPECT_EQ(saxpy[0].at(saxpy[0].size() - 2), "yes");
  EXPECT_EQ(Words(LineWith(run.out, " noop ")).at(0).back(), "-");

  run = AsOps({"modules", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run;
  bool found = false;
  const auto modules = ParseJson<v1::ListModulesResponse>(run.out);
  for (const auto& m : modules.modules()) {
    for (const auto& k : m.kernels()) {
      if (m.name() == "samples" && k.name() == "saxpy_f32") {
        found = true;
        EXPECT_THAT(k.params(),
                    ElementsAre(v1::PARAM_KIND_F32, v1::PARAM_KIND_BUFFER,
                                v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_U64));
      }
    }
  }
  EXPECT_TRUE(found) << run;
}

TEST_F(GpustreamctlTest, SessionsShowTenantAndClientButNeverTheSecret) {
  absl::StatusOr<client::Client> alice = Connect(kAliceToken);
  ASSERT_TRUE(alice.ok()) << alice.status();
  auto session = alice->open_session({.client_name = "ctl-e2e-sessions"});
  ASSERT_TRUE(session.ok()) << session.status();
  auto buffer = (*session)->allocate(kMiB);  // Held: freed when dropped.
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const std::string secret = (*session)->id();

  CtlRun run = AsOps({"sessions"});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr(secret)));
  const std::vector<std::string> lines = absl::StrSplit(run.out, '\n');
  EXPECT_THAT(Words(lines[0])[0],
              ElementsAre("PUBLIC_ID", "TENANT", "CLIENT", "DEVICE", "AGE",
                          "IDLE", "QUEUES", "MEMORY", "INFLIGHT", "STREAMS"));
  const std::string row = LineWith(run.out, "ctl-e2e-sessions");
  const auto words = Words(row);
  ASSERT_EQ(words.size(), 1u) << run;
  ASSERT_EQ(words[0].size(), 10u) << run;
  EXPECT_THAT(words[0][0], StartsWith("s-"));
  EXPECT_EQ(words[0][1], "alice");
  EXPECT_EQ(words[0][3], "0");       // Device.
  EXPECT_EQ(words[0][6], "1");       // Queues: the default queue.
  EXPECT_EQ(words[0][7], "1.0MiB");  // Memory.
  // Columns line up: left-aligned ones start under their header,
  // right-aligned ones end under it.
  EXPECT_EQ(row.find("alice"), lines[0].find("TENANT")) << run;
  EXPECT_EQ(row.find("1.0MiB") + 6, lines[0].find("MEMORY") + 6) << run;

  // Flags after the command word; the same session, with every count.
  run = RunCtl({"sessions", UnixTarget(), "--json",
                absl::StrCat("--token=", kOpsToken)});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr(secret)));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run;
  int found = 0;
  const auto listed = ParseJson<v1::ListSessionsResponse>(run.out);
  for (const auto& s : listed.sessions()) {
    if (s.client_name() != "ctl-e2e-sessions") continue;
    ++found;
    EXPECT_EQ(s.public_id(), words[0][0]);
    EXPECT_EQ(s.tenant(), "alice");
    EXPECT_EQ(s.memory_bytes(), kMiB);
    EXPECT_EQ(s.buffers(), 1u);
    EXPECT_EQ(s.queues(), 1u);
  }
  EXPECT_EQ(found, 1) << run;
}

TEST_F(GpustreamctlTest, KillEndsTheSessionAndAnUnknownIdExits1) {
  absl::StatusOr<client::Client> alice = Connect(kAliceToken);
  ASSERT_TRUE(alice.ok()) << alice.status();
  auto doomed = alice->open_session({.client_name = "ctl-e2e-kill"});
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  auto json_doomed = alice->open_session({.client_name = "ctl-e2e-kill-json"});
  ASSERT_TRUE(json_doomed.ok()) << json_doomed.status();
  const std::string id = PublicIdOf("ctl-e2e-kill");
  ASSERT_THAT(id, StartsWith("s-"));

  CtlRun run = AsOps({"kill", id});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(run.out, absl::StrCat("killed ", id, "\n"));
  // The owner's next call on the session is ABORTED, naming the admin.
  v1::KeepAliveRequest keep;
  keep.set_session_id((*doomed)->id());
  v1::KeepAliveResponse kept;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kAliceToken));
  const grpc::Status after = alice->stub().KeepAlive(&ctx, keep, &kept);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(after.error_message(), HasSubstr("administrator"));

  // Again: the id is unknown now. Exit 1, the error names it.
  run = AsOps({"kill", id});
  EXPECT_EQ(run.exit_code, 1) << run;
  EXPECT_THAT(run.out, IsEmpty());
  EXPECT_THAT(run.err, StartsWith("gpustreamctl: kill: NOT_FOUND: "));
  EXPECT_THAT(run.err, HasSubstr(id));
  run = AsOps({"kill", "s-00000000deadbeef"});
  EXPECT_EQ(run.exit_code, 1) << run;
  EXPECT_THAT(run.err, HasSubstr("s-00000000deadbeef"));

  const std::string json_id = PublicIdOf("ctl-e2e-kill-json");
  ASSERT_THAT(json_id, StartsWith("s-"));
  run = AsOps({"kill", "--json", json_id});
  ASSERT_EQ(run.exit_code, 0) << run;
  const auto doc = ParseJson<google::protobuf::Struct>(run.out);
  EXPECT_EQ(doc.fields().at("killed").string_value(), json_id);
  EXPECT_EQ(PublicIdOf("ctl-e2e-kill-json"), "");
}

TEST_F(GpustreamctlTest, StatsShowUsageAgainstQuotas) {
  absl::StatusOr<client::Client> carol = Connect(kCarolToken);
  ASSERT_TRUE(carol.ok()) << carol.status();
  auto session = carol->open_session({.client_name = "ctl-e2e-stats"});
  ASSERT_TRUE(session.ok()) << session.status();
  auto buffer = (*session)->allocate(2 * kMiB);  // Held: freed when dropped.
  ASSERT_TRUE(buffer.ok()) << buffer.status();

  CtlRun run = AsOps({"stats"});
  ASSERT_EQ(run.exit_code, 0) << run;
  const std::vector<std::string> tables = absl::StrSplit(run.out, "\n\n");
  ASSERT_EQ(tables.size(), 2u) << run;
  auto rows = Words(tables[0]);
  EXPECT_THAT(rows[0],
              ElementsAre("TENANT", "WEIGHT", "SESSIONS", "QUEUES", "MEMORY",
                          "INFLIGHT", "STAGED", "COMPLETED", "BUSY", "SMS"));
  const auto carol_row = Words(LineWith(tables[0], "carol"));
  ASSERT_EQ(carol_row.size(), 1u) << run;
  EXPECT_THAT(
      std::vector<std::string>(carol_row[0].begin(), carol_row[0].begin() + 5),
      ElementsAre("carol", "1", "1/2", "1/-", "2.0MiB/8.0MiB"));
  rows = Words(tables[1]);
  ASSERT_EQ(rows.size(), 2u) << run;
  EXPECT_THAT(rows[0],
              ElementsAre("DEVICE", "BACKEND", "MEMORY", "BUSY", "SHARING"));
  EXPECT_EQ(rows[1][0], "0");
  EXPECT_EQ(rows[1][1], "cpu");
  EXPECT_THAT(rows[1][2], ::testing::EndsWith("/256.0MiB"));
  EXPECT_EQ(rows[1][4], "weighted_fair_queuing");

  run = AsOps({"stats", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run;
  const auto stats = ParseJson<v1::GetStatsResponse>(run.out);
  bool found = false;
  for (const auto& t : stats.tenants()) {
    if (t.tenant() != "carol") continue;
    found = true;
    EXPECT_EQ(t.sessions(), 1u);
    EXPECT_EQ(t.memory_bytes(), 2 * kMiB);
    EXPECT_EQ(t.quota().max_sessions(), 2u);
    EXPECT_EQ(t.quota().device_memory_bytes(), 8 * kMiB);
  }
  EXPECT_TRUE(found) << run;
  ASSERT_EQ(stats.devices_size(), 1) << run;
  EXPECT_EQ(stats.devices(0).memory_total_bytes(), 256 * kMiB);
  EXPECT_GE(stats.devices(0).memory_used_bytes(), 2 * kMiB);
}

TEST_F(GpustreamctlTest, NotAuthorizedExits4) {
  // No token, with tenants configured (over TCP: on the unix socket this
  // root test process would read the operator token).
  CtlRun run = RunCtl({"sessions", "--target=" + daemon().tcp_target(),
                       "--tls_ca=" + shared_->certs.ca_cert});
  EXPECT_EQ(run.exit_code, 4) << run;
  EXPECT_THAT(run.out, IsEmpty());
  EXPECT_THAT(run.err, StartsWith("gpustreamctl: sessions: UNAUTHENTICATED: "));
  // A wrong token.
  run = RunCtl({"devices", UnixTarget(), "--token=not-a-token"});
  EXPECT_EQ(run.exit_code, 4) << run;
  EXPECT_THAT(run.err, HasSubstr("UNAUTHENTICATED"));
  // A tenant that is no admin, for each admin command.
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"sessions"}, {"stats"}, {"kill", "s-00000000deadbeef"}}) {
    args.push_back(UnixTarget());
    run = RunCtl(args, {absl::StrCat("GPUSTREAM_TOKEN=", kAliceToken)});
    EXPECT_EQ(run.exit_code, 4) << run;
    EXPECT_THAT(run.err, HasSubstr(": PERMISSION_DENIED: ")) << run;
  }
  // But alice may list devices.
  run = RunCtl({"devices", UnixTarget()},
               {absl::StrCat("GPUSTREAM_TOKEN=", kAliceToken)});
  EXPECT_EQ(run.exit_code, 0) << run;
}

TEST_F(GpustreamctlTest, TokenSources) {
  const std::string file = testing::TempPath(".token");
  std::ofstream(file) << kOpsToken << "\n";
  CtlRun run = RunCtl({"sessions", UnixTarget(), "--token_file=" + file});
  EXPECT_EQ(run.exit_code, 0) << run;
  // --token wins over the environment.
  run = RunCtl({"sessions", UnixTarget(), absl::StrCat("--token=", kOpsToken)},
               {absl::StrCat("GPUSTREAM_TOKEN=", kAliceToken)});
  EXPECT_EQ(run.exit_code, 0) << run;
  // The target from the environment.
  run = RunCtl({"sessions"}, {"GPUSTREAM_TARGET=" + daemon().unix_target(),
                              absl::StrCat("GPUSTREAM_TOKEN=", kOpsToken)});
  EXPECT_EQ(run.exit_code, 0) << run;
  unlink(file.c_str());
}

// The local operator: the daemon writes a fresh operator token beside its
// unix socket, readable by its user and root only, and gpustreamctl on that
// socket sends it when given no token: the admin commands work on a daemon
// with tenants (here) and without (below).
TEST_F(GpustreamctlTest, OperatorTokenMakesTheLocalUserAnAdmin) {
  const std::string socket = daemon().unix_target().substr(5);
  const std::string token_path = socket + ".operator-token";
  struct stat st;
  ASSERT_EQ(stat(token_path.c_str(), &st), 0) << token_path;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, getuid());
  CtlRun run = RunCtl({"stats", "--json", UnixTarget()});
  ASSERT_EQ(run.exit_code, 0) << run;
  const auto stats = ParseJson<v1::GetStatsResponse>(run.out);
  std::vector<std::string> names;
  for (const auto& t : stats.tenants()) names.push_back(t.tenant());
  EXPECT_THAT(names, ::testing::Contains("local-operator")) << run;
  // An explicit token wins: a plain tenant is no admin, and the refusal
  // says how to become one.
  run = RunCtl({"sessions", UnixTarget()},
               {absl::StrCat("GPUSTREAM_TOKEN=", kAliceToken)});
  EXPECT_EQ(run.exit_code, 4) << run;
  EXPECT_THAT(run.err, HasSubstr("tenant 'alice' is not an admin")) << run;
  EXPECT_THAT(run.err, HasSubstr("operator token in " + token_path)) << run;

  // A daemon without tenants: every caller is "default", no admin, but the
  // local operator is.
  auto bare = testing::DaemonProcess::Start({"--backend=cpu"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  const std::string bare_target = "--target=" + (*bare)->unix_target();
  const std::string bare_token =
      (*bare)->unix_target().substr(5) + ".operator-token";
  run = RunCtl({"sessions", bare_target});
  EXPECT_EQ(run.exit_code, 0) << run;
  // Its log says who each listener lets in, and warns of open TCP.
  const std::string log = (*bare)->log();
  EXPECT_THAT(log, HasSubstr(absl::StrCat(
                       "address=", (*bare)->unix_target(),
                       " security=\"plaintext, local\" "
                       "authentication=\"none: socket file permissions "
                       "(mode 0660)\"")));
  EXPECT_THAT(log, HasSubstr(absl::StrCat("event=unauthenticated_listener "
                                          "address=",
                                          (*bare)->tcp_target())));
  EXPECT_THAT(log, HasSubstr("event=operator_token path=" + bare_token));
  // gpustreamctl reads only a private regular file: with group bits, or
  // as a symlink, the token is not used.
  ASSERT_EQ(chmod(bare_token.c_str(), 0640), 0);
  run = RunCtl({"sessions", bare_target});
  EXPECT_EQ(run.exit_code, 4) << run;
  ASSERT_EQ(chmod(bare_token.c_str(), 0600), 0);
  const std::string moved = bare_token + ".moved";
  ASSERT_EQ(rename(bare_token.c_str(), moved.c_str()), 0);
  ASSERT_EQ(symlink(moved.c_str(), bare_token.c_str()), 0);
  run = RunCtl({"sessions", bare_target});
  EXPECT_EQ(run.exit_code, 4) << run;
  ASSERT_EQ(unlink(bare_token.c_str()), 0);
  ASSERT_EQ(rename(moved.c_str(), bare_token.c_str()), 0);
  run = RunCtl({"sessions", bare_target});
  EXPECT_EQ(run.exit_code, 0) << run;
  run = RunCtl({"sessions", bare_target}, {"GPUSTREAM_TOKEN=not-the-token"});
  EXPECT_EQ(run.exit_code, 4) << run;
  EXPECT_THAT(run.err, HasSubstr("tenant 'default' is not an admin")) << run;
  EXPECT_THAT(run.err, HasSubstr(bare_token)) << run;
  // The file goes with the daemon.
  EXPECT_EQ((*bare)->Stop(SIGTERM), 0);
  EXPECT_NE(access(bare_token.c_str(), F_OK), 0);

  // --operator_token_file=none: no operator, and the refusal says so.
  auto none = testing::DaemonProcess::Start(
      {"--backend=cpu", "--operator_token_file=none"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_NE(
      access(((*none)->unix_target().substr(5) + ".operator-token").c_str(),
             F_OK),
      0);
  run = RunCtl({"sessions", "--target=" + (*none)->unix_target()});
  EXPECT_EQ(run.exit_code, 4) << run;
  EXPECT_THAT(run.err, HasSubstr("has no operator token")) << run;
}

TEST_F(GpustreamctlTest, UnreachableOrSilentDaemonExits3Quickly) {
  const std::string nowhere = "unix:" + testing::TempPath(".absent.sock");
  CtlRun run = RunCtl({"health", "--target=" + nowhere});
  EXPECT_EQ(run.exit_code, 3) << run;
  EXPECT_LT(run.elapsed, absl::Seconds(3)) << run;
  EXPECT_THAT(run.err, StartsWith("gpustreamctl: health: UNAVAILABLE: "));
  EXPECT_THAT(run.err, HasSubstr(nowhere));
  run = RunCtl({"sessions"}, {"GPUSTREAM_TARGET=" + nowhere});
  EXPECT_EQ(run.exit_code, 3) << run;
  EXPECT_THAT(run.err, HasSubstr(nowhere));

  // A daemon that accepts connections and never answers: the deadline.
  ASSERT_TRUE(daemon().Freeze());
  absl::Cleanup resume = [] { kill(daemon().pid(), SIGCONT); };
  run = RunCtl({"devices", UnixTarget(), "--timeout=300ms"});
  EXPECT_EQ(run.exit_code, 3) << run;
  EXPECT_LT(run.elapsed, absl::Seconds(5)) << run;
  EXPECT_THAT(run.err, HasSubstr("DEADLINE_EXCEEDED")) << run;
}

TEST_F(GpustreamctlTest, UsageErrorsExit2) {
  const std::string token_file = testing::TempPath(".token");
  std::ofstream(token_file) << kOpsToken;
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"kill"},
      {"kill", "s-1", "s-2"},
      {"kill", ""},
      {"devices", "extra"},
      {"--frobnicate", "devices"},
      {"devices", "--helpfull"},
      {"devices", "--timeout=soon"},
      {"devices", "--timeout=0s"},
      {"devices", "--timeout"},
      {"devices", "--nojson=true"},
      {"devices", "--token=a", "--token_file=" + token_file},
      {"devices", "--token_file=/nonexistent/token"},
      {"devices", "--token=bad\ttoken"},
      {"devices", "--tls_ca=/nonexistent/ca.pem", "--target=127.0.0.1:1"},
      {"devices", "--tls_cert=" + shared_->certs.alice.cert,
       "--target=127.0.0.1:1"},
      {"devices", "--tls_ca=" + shared_->certs.ca_cert,
       "--target=unix:/tmp/x.sock"},
  };
  for (const auto& args : cases) {
    const CtlRun run = RunCtl(args);
    EXPECT_EQ(run.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << run;
    EXPECT_THAT(run.out, IsEmpty()) << absl::StrJoin(args, " ");
    EXPECT_THAT(run.err, HasSubstr("usage: ")) << absl::StrJoin(args, " ");
  }
  EXPECT_THAT(RunCtl({"frobnicate"}).err, HasSubstr("'frobnicate'"));
  EXPECT_THAT(RunCtl({"devices", "--tls_ca=/nonexistent/ca.pem",
                      "--target=127.0.0.1:1"})
                  .err,
              HasSubstr("/nonexistent/ca.pem"));
  // Help is no error.
  for (const char* help : {"help", "--help", "-h"}) {
    const CtlRun run = RunCtl({help});
    EXPECT_EQ(run.exit_code, 0) << run;
    for (const char* command : {"version", "health", "devices", "modules",
                                "sessions", "kill", "stats"}) {
      EXPECT_THAT(run.out, HasSubstr(absl::StrCat("\n  ", command, " ")));
    }
  }
  unlink(token_file.c_str());
}

TEST_F(GpustreamctlTest, TlsOverTcp) {
  const std::string tcp = "--target=" + daemon().tcp_target();
  const std::string ca = "--tls_ca=" + shared_->certs.ca_cert;
  CtlRun run = RunCtl({"stats", tcp, ca, absl::StrCat("--token=", kOpsToken)});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(Words(LineWith(run.out, "carol")).at(0).at(0), "carol") << run;
  run = RunCtl({"sessions", "--json", tcp, ca},
               {absl::StrCat("GPUSTREAM_TOKEN=", kOpsToken)});
  ASSERT_EQ(run.exit_code, 0) << run;
  ParseJson<v1::ListSessionsResponse>(run.out);
  // A client certificate is alice's identity: authenticated, not an admin.
  run = RunCtl({"sessions", tcp, ca, "--tls_cert=" + shared_->certs.alice.cert,
                "--tls_key=" + shared_->certs.alice.key});
  EXPECT_EQ(run.exit_code, 4) << run;
  EXPECT_THAT(run.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(run.err, HasSubstr("'alice'"));
  // Without the CA the daemon's certificate is not trusted, and plaintext
  // gets no answer from a TLS port: both look like no daemon there.
  run = RunCtl({"health", tcp, "--tls_cert=" + shared_->certs.alice.cert,
                "--tls_key=" + shared_->certs.alice.key});
  EXPECT_EQ(run.exit_code, 3) << run;
  // One line on stderr: the status, not gRPC's own log of the handshake.
  EXPECT_THAT(run.err, StartsWith("gpustreamctl: health: UNAVAILABLE: "));
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run;
  run = RunCtl({"health", tcp});
  EXPECT_EQ(run.exit_code, 3) << run;
}

}  // namespace
}  // namespace gpustream
