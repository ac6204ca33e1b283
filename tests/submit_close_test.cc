// The Submit stream's promise about closing: commands run in stream order,
// so commands after a close_session in the same stream fail with NOT_FOUND
// (the session is gone), never run on the closing session. Proved against
// a real gpustreamd process.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using ::testing::HasSubstr;

TEST(SubmitCloseTest, CommandsAfterCloseSessionInTheStreamFailNotFound) {
  auto daemon = testing::DaemonProcess::Start({"--backend=cpu"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = v1::GpuStream::NewStub(grpc::CreateChannel(
      (*daemon)->unix_target(), grpc::InsecureChannelCredentials()));
  // Several rounds: the close runs in the background, and a race with it
  // must not let a later command through.
  for (int round = 0; round < 5; ++round) {
    v1::OpenSessionResponse opened;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
      ASSERT_TRUE(stub->OpenSession(&ctx, {}, &opened).ok());
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    auto stream = stub->Submit(&ctx);
    v1::SubmitRequest request;
    request.set_session_id(opened.session_id());
    auto add = [&](uint64_t seq) {
      v1::Command* c = request.add_commands();
      c->set_seq(seq);
      return c;
    };
    add(1)->mutable_create_flag()->set_id(1);
    add(2)->mutable_close_session();
    add(3)->mutable_create_flag()->set_id(2);
    add(4)->mutable_synchronize_queue()->set_queue_id(
        opened.default_queue_id());
    add(5)->mutable_signal_flag()->set_flag_id(1);
    ASSERT_TRUE(stream->Write(request));
    stream->WritesDone();
    std::map<uint64_t, v1::CommandResult> results;
    v1::SubmitResponse response;
    while (stream->Read(&response)) {
      for (const auto& r : response.results()) results[r.seq()] = r;
    }
    (void)stream->Finish();
    ASSERT_TRUE(results.contains(2)) << "round " << round;
    EXPECT_EQ(results[2].status().code(), 0) << results[2].status().message();
    for (uint64_t seq : {3, 4, 5}) {
      ASSERT_TRUE(results.contains(seq)) << "round " << round << " seq " << seq;
      EXPECT_EQ(results[seq].status().code(), grpc::StatusCode::NOT_FOUND)
          << "round " << round << " seq " << seq << ": "
          << results[seq].status().message();
      EXPECT_THAT(results[seq].status().message(), HasSubstr("is closed"));
    }
  }
}

}  // namespace
}  // namespace gpustream
