// A fixture for client tests: one gpustreamd process on the CPU backend
// (the clients behave alike on every backend), a C++ client connected over
// its unix socket, and one open session.
#ifndef GPUSTREAM_TESTS_CLIENT_FIXTURE_H_
#define GPUSTREAM_TESTS_CLIENT_FIXTURE_H_

#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/gpustream.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace gpustream::testing {

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override { StartDaemon(); }
  // A test may freeze the daemon (SIGSTOP); never leave it frozen.
  void TearDown() override {
    if (daemon_ != nullptr) kill(daemon_->pid(), SIGCONT);
  }

  // (Re)starts the daemon with `extra_args` and opens a session on it.
  void StartDaemon(std::vector<std::string> extra_args = {}) {
    session_.reset();
    extra_args.push_back("--backend=cpu");
    auto daemon = DaemonProcess::Start(extra_args);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto c = client::Client::Connect(daemon_->unix_target());
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*std::move(c));
    auto session = client_->open_session();
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
  }

  // Restarts the daemon with `config` (text-format ServerConfig) as its
  // --config file, plus `extra_args`.
  void StartDaemonWithConfig(const std::string& config,
                             std::vector<std::string> extra_args = {}) {
    const std::string path = absl::StrCat(
        ::testing::TempDir(), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
        ".textproto");
    std::ofstream(path) << config;
    extra_args.push_back("--config=" + path);
    StartDaemon(std::move(extra_args));
  }

  // A daemon that refuses requests over 4 MiB (the bound the client
  // promises to stay under).
  void StartSmallMessageDaemon(std::vector<std::string> extra_args = {}) {
    StartDaemonWithConfig("limits { max_message_bytes: 4194304 }\n",
                          std::move(extra_args));
  }

  // The flag's value read with a unary ReadFlag: it does not touch the
  // session's Submit stream, so it cannot push anything out.
  uint64_t ReadFlagUnary(const client::Flag& flag) {
    v1::ReadFlagRequest request;
    request.set_session_id(session_->id());
    request.set_flag_id(flag.id());
    v1::ReadFlagResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    const grpc::Status s =
        client_->stub().ReadFlag(&context, request, &response);
    return s.ok() ? response.value() : ~uint64_t{0};
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::optional<client::Client> client_;
  std::unique_ptr<client::Session> session_;
};

}  // namespace gpustream::testing

#endif  // GPUSTREAM_TESTS_CLIENT_FIXTURE_H_
