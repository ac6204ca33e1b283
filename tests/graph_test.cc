// Graphs against a real gpustreamd on every backend: each capture rule and
// its error code, and replays that prove what a graph holds (buffers freed
// since), that a flag wait gates every replay, that launches of one graph
// on two queues never overlap, and that host functions notify on every
// replay.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream {
namespace {

using grpc::StatusCode;
using Stub = v1::GpuStream::Stub;

// Object ids this test mints.
constexpr uint64_t kCounter = 1, kSrc = 2, kDst = 3, kGate = 10, kHold = 11,
                   kQ1 = 20, kQ2 = 21, kInside = 30, kOutside = 31, kGraph = 40;

class GraphTest : public testing::BackendDaemonTest {
 protected:
  void SetUp() override {
    BackendDaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    stub_ = v1::GpuStream::NewStub(grpc::CreateChannel(
        daemon_->unix_target(), grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(
        Call(&Stub::OpenSession, v1::OpenSessionRequest(), &session_).ok());
    for (auto [id, size] : {std::pair{kCounter, 8}, {kSrc, 16}, {kDst, 16}}) {
      v1::AllocateBufferRequest alloc;
      alloc.set_id(id);
      alloc.set_size_bytes(size);
      v1::AllocateBufferResponse allocated;
      ASSERT_TRUE(Call(&Stub::AllocateBuffer, alloc, &allocated).ok());
    }
    for (uint64_t id : {kQ1, kQ2}) {
      v1::CreateQueueRequest create;
      create.set_id(id);
      v1::CreateQueueResponse created;
      ASSERT_TRUE(Call(&Stub::CreateQueue, create, &created).ok());
    }
    v1::CreateFlagRequest flag;
    flag.set_id(kGate);
    v1::CreateFlagResponse made;
    ASSERT_TRUE(Call(&Stub::CreateFlag, flag, &made).ok());
    for (uint64_t id : {kInside, kOutside}) {
      v1::CreateEventRequest event;
      event.set_id(id);
      v1::CreateEventResponse created;
      ASSERT_TRUE(Call(&Stub::CreateEvent, event, &created).ok());
    }
  }

  // A unary call in the test's session (its session_id filled in).
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&,
                                              Resp*),
                    Req req, Resp* resp) {
    if constexpr (requires { req.set_session_id(""); }) {
      req.set_session_id(session_.session_id());
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    return (stub_.get()->*rpc)(&ctx, req, resp);
  }
  // The same, for calls whose response is not looked at.
  template <typename Req, typename Resp>
  grpc::Status Do(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&,
                                            Resp*),
                  Req req) {
    Resp resp;
    return Call(rpc, std::move(req), &resp);
  }

  static void ExpectError(const grpc::Status& s, StatusCode code,
                          const std::string& words) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), words))
        << "'" << s.error_message() << "' lacks '" << words << "'";
  }

  grpc::Status BeginCapture(uint64_t queue) {
    v1::BeginCaptureRequest req;
    req.set_queue_id(queue);
    return Do(&Stub::BeginCapture, req);
  }
  grpc::Status EndCapture(uint64_t queue, uint64_t id = kGraph) {
    v1::EndCaptureRequest req;
    req.set_queue_id(queue);
    req.set_id(id);
    return Do(&Stub::EndCapture, req);
  }
  grpc::Status LaunchGraph(uint64_t queue, uint64_t graph = kGraph) {
    v1::LaunchGraphRequest req;
    req.set_queue_id(queue);
    req.set_graph_id(graph);
    return Do(&Stub::LaunchGraph, req);
  }
  grpc::Status AddToCounter(uint64_t queue, uint64_t value) {
    v1::LaunchKernelRequest req;
    req.set_queue_id(queue);
    req.set_module("samples");
    req.set_kernel("add_u64");
    req.mutable_grid()->set_x(1);
    req.mutable_block()->set_x(1);
    req.add_args()->mutable_buffer()->set_buffer_id(kCounter);
    req.add_args()->set_u64(value);
    return Do(&Stub::LaunchKernel, req);
  }
  grpc::Status Signal(uint64_t value) {
    v1::SignalFlagRequest req;
    req.set_flag_id(kGate);
    req.set_value(value);
    return Do(&Stub::SignalFlag, req);
  }
  grpc::Status Sync(uint64_t queue) {
    v1::SynchronizeQueueRequest req;
    req.set_queue_id(queue);
    req.set_timeout_ms(20'000);
    return Do(&Stub::SynchronizeQueue, req);
  }
  // Reads `size` bytes of `buffer` on the default queue (never captured
  // here, never gated).
  std::string Read(uint64_t buffer, uint64_t size) {
    v1::ReadBufferRequest req;
    req.set_queue_id(session_.default_queue_id());
    req.set_buffer_id(buffer);
    req.set_size(size);
    v1::ReadBufferResponse resp;
    grpc::Status s = Call(&Stub::ReadBuffer, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.data();
  }
  uint64_t Counter() {
    uint64_t value = ~uint64_t{0};
    const std::string bytes = Read(kCounter, 8);
    if (bytes.size() == 8) std::memcpy(&value, bytes.data(), 8);
    return value;
  }

  std::unique_ptr<Stub> stub_;
  v1::OpenSessionResponse session_;
};

TEST_P(GraphTest, EveryCaptureRuleHasItsCode) {
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(
      Call(&Stub::ListDevices, v1::ListDevicesRequest(), &devices).ok());
  EXPECT_TRUE(devices.devices(0).supports_graphs());

  ExpectError(EndCapture(kQ1), StatusCode::FAILED_PRECONDITION,
              "not capturing");
  ExpectError(LaunchGraph(kQ1, 99), StatusCode::NOT_FOUND, "graph_id 99");
  ExpectError(BeginCapture(77), StatusCode::NOT_FOUND, "queue_id 77");
  // An event recorded before the capture, outside it.
  v1::RecordEventRequest outside;
  outside.set_queue_id(kQ2);
  outside.set_event_id(kOutside);
  ASSERT_TRUE(Do(&Stub::RecordEvent, outside).ok());

  ASSERT_TRUE(BeginCapture(kQ1).ok());
  ExpectError(BeginCapture(kQ1), StatusCode::FAILED_PRECONDITION,
              "capturing already");
  ASSERT_TRUE(AddToCounter(kQ1, 1).ok());
  // Not capturable: INVALID_ARGUMENT.
  v1::WaitQueueRequest wait_queue;
  wait_queue.set_queue_id(kQ1);
  wait_queue.set_other_queue_id(kQ2);
  ExpectError(Do(&Stub::WaitQueue, wait_queue), StatusCode::INVALID_ARGUMENT,
              "WaitQueue cannot be captured");
  v1::WaitEventRequest wait_outside;
  wait_outside.set_queue_id(kQ1);
  wait_outside.set_event_id(kOutside);
  ExpectError(Do(&Stub::WaitEvent, wait_outside), StatusCode::INVALID_ARGUMENT,
              "not recorded within");
  // An event recorded within the capture may be waited on in it.
  v1::RecordEventRequest inside;
  inside.set_queue_id(kQ1);
  inside.set_event_id(kInside);
  ASSERT_TRUE(Do(&Stub::RecordEvent, inside).ok());
  v1::WaitEventRequest wait_inside;
  wait_inside.set_queue_id(kQ1);
  wait_inside.set_event_id(kInside);
  ASSERT_TRUE(Do(&Stub::WaitEvent, wait_inside).ok());
  // Waiting on the capturing queue or reading from it: FAILED_PRECONDITION
  // naming the capture.
  ExpectError(Sync(kQ1), StatusCode::FAILED_PRECONDITION, "capture");
  v1::QueryQueueRequest query;
  query.set_queue_id(kQ1);
  ExpectError(Do(&Stub::QueryQueue, query), StatusCode::FAILED_PRECONDITION,
              "capture");
  v1::ReadBufferRequest read;
  read.set_queue_id(kQ1);
  read.set_buffer_id(kCounter);
  read.set_size(8);
  ExpectError(Do(&Stub::ReadBuffer, read), StatusCode::FAILED_PRECONDITION,
              "capture");
  v1::DestroyQueueRequest destroy;
  destroy.set_queue_id(kQ1);
  ExpectError(Do(&Stub::DestroyQueue, destroy), StatusCode::FAILED_PRECONDITION,
              "capture");
  v1::WaitQueueRequest wait_on_capture;
  wait_on_capture.set_queue_id(kQ2);
  wait_on_capture.set_other_queue_id(kQ1);
  ExpectError(Do(&Stub::WaitQueue, wait_on_capture),
              StatusCode::FAILED_PRECONDITION, "capture");
  // A bad command is refused as ever, and recorded nowhere.
  v1::FillBufferRequest bad_fill;
  bad_fill.set_queue_id(kQ1);
  bad_fill.set_buffer_id(kDst);
  bad_fill.set_offset(8);
  bad_fill.set_size(16);
  ExpectError(Do(&Stub::FillBuffer, bad_fill), StatusCode::OUT_OF_RANGE,
              "buffer_id 3");
  ASSERT_TRUE(EndCapture(kQ1).ok());
  ExpectError(EndCapture(kQ2, kGraph + 1), StatusCode::FAILED_PRECONDITION,
              "not capturing");

  // Graphs do not nest.
  ASSERT_TRUE(BeginCapture(kQ2).ok());
  ExpectError(LaunchGraph(kQ2), StatusCode::INVALID_ARGUMENT, "do not nest");
  ASSERT_TRUE(EndCapture(kQ2, kGraph + 1).ok());
  ExpectError(EndCapture(kQ2, kGraph), StatusCode::FAILED_PRECONDITION,
              "not capturing");

  // Nothing captured ran; each launch runs what was accepted, once.
  EXPECT_EQ(Counter(), 0u);
  ASSERT_TRUE(LaunchGraph(kQ1).ok());
  ASSERT_TRUE(LaunchGraph(kQ1).ok());
  ASSERT_TRUE(LaunchGraph(kQ2, kGraph + 1).ok());  // Empty.
  ASSERT_TRUE(Sync(kQ1).ok());
  EXPECT_EQ(Counter(), 2u);
  v1::DestroyGraphRequest gone;
  gone.set_graph_id(kGraph);
  ASSERT_TRUE(Do(&Stub::DestroyGraph, gone).ok());
  ExpectError(LaunchGraph(kQ1), StatusCode::NOT_FOUND, "graph_id 40");
  ExpectError(Do(&Stub::DestroyGraph, gone), StatusCode::NOT_FOUND,
              "graph_id 40");
}

TEST_P(GraphTest, ReplaysHoldTheirBuffersWaitOnTheFlagAndNeverOverlap) {
  // Notifications of the captured host function, one per replay.
  grpc::ClientContext watch_ctx;
  // A lost notification fails the test rather than hanging it.
  watch_ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
  v1::WatchNotificationsRequest watch;
  watch.set_session_id(session_.session_id());
  auto notifications = stub_->WatchNotifications(&watch_ctx, watch);

  ASSERT_TRUE(BeginCapture(kQ1).ok());
  v1::WaitHostValueRequest gate;
  gate.set_queue_id(kQ1);
  gate.set_flag_id(kGate);
  gate.set_value(1);
  ASSERT_TRUE(Do(&Stub::WaitHostValue, gate).ok());
  v1::FillBufferRequest fill;
  fill.set_queue_id(kQ1);
  fill.set_buffer_id(kSrc);
  fill.set_size(16);
  fill.set_value(0xabcd0123);
  ASSERT_TRUE(Do(&Stub::FillBuffer, fill).ok());
  v1::CopyBufferRequest copy;
  copy.set_queue_id(kQ1);
  copy.set_src_buffer_id(kSrc);
  copy.set_dst_buffer_id(kDst);
  copy.set_size(16);
  ASSERT_TRUE(Do(&Stub::CopyBuffer, copy).ok());
  ASSERT_TRUE(AddToCounter(kQ1, 1).ok());
  // Closes the gate again: the next replay waits for the host once more.
  v1::WriteFlagRequest close;
  close.set_queue_id(kQ1);
  close.set_flag_id(kGate);
  close.set_value(0);
  ASSERT_TRUE(Do(&Stub::WriteFlag, close).ok());
  v1::EnqueueHostFuncRequest host;
  host.set_queue_id(kQ1);
  host.set_callback_id(77);
  ASSERT_TRUE(Do(&Stub::EnqueueHostFunc, host).ok());
  ASSERT_TRUE(EndCapture(kQ1).ok());

  // The graph keeps the source alive (and charged) past FreeBuffer.
  v1::FreeBufferRequest free_src;
  free_src.set_buffer_id(kSrc);
  ASSERT_TRUE(Do(&Stub::FreeBuffer, free_src).ok());

  // Each replay waits for the host to open the gate.
  for (uint64_t replay = 1; replay <= 2; ++replay) {
    ASSERT_TRUE(LaunchGraph(kQ1).ok());
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(Counter(), replay - 1) << "replay " << replay << " not gated";
    ASSERT_TRUE(Signal(1).ok());
    ASSERT_TRUE(Sync(kQ1).ok());
    EXPECT_EQ(Counter(), replay);
  }

  // Launches on two queues never overlap: with the first held back (by a
  // wait before it, outside the graph), the second does not start even
  // with its gate open.
  v1::CreateFlagRequest hold_flag;
  hold_flag.set_id(kHold);
  v1::CreateFlagResponse made;
  ASSERT_TRUE(Call(&Stub::CreateFlag, hold_flag, &made).ok());
  v1::WaitHostValueRequest hold;
  hold.set_queue_id(kQ1);
  hold.set_flag_id(kHold);
  hold.set_value(1);
  ASSERT_TRUE(Do(&Stub::WaitHostValue, hold).ok());
  ASSERT_TRUE(LaunchGraph(kQ1).ok());
  ASSERT_TRUE(LaunchGraph(kQ2).ok());
  ASSERT_TRUE(Signal(1).ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Counter(), 2u) << "the launch on queue 21 overlapped";
  v1::QueryQueueRequest query;
  query.set_queue_id(kQ2);
  v1::QueryQueueResponse state;
  ASSERT_TRUE(Call(&Stub::QueryQueue, query, &state).ok());
  EXPECT_FALSE(state.idle());
  v1::SignalFlagRequest release;
  release.set_flag_id(kHold);
  release.set_value(1);
  ASSERT_TRUE(Do(&Stub::SignalFlag, release).ok());
  ASSERT_TRUE(Sync(kQ1).ok());
  // The second launch's gate: a GPU queue may have seen the value stored
  // while it was enqueued already, a CPU queue looks when it gets there.
  ASSERT_TRUE(Signal(1).ok());
  ASSERT_TRUE(Sync(kQ2).ok());
  EXPECT_EQ(Counter(), 4u);

  std::string expected(16, '\0');
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = 0xabcd0123;
    std::memcpy(expected.data() + 4 * i, &word, 4);
  }
  EXPECT_EQ(Read(kDst, 16), expected);

  int reached = 0;
  v1::Notification n;
  while (reached < 4 && notifications->Read(&n)) {
    if (n.has_host_func_reached()) {
      EXPECT_EQ(n.host_func_reached().callback_id(), 77u);
      ++reached;
    }
  }
  EXPECT_EQ(reached, 4);
  watch_ctx.TryCancel();
}

INSTANTIATE_TEST_SUITE_P(Backends, GraphTest,
                         ::testing::ValuesIn(conformance::BackendsUnderTest()),
                         testing::BackendName);

}  // namespace
}  // namespace gpustream
