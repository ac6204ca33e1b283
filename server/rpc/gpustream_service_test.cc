// Service tests over an in-process channel: unary RPCs, the Submit stream's
// pipelining contract, and notifications.
#include "server/rpc/gpustream_service.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/rpc/grpc_server.h"
#include "server/rpc/submit_reactor.h"

namespace gpustream::rpc {
namespace {

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<backend::Device>> devices;
    devices.push_back(std::make_unique<backend::CpuDevice>(
        backend::CpuDeviceOptions{1 << 20}));
    core_ = *session::ServerCore::Create(std::move(devices), {}, {});
    server_ = *GrpcServer::Start(*core_, {}, 64 << 20);
    stub_ = v1::GpuStream::NewStub(server_->InProcessChannel());
    grpc::ClientContext ctx;
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(stub_->OpenSession(&ctx, {}, &opened).ok());
    session_id_ = opened.session_id();
    queue_ = opened.default_queue_id();
  }

  void TearDown() override {
    core_->sessions().CloseAll();
    server_->Shutdown(absl::Seconds(1));
  }

  std::unique_ptr<session::ServerCore> core_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::string session_id_;
  uint64_t queue_ = 0;
};

TEST_F(ServiceTest, UnaryRoundTripComputesAndReadsBack) {
  grpc::ClientContext c1;
  v1::AllocateBufferRequest alloc;
  alloc.set_session_id(session_id_);
  alloc.set_id(1);
  alloc.set_size_bytes(64);
  v1::AllocateBufferResponse allocated;
  ASSERT_TRUE(stub_->AllocateBuffer(&c1, alloc, &allocated).ok());

  grpc::ClientContext c2;
  v1::LaunchKernelRequest launch;
  launch.set_session_id(session_id_);
  launch.set_queue_id(queue_);
  launch.set_module("samples");
  launch.set_kernel("fill_u32");
  launch.mutable_grid()->set_x(1);
  launch.mutable_block()->set_x(16);
  launch.add_args()->mutable_buffer()->set_buffer_id(1);
  launch.add_args()->set_u32(0xabcd);
  launch.add_args()->set_u64(16);
  v1::LaunchKernelResponse launched;
  ASSERT_TRUE(stub_->LaunchKernel(&c2, launch, &launched).ok());

  grpc::ClientContext c3;
  v1::ReadBufferRequest read;
  read.set_session_id(session_id_);
  read.set_queue_id(queue_);
  read.set_buffer_id(1);
  read.set_offset(60);
  read.set_size(4);
  v1::ReadBufferResponse data;
  ASSERT_TRUE(stub_->ReadBuffer(&c3, read, &data).ok());
  uint32_t v;
  std::memcpy(&v, data.data().data(), 4);
  EXPECT_EQ(v, 0xabcdu);
}

TEST_F(ServiceTest, VersionNegotiationNamesBothRanges) {
  grpc::ClientContext ok_ctx;
  v1::GetVersionRequest req;
  req.set_min_version(1);
  req.set_max_version(5);
  v1::GetVersionResponse resp;
  ASSERT_TRUE(stub_->GetVersion(&ok_ctx, req, &resp).ok());
  EXPECT_EQ(resp.version(), 1u);
  grpc::ClientContext bad_ctx;
  req.set_min_version(2);
  grpc::Status s = stub_->GetVersion(&bad_ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("[2, 5]"), std::string::npos);
  EXPECT_NE(s.error_message().find("[1, 1]"), std::string::npos);
}

// A waiting command does not hold up the commands behind it; plain
// successes travel only as completed_seq; failures name their seq.
TEST_F(ServiceTest, SubmitPipelinesAroundWaitingCommands) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Submit(&ctx);
  v1::SubmitRequest req;
  req.set_session_id(session_id_);
  auto add = [&](uint64_t seq) {
    auto* c = req.add_commands();
    c->set_seq(seq);
    return c;
  };
  add(1)->mutable_create_flag()->set_id(7);
  auto* gate = add(2)->mutable_wait_host_value();
  gate->set_queue_id(queue_);
  gate->set_flag_id(7);
  gate->set_value(1);
  add(3)->mutable_synchronize_queue()->set_queue_id(queue_);
  add(4)->mutable_read_flag()->set_flag_id(7);
  auto* bad = add(5)->mutable_launch_kernel();
  bad->set_queue_id(queue_);
  bad->set_module("samples");
  bad->set_kernel("no_such_kernel");
  ASSERT_TRUE(stream->Write(req));

  // Results of 4 and 5 come while 3 still waits on the flag.
  std::map<uint64_t, v1::CommandResult> results;
  uint64_t completed = 0;
  v1::SubmitResponse resp;
  while (completed < 5 || results.size() < 2) {
    ASSERT_TRUE(stream->Read(&resp));
    for (const auto& r : resp.results()) results[r.seq()] = r;
    completed = std::max(completed, resp.completed_seq());
  }
  EXPECT_EQ(results.count(3), 0u);
  EXPECT_EQ(results.count(1), 0u);  // A plain success: only acknowledged.
  EXPECT_EQ(results[4].read_flag().value(), 0u);
  EXPECT_EQ(results[5].status().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(results[5].status().message().find("no_such_kernel"),
            std::string::npos);

  req.clear_commands();
  auto* signal = add(6)->mutable_signal_flag();
  signal->set_flag_id(7);
  signal->set_value(1);
  ASSERT_TRUE(stream->Write(req));
  bool synced = false;
  while (!synced) {
    ASSERT_TRUE(stream->Read(&resp));
    for (const auto& r : resp.results()) {
      if (r.seq() == 3) {
        EXPECT_EQ(r.status().code(), 0);
        EXPECT_TRUE(r.has_synchronize_queue());
        synced = true;
      }
    }
  }
  stream->WritesDone();
  while (stream->Read(&resp)) {
  }  // Finish needs every message read.
  EXPECT_TRUE(stream->Finish().ok());
}

// A client that piles up waiting commands is refused past the limit, and
// everything it did send still completes.
// Waits held for a tenant (here synchronizes behind a gate) are bounded by
// tenants::Tenant::kMaxPendingWaits, below the stream's own kMaxInflight.
TEST_F(ServiceTest, SubmitRefusesWaitingCommandsPastTheLimit) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub_->Submit(&ctx);
  v1::SubmitRequest req;
  req.set_session_id(session_id_);
  uint64_t seq = 0;
  auto* create = req.add_commands();
  create->set_seq(++seq);
  create->mutable_create_flag()->set_id(9);
  auto* gate = req.add_commands();
  gate->set_seq(++seq);
  gate->mutable_wait_host_value()->set_queue_id(queue_);
  gate->mutable_wait_host_value()->set_flag_id(9);
  gate->mutable_wait_host_value()->set_value(1);
  ASSERT_TRUE(stream->Write(req));
  constexpr int kLimit = tenants::Tenant::kMaxPendingWaits;
  static_assert(kLimit < SubmitReactor::kMaxInflight);
  const int kWaiting = kLimit + 1;
  for (int sent = 0; sent < kWaiting;) {
    req.clear_commands();
    for (int i = 0; i < 4096 && sent < kWaiting; ++i, ++sent) {
      auto* c = req.add_commands();
      c->set_seq(++seq);
      c->mutable_synchronize_queue()->set_queue_id(queue_);
    }
    ASSERT_TRUE(stream->Write(req));
  }
  v1::SubmitResponse resp;
  do {  // Skip plain acknowledgements of the earlier batches.
    ASSERT_TRUE(stream->Read(&resp));
  } while (resp.results_size() == 0);
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).seq(), seq);  // Only the last one is refused.
  EXPECT_EQ(resp.results(0).status().code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(resp.results(0).status().message().find(
                absl::StrCat("pending waits (synchronize and WaitFlag calls "
                             "not yet answered) exhausted: limit ",
                             kLimit)),
            std::string::npos)
      << resp.results(0).status().message();

  req.clear_commands();
  auto* signal = req.add_commands();
  signal->set_seq(++seq);
  signal->mutable_signal_flag()->set_flag_id(9);
  signal->mutable_signal_flag()->set_value(1);
  ASSERT_TRUE(stream->Write(req));
  int synced = 0;
  while (synced < kLimit && stream->Read(&resp)) {
    for (const auto& r : resp.results()) {
      EXPECT_EQ(r.status().code(), 0);
      synced += r.has_synchronize_queue();
    }
  }
  EXPECT_EQ(synced, kLimit);
  stream->WritesDone();
  while (stream->Read(&resp)) {
  }  // Finish needs every message read.
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServiceTest, SubmitWithUnknownSessionFailsTheStream) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Submit(&ctx);
  v1::SubmitRequest req;
  req.set_session_id("0123456789abcdef0123456789abcdef");
  req.add_commands()->set_seq(1);
  stream->Write(req);
  v1::SubmitResponse resp;
  while (stream->Read(&resp)) {
  }
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  // The field is named; the id, a secret, is never echoed.
  EXPECT_NE(s.error_message().find("unknown session_id"), std::string::npos);
  EXPECT_EQ(s.error_message().find("0123456789abcdef"), std::string::npos);
}

TEST_F(ServiceTest, HostFuncReachesTheNotificationStream) {
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
  v1::WatchNotificationsRequest watch;
  watch.set_session_id(session_id_);
  auto reader = stub_->WatchNotifications(&watch_ctx, watch);
  grpc::ClientContext ctx;
  v1::EnqueueHostFuncRequest req;
  req.set_session_id(session_id_);
  req.set_queue_id(queue_);
  req.set_callback_id(77);
  v1::EnqueueHostFuncResponse resp;
  ASSERT_TRUE(stub_->EnqueueHostFunc(&ctx, req, &resp).ok());
  v1::Notification n;
  ASSERT_TRUE(reader->Read(&n));
  EXPECT_EQ(n.host_func_reached().queue_id(), queue_);
  EXPECT_EQ(n.host_func_reached().callback_id(), 77u);
  // Closing the session ends the notification stream cleanly.
  grpc::ClientContext close_ctx;
  v1::CloseSessionRequest close;
  close.set_session_id(session_id_);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(&close_ctx, close, &closed).ok());
  EXPECT_FALSE(reader->Read(&n));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(ServiceTest, ListDevicesReportsFreeMemory) {
  grpc::ClientContext c1;
  v1::ListDevicesResponse before;
  ASSERT_TRUE(stub_->ListDevices(&c1, {}, &before).ok());
  ASSERT_EQ(before.devices_size(), 1);
  EXPECT_EQ(before.devices(0).backend(), "cpu");
  EXPECT_EQ(before.devices(0).total_memory_bytes(), 1u << 20);
  grpc::ClientContext c2;
  v1::AllocateBufferRequest alloc;
  alloc.set_session_id(session_id_);
  alloc.set_size_bytes(1000);
  v1::AllocateBufferResponse allocated;
  ASSERT_TRUE(stub_->AllocateBuffer(&c2, alloc, &allocated).ok());
  grpc::ClientContext c3;
  v1::ListDevicesResponse after;
  ASSERT_TRUE(stub_->ListDevices(&c3, {}, &after).ok());
  EXPECT_EQ(before.devices(0).free_memory_bytes() -
                after.devices(0).free_memory_bytes(),
            1000u);
}

}  // namespace
}  // namespace gpustream::rpc
