// Transport security end to end: gpustreamd as a real process serving TLS
// (with client certificates verified against a CA) on 127.0.0.1 and
// plaintext on a unix socket, tenants authenticated by bearer token or by
// certificate subject; the rule against plaintext TCP off loopback; unix
// socket permissions; start-up errors for bad transport flags. Certificates
// are made for each run with the openssl command (tests/test_certs.h).
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/tenants/tenant_registry.h"
#include "server/version.h"
#include "tests/daemon_process.h"
#include "tests/test_certs.h"

namespace gpustream {
namespace {

using testing::CertFiles;
using testing::DaemonProcess;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCommand;
using testing::RunfilePath;
using testing::TempPath;
using testing::TestCerts;

constexpr char kBobToken[] = "bob-token-4c1f0e2a9d";
constexpr grpc::StatusCode kOk = grpc::StatusCode::OK;
constexpr grpc::StatusCode kUnauthenticated = grpc::StatusCode::UNAUTHENTICATED;
constexpr grpc::StatusCode kUnavailable = grpc::StatusCode::UNAVAILABLE;
constexpr grpc::StatusCode kNotFound = grpc::StatusCode::NOT_FOUND;

// A directory for this test's files: Bazel's TEST_TMPDIR, else a fresh one.
std::string TestDir() {
  if (const char* dir = std::getenv("TEST_TMPDIR"); dir != nullptr) {
    return dir;
  }
  const std::string dir = TempPath("-tls");
  mkdir(dir.c_str(), 0700);
  return dir;
}

std::string WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path) << contents;
  return path;
}

// The permission bits and group of a socket file, or an error.
struct SocketFile {
  bool ok = false;
  bool is_socket = false;
  mode_t mode = 0;
  gid_t gid = 0;
};
SocketFile StatSocket(const std::string& unix_target) {
  SocketFile f;
  struct stat st;
  const std::string path = unix_target.substr(std::strlen("unix:"));
  if (stat(path.c_str(), &st) != 0) return f;
  f.ok = true;
  f.is_socket = S_ISSOCK(st.st_mode);
  f.mode = st.st_mode & 07777;
  f.gid = st.st_gid;
  return f;
}

// What the calls of one client (one channel and its credentials) get.
class TestClient {
 public:
  TestClient(std::shared_ptr<grpc::Channel> channel, std::string token = "")
      : stub_(v1::GpuStream::NewStub(std::move(channel))),
        token_(std::move(token)) {}

  // One unary RPC, bounded by 15 s, with the client's bearer token.
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (v1::GpuStream::Stub::*rpc)(
                        grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(15));
    if (!token_.empty()) {
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token_));
    }
    return (stub_.get()->*rpc)(&ctx, req, resp);
  }

  grpc::Status OpenSession(v1::OpenSessionResponse* resp) {
    v1::OpenSessionRequest req;
    req.set_client_name("tls_test");
    return Call(&v1::GpuStream::Stub::OpenSession, req, resp);
  }

  grpc::Status KeepAlive(const std::string& session_id) {
    v1::KeepAliveRequest req;
    req.set_session_id(session_id);
    v1::KeepAliveResponse resp;
    return Call(&v1::GpuStream::Stub::KeepAlive, req, &resp);
  }

  grpc::Status CloseSession(const std::string& session_id) {
    v1::CloseSessionRequest req;
    req.set_session_id(session_id);
    v1::CloseSessionResponse resp;
    return Call(&v1::GpuStream::Stub::CloseSession, req, &resp);
  }

 private:
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::string token_;
};

// Each channel its own subchannel pool: a connection (or a failed one)
// made for one set of credentials is never shared with another.
grpc::ChannelArguments FreshChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

std::shared_ptr<grpc::Channel> PlainChannel(const std::string& target) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   FreshChannelArgs());
}

// A TLS channel trusting the test CA, presenting `client` if given.
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& target,
                                          const std::string& ca_cert,
                                          const CertFiles* client) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = testing::ReadTextFile(ca_cert);
  if (client != nullptr) {
    ssl.pem_cert_chain = testing::ReadTextFile(client->cert);
    ssl.pem_private_key = testing::ReadTextFile(client->key);
  }
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl),
                                   FreshChannelArgs());
}

// ---------------------------------------------------------------------------
// One daemon for the suite: TLS with client certificates on TCP, tenants
// alice (certificate CN=alice) and bob (a bearer token).

class TlsTest : public ::testing::Test {
 protected:
  struct Shared {
    std::string error;  // Why the suite could not be set up.
    std::string dir;
    TestCerts certs;
    std::string config;
    std::unique_ptr<DaemonProcess> daemon;
  };

  static void SetUpTestSuite() {
    shared_ = new Shared;
    shared_->dir = TestDir();
    auto certs = testing::GenerateTestCerts(shared_->dir);
    if (!certs.ok()) {
      shared_->error = certs.status().ToString();
      return;
    }
    shared_->certs = *certs;
    shared_->config = WriteFile(
        absl::StrCat(shared_->dir, "/tenants.textproto"),
        absl::StrCat("tenants { name: \"alice\" tls_subject: \"CN=alice\" }\n",
                     "tenants { name: \"bob\" token_sha256: \"",
                     tenants::Sha256Hex(kBobToken), "\" }\n"));
    auto daemon = DaemonProcess::Start(
        {"--backend=cpu", "--cpu_memory_bytes=16777216",
         absl::StrCat("--config=", shared_->config),
         absl::StrCat("--tls_cert=", certs->server.cert),
         absl::StrCat("--tls_key=", certs->server.key),
         absl::StrCat("--tls_client_ca=", certs->ca_cert)});
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

  void SetUp() override { ASSERT_EQ(shared_->error, ""); }

  void TearDown() override {
    // Whatever a case did, the daemon must still be serving.
    if (shared_->daemon == nullptr) return;
    EXPECT_EQ(waitpid(daemon().pid(), nullptr, WNOHANG), 0) << daemon().log();
  }

  static DaemonProcess& daemon() { return *shared_->daemon; }
  static const TestCerts& certs() { return shared_->certs; }

  // TLS to the daemon's TCP port, with `client`'s certificate if given.
  static TestClient Tls(const CertFiles* client, std::string token = "") {
    return TestClient(
        TlsChannel(daemon().tcp_target(), certs().ca_cert, client),
        std::move(token));
  }

  static Shared* shared_;
};

TlsTest::Shared* TlsTest::shared_ = nullptr;

TEST_F(TlsTest, BearerTokenOverTlsRunsAKernelAndReadsBack) {
  TestClient bob = Tls(nullptr, kBobToken);
  v1::OpenSessionResponse session;
  ASSERT_EQ(bob.OpenSession(&session).error_code(), kOk) << daemon().log();

  v1::AllocateBufferRequest alloc;
  alloc.set_session_id(session.session_id());
  alloc.set_id(1);
  alloc.set_size_bytes(64);
  v1::AllocateBufferResponse allocated;
  grpc::Status s =
      bob.Call(&v1::GpuStream::Stub::AllocateBuffer, alloc, &allocated);
  ASSERT_TRUE(s.ok()) << s.error_message();

  v1::LaunchKernelRequest launch;
  launch.set_session_id(session.session_id());
  launch.set_queue_id(session.default_queue_id());
  launch.set_module("samples");
  launch.set_kernel("fill_u32");
  launch.mutable_grid()->set_x(1);
  launch.mutable_block()->set_x(16);
  launch.add_args()->mutable_buffer()->set_buffer_id(1);
  launch.add_args()->set_u32(0xC0FFEE);
  launch.add_args()->set_u64(16);
  v1::LaunchKernelResponse launched;
  s = bob.Call(&v1::GpuStream::Stub::LaunchKernel, launch, &launched);
  ASSERT_TRUE(s.ok()) << s.error_message();

  v1::ReadBufferRequest read;
  read.set_session_id(session.session_id());
  read.set_queue_id(session.default_queue_id());
  read.set_buffer_id(1);
  read.set_size(64);
  v1::ReadBufferResponse data;
  s = bob.Call(&v1::GpuStream::Stub::ReadBuffer, read, &data);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(data.data().size(), 64u);
  for (int i = 0; i < 16; ++i) {
    uint32_t v;
    std::memcpy(&v, data.data().data() + 4 * i, 4);
    EXPECT_EQ(v, 0xC0FFEEu) << i;
  }
  EXPECT_TRUE(bob.CloseSession(session.session_id()).ok());
}

TEST_F(TlsTest, PlaintextClientOnTheTlsPortIsUnavailable) {
  TestClient plain(PlainChannel(daemon().tcp_target()), kBobToken);
  v1::OpenSessionResponse session;
  EXPECT_EQ(plain.OpenSession(&session).error_code(), kUnavailable);
}

// The C++ client's Connect fails at once, naming the target and the cause,
// where the daemon cannot be reached; the target and token may come from
// $GPUSTREAM_TARGET and $GPUSTREAM_TOKEN.
TEST_F(TlsTest, ClientConnectNamesWhyItCannotConnect) {
  const absl::Time start = absl::Now();
  auto plain =
      client::Client::Connect(daemon().tcp_target(), {.token = kBobToken});
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(plain.status().message()),
              ::testing::StartsWith(absl::StrCat(
                  "connect to ", daemon().tcp_target(),
                  ": TLS handshake failed: the server wants TLS")));
  auto tls = client::TlsOptions::FromFiles(certs().ca_cert, "", "");
  ASSERT_TRUE(tls.ok()) << tls.status();
  auto over_tls = client::Client::Connect(daemon().unix_target(),
                                          {.token = kBobToken, .tls = *tls});
  EXPECT_EQ(over_tls.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(over_tls.status().message()),
              HasSubstr("TLS handshake failed: the server does not speak "
                        "TLS"));
  const std::string missing = "unix:" + testing::TempPath(".none.sock");
  auto nobody = client::Client::Connect(missing);
  EXPECT_EQ(nobody.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(nobody.status().message()),
              ::testing::StartsWith(
                  absl::StrCat("connect to ", missing, ": no such socket")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  setenv("GPUSTREAM_TARGET", daemon().unix_target().c_str(), 1);
  setenv("GPUSTREAM_TOKEN", kBobToken, 1);
  auto from_env = client::Client::Connect();
  unsetenv("GPUSTREAM_TARGET");
  unsetenv("GPUSTREAM_TOKEN");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  auto session = from_env->open_session({.client_name = "from-env"});
  EXPECT_TRUE(session.ok()) << session.status();
}

TEST_F(TlsTest, ClientCertificateAuthenticatesItsTenantWithoutAToken) {
  TestClient alice = Tls(&certs().alice);
  v1::OpenSessionResponse session;
  grpc::Status s = alice.OpenSession(&session);
  ASSERT_EQ(s.error_code(), kOk) << s.error_message();
  EXPECT_TRUE(alice.KeepAlive(session.session_id()).ok());
  // The session is alice's: bob (authenticated by his token) cannot see it.
  TestClient bob = Tls(nullptr, kBobToken);
  EXPECT_EQ(bob.KeepAlive(session.session_id()).error_code(), kNotFound);
  EXPECT_EQ(bob.CloseSession(session.session_id()).error_code(), kNotFound);
  EXPECT_TRUE(alice.CloseSession(session.session_id()).ok());
}

TEST_F(TlsTest, CertificateOfAnUnknownSubjectIsUnauthenticated) {
  TestClient mallory = Tls(&certs().mallory);
  v1::OpenSessionResponse session;
  grpc::Status s = mallory.OpenSession(&session);
  EXPECT_EQ(s.error_code(), kUnauthenticated) << s.error_message();
  // The subject reached the registry in the documented (RFC 2253) form.
  EXPECT_THAT(s.error_message(), HasSubstr("CN=mallory"));
}

TEST_F(TlsTest, CertificateNotFromTheCaFailsTheHandshake) {
  // Claims CN=alice, but is self-signed.
  TestClient rogue = Tls(&certs().rogue_alice);
  v1::OpenSessionResponse session;
  EXPECT_EQ(rogue.OpenSession(&session).error_code(), kUnavailable);
}

TEST_F(TlsTest, NoCredentialsAtAllIsUnauthenticated) {
  TestClient anonymous = Tls(nullptr);
  v1::OpenSessionResponse session;
  EXPECT_EQ(anonymous.OpenSession(&session).error_code(), kUnauthenticated);
}

TEST_F(TlsTest, WrongTokenIsUnauthenticated) {
  TestClient wrong = Tls(nullptr, "not-bobs-token");
  v1::OpenSessionResponse session;
  EXPECT_EQ(wrong.OpenSession(&session).error_code(), kUnauthenticated);
  // Nor does a malformed authorization header count as no header.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  ctx.AddMetadata("authorization", "Basic YWxpY2U6YWxpY2U=");
  auto stub = v1::GpuStream::NewStub(
      TlsChannel(daemon().tcp_target(), certs().ca_cert, &certs().alice));
  EXPECT_EQ(stub->OpenSession(&ctx, {}, &session).error_code(),
            kUnauthenticated);
}

TEST_F(TlsTest, UnixSocketStaysPlaintextAndTakesTokens) {
  TestClient bob(PlainChannel(daemon().unix_target()), kBobToken);
  v1::OpenSessionResponse session;
  grpc::Status s = bob.OpenSession(&session);
  ASSERT_EQ(s.error_code(), kOk) << s.error_message();
  EXPECT_TRUE(bob.CloseSession(session.session_id()).ok());
  TestClient anonymous(PlainChannel(daemon().unix_target()));
  EXPECT_EQ(anonymous.OpenSession(&session).error_code(), kUnauthenticated);
}

TEST_F(TlsTest, UnixSocketIsOwnerAndGroupOnlyByDefault) {
  const SocketFile f = StatSocket(daemon().unix_target());
  ASSERT_TRUE(f.ok);
  EXPECT_TRUE(f.is_socket);
  EXPECT_EQ(f.mode, 0660u) << std::oct << f.mode;
}

TEST_F(TlsTest, StartLogSaysHowEachListenerIsSecured) {
  EXPECT_THAT(daemon().log(),
              HasSubstr(absl::StrCat(
                  "event=listening address=", daemon().tcp_target(),
                  " security=\"TLS, client certificates verified\"")));
}

// ---------------------------------------------------------------------------
// Daemons of their own.

// Runs gpustreamd with `args` (and a listen address unless given) until it
// exits, which a refused start does at once.
int RunDaemon(std::vector<std::string> args, std::string* output) {
  args.insert(args.begin(), RunfilePath("server/gpustreamd"));
  args.push_back("--backend=cpu");
  args.push_back("--cpu_memory_bytes=16777216");
  return RunCommand(args, output, absl::Seconds(30));
}

TEST(TlsListenTest, RefusesPlaintextTcpOffLoopback) {
  for (const std::string address : {"0.0.0.0:0", "[::]:0"}) {
    std::string output;
    EXPECT_EQ(RunDaemon({absl::StrCat("--listen=", address)}, &output), 2)
        << output;
    EXPECT_THAT(output, HasSubstr(address));
    EXPECT_THAT(output, HasSubstr("--allow_insecure_tcp"));
    EXPECT_THAT(output, HasSubstr("--tls_cert"));
  }
}

TEST(TlsListenTest, AllowInsecureTcpServesEveryAddress) {
  const std::string ready = TempPath(".ready");
  const std::string log = TempPath(".log");
  const pid_t pid = testing::StartProcess(
      {RunfilePath("server/gpustreamd"), "--listen=0.0.0.0:0",
       "--allow_insecure_tcp", "--backend=cpu", "--cpu_memory_bytes=16777216",
       absl::StrCat("--ready_file=", ready)},
      log);
  ASSERT_GT(pid, 0);
  std::string address;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (address.empty() && absl::Now() < deadline) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
    std::vector<std::string> lines =
        absl::StrSplit(testing::ReadTextFile(ready), '\n', absl::SkipEmpty());
    if (!lines.empty()) address = lines[0];
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::string logged = testing::ReadTextFile(log);
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port))
      << address << "\n"
      << logged;
  if (port != 0) {
    // No tenants: any caller is "default", over plaintext.
    TestClient client(PlainChannel(absl::StrCat("127.0.0.1:", port)));
    v1::GetVersionResponse version;
    grpc::Status s =
        client.Call(&v1::GpuStream::Stub::GetVersion, {}, &version);
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << logged;
  }
  kill(pid, SIGTERM);
  if (testing::WaitForExit(pid, absl::Seconds(30)) == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  unlink(ready.c_str());
  unlink(log.c_str());
}

TEST(TlsListenTest, LoopbackNeedsNoTls) {
  std::string output;
  // The plaintext-TCP rule is checked before the socket group, so a start
  // refused for its group (without binding anything) passed the rule.
  EXPECT_EQ(RunDaemon({"--listen=localhost:0,LOCALHOST:0,[::1]:0,127.0.0.2:0,"
                       "[::ffff:127.0.0.1]:0",
                       "--unix_socket_group=no-such-group-9f3e"},
                      &output),
            2);
  EXPECT_THAT(output, HasSubstr("--unix_socket_group=no-such-group-9f3e"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("--allow_insecure_tcp")));
  // The same with one address that is not loopback: the rule speaks.
  EXPECT_EQ(RunDaemon({"--listen=localhost:0,192.0.2.1:0",
                       "--unix_socket_group=no-such-group-9f3e"},
                      &output),
            2);
  EXPECT_THAT(output, HasSubstr("192.0.2.1:0"));
  EXPECT_THAT(output, HasSubstr("--allow_insecure_tcp"));
}

TEST(UnixSocketTest, ModeAndGroupAreApplied) {
  auto daemon =
      DaemonProcess::Start({"--backend=cpu", "--unix_socket_mode=0600"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  SocketFile f = StatSocket((*daemon)->unix_target());
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.mode, 0600u) << std::oct << f.mode;
  daemon->reset();

  // Our own primary group: one we may give files to.
  const struct group* own = getgrgid(getgid());
  ASSERT_NE(own, nullptr);
  daemon = DaemonProcess::Start(
      {"--backend=cpu", "--unix_socket_mode=640",
       absl::StrCat("--unix_socket_group=", own->gr_name)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  f = StatSocket((*daemon)->unix_target());
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.mode, 0640u) << std::oct << f.mode;
  EXPECT_EQ(f.gid, getgid());
  TestClient client(PlainChannel((*daemon)->unix_target()));
  v1::GetVersionResponse version;
  EXPECT_TRUE(client.Call(&v1::GpuStream::Stub::GetVersion, {}, &version).ok());
}

TEST(UnixSocketTest, BadModeOrGroupIsRefused) {
  const std::string listen = absl::StrCat("--listen=unix:", TempPath(".sock"));
  std::string output;
  for (const char* mode : {"999", "01777", "rw", ""}) {
    EXPECT_EQ(
        RunDaemon({listen, absl::StrCat("--unix_socket_mode=", mode)}, &output),
        2)
        << mode;
    EXPECT_THAT(output, HasSubstr("--unix_socket_mode")) << mode;
  }
  EXPECT_EQ(
      RunDaemon({listen, "--unix_socket_group=no-such-group-9f3e"}, &output),
      2);
  EXPECT_THAT(output, HasSubstr("--unix_socket_group=no-such-group-9f3e"));
}

// Bad transport flags stop the daemon at start, naming flag and path.
class TlsFlagsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TestDir() + "/flags");
    mkdir(dir_->c_str(), 0700);
    auto certs = testing::GenerateTestCerts(*dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new TestCerts(*certs);
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(certs_, nullptr); }

  // Exit code of a start with `args`; `output` gets what it said.
  int Start(std::vector<std::string> args, std::string* output) {
    args.push_back(
        absl::StrCat("--listen=unix:", TempPath(".sock"), ",127.0.0.1:0"));
    return RunDaemon(args, output);
  }

  static std::string* dir_;
  static TestCerts* certs_;
};

std::string* TlsFlagsTest::dir_ = nullptr;
TestCerts* TlsFlagsTest::certs_ = nullptr;

TEST_F(TlsFlagsTest, MissingCertificateFile) {
  std::string output;
  const std::string missing = *dir_ + "/missing.pem";
  EXPECT_EQ(Start({"--tls_cert=" + missing, "--tls_key=" + certs_->server.key},
                  &output),
            2);
  EXPECT_THAT(output, HasSubstr("--tls_cert=" + missing));
  EXPECT_THAT(output, HasSubstr("No such file"));
}

// A config error at start names the file, line, column and field (exit 2).
TEST_F(TlsFlagsTest, ConfigErrorNamesItsPlace) {
  const std::string config = *dir_ + "/bad.textproto";
  std::ofstream(config) << "backend: \"cpu\"\nlimits {\n  max_sesions: 3\n}\n";
  std::string output;
  EXPECT_EQ(Start({"--config=" + config}, &output), 2);
  EXPECT_THAT(output, HasSubstr(absl::StrCat(
                          "--config ", config,
                          ": line 3, column 14: Message type "
                          "\\\"gpustream.v1.ServerLimits\\\" has no field "
                          "named \\\"max_sesions\\\".")))
      << output;
  // A tenant error names the file and the field.
  std::ofstream(config) << "tenants { name: \"local-operator\" }\n";
  EXPECT_EQ(Start({"--config=" + config}, &output), 2);
  EXPECT_THAT(output, HasSubstr(absl::StrCat(
                          "--config ", config,
                          ": tenants[0].name 'local-operator' is reserved")))
      << output;
  // 0 is not a default: refused, naming the flag.
  EXPECT_EQ(Start({"--lease_seconds=0"}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--lease_seconds=0: want a positive value"));
}

TEST_F(TlsFlagsTest, KeyOfAnotherCertificate) {
  std::string output;
  EXPECT_EQ(Start({"--tls_cert=" + certs_->server.cert,
                   "--tls_key=" + certs_->alice.key},
                  &output),
            2);
  EXPECT_THAT(output, HasSubstr("--tls_key=" + certs_->alice.key));
  EXPECT_THAT(output, HasSubstr("--tls_cert=" + certs_->server.cert));
}

TEST_F(TlsFlagsTest, NotPem) {
  std::string output;
  const std::string junk = WriteFile(*dir_ + "/junk.pem", "not a cert\n");
  EXPECT_EQ(
      Start({"--tls_cert=" + junk, "--tls_key=" + certs_->server.key}, &output),
      2);
  EXPECT_THAT(output, HasSubstr("--tls_cert=" + junk));
  EXPECT_EQ(Start({"--tls_cert=" + certs_->server.cert, "--tls_key=" + junk},
                  &output),
            2);
  EXPECT_THAT(output, HasSubstr("--tls_key=" + junk));
  EXPECT_EQ(Start({"--tls_cert=" + certs_->server.cert,
                   "--tls_key=" + certs_->server.key,
                   "--tls_client_ca=" + certs_->server.key},
                  &output),
            2);
  EXPECT_THAT(output, HasSubstr("--tls_client_ca=" + certs_->server.key));
}

TEST_F(TlsFlagsTest, FlagsThatNeedEachOther) {
  std::string output;
  EXPECT_EQ(Start({"--tls_cert=" + certs_->server.cert}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--tls_key"));
  EXPECT_EQ(Start({"--tls_client_ca=" + certs_->ca_cert}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--tls_client_ca"));
}

TEST(TlsHelpTest, HelpDocumentsTheTransportFlags) {
  std::string output;
  RunCommand({RunfilePath("server/gpustreamd"), "--help"}, &output);
  for (const char* flag :
       {"tls_cert", "tls_key", "tls_client_ca", "allow_insecure_tcp",
        "unix_socket_mode", "unix_socket_group"}) {
    EXPECT_THAT(output, HasSubstr(flag));
  }
  // The program named once, real defaults, and --version.
  EXPECT_THAT(output, ::testing::StartsWith("gpustreamd: serves GPU streams"));
  EXPECT_THAT(output, Not(HasSubstr("gpustreamd: gpustreamd")));
  EXPECT_THAT(output, HasSubstr("default: unix:/tmp/gpustreamd.sock;"));
  EXPECT_THAT(output, HasSubstr("default: \"auto\";"));
  EXPECT_THAT(output, HasSubstr("default: \"libcuda.so.1\";"));
  EXPECT_THAT(output, HasSubstr("default: 1073741824;"));
  EXPECT_THAT(output, HasSubstr("default: 60000;"));
  EXPECT_THAT(output, HasSubstr("default: \"0660\";"));
  std::string version;
  EXPECT_EQ(
      RunCommand({RunfilePath("server/gpustreamd"), "--version"}, &version), 0);
  EXPECT_EQ(version, absl::StrCat("gpustreamd ", kServerVersion, "\n"));
}

}  // namespace
}  // namespace gpustream
