// End-to-end tests: gpustreamd as a real process, used over a unix socket
// and over TCP on 127.0.0.1 through the C++ client library.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/gpustream.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using client::Client;
using testing::DaemonProcess;

class EndToEndTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start({"--cpu_memory_bytes=67108864"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }
  // The parameter picks the transport: unix socket or TCP.
  std::string target() const {
    return GetParam() ? daemon_->tcp_target() : daemon_->unix_target();
  }

  std::unique_ptr<DaemonProcess> daemon_;
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
  ASSERT_TRUE((*alice)->default_queue().synchronize().ok());
  // Mallory names Alice's buffer id: it does not exist in her session.
  auto stolen = (*mallory)->default_queue().read(
      client::Buffer(nullptr, secret->id(), 16), 0, 16);
  ASSERT_FALSE(stolen.ok());
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kNotFound);
  // Alice's data is untouched and her session still works.
  auto mine = (*alice)->default_queue().read<uint32_t>(*secret, 4);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ((*mine)[3], 0x5ec7e7u);
}

INSTANTIATE_TEST_SUITE_P(Transports, EndToEndTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Tcp" : "Unix";
                         });

TEST(DaemonTest, HelpDocumentsEveryFlag) {
  std::string out;
  EXPECT_EQ(testing::RunCommand(
                {testing::RunfilePath("server/gpustreamd"), "--help"}, &out),
            1);  // absl's --help exits 1 after printing.
  for (const char* flag :
       {"--listen", "--backend", "--modules", "--config", "--cpu_memory_bytes",
        "--lease_seconds", "--ready_file"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
}

TEST(DaemonTest, OperatorModuleFolderIsLoaded) {
  const std::string folder = testing::RunfilePath("tests/modules");
  auto daemon = DaemonProcess::Start({"--modules=" + folder});
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

TEST(DaemonTest, ConfigFileSetsLimits) {
  const std::string config = testing::TempPath(".txtpb");
  {
    std::ofstream out(config);
    out << "cpu_memory_bytes: 4096\nlimits { max_sessions: 1 }\n";
  }
  auto daemon = DaemonProcess::Start({"--config=" + config});
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

TEST(DaemonTest, SigtermReleasesParkedWaitsWithUnavailable) {
  auto daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto c = Client::Connect((*daemon)->unix_target());
  ASSERT_TRUE(c.ok());
  auto session = c->open_session();
  ASSERT_TRUE(session.ok());
  client::Flag never = (*session)->create_flag();
  absl::Status waited;
  std::thread waiter([&] { waited = never.wait(1).status(); });
  absl::SleepFor(absl::Milliseconds(200));  // Let the wait park.
  EXPECT_EQ((*daemon)->Stop(SIGTERM), 0) << (*daemon)->log();
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
}

}  // namespace
}  // namespace gpustream
