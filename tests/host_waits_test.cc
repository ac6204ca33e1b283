// Host waits against one real gpustreamd, on every backend: what a wait
// holds (a host-wait slot, a watch, a parked queue, a response) is bounded,
// and released when the wait times out or its caller goes away, not when
// the awaited work completes. Part of the tenancy suite (its fixture and
// instantiation).
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/daemon_process.h"
#include "tests/tenancy_fixture.h"

namespace gpustream {
namespace {

using grpc::StatusCode;
using testing::TenancyTest;

// One asynchronous unary call: its context, status, reader and response.
struct AsyncCall {
  std::unique_ptr<grpc::ClientContext> ctx;
  grpc::Status status;
  std::shared_ptr<void> reader_and_response;

  // Frees it now, the reader first (it lives in the call's arena, which the
  // context's destruction frees).
  void Release() {
    reader_and_response.reset();
    ctx.reset();
  }
};

// Starts `rpc(req)` on `call` (its context set), completing to `tag`.
template <typename Req, typename Resp>
void StartAsync(v1::GpuStream::Stub* stub,
                std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> (
                    v1::GpuStream::Stub::*rpc)(grpc::ClientContext*, const Req&,
                                               grpc::CompletionQueue*),
                const Req& req, grpc::CompletionQueue* cq, void* tag,
                AsyncCall& call) {
  struct Held {
    std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader;
    Resp resp;
  };
  auto held = std::make_shared<Held>();
  held->reader = (stub->*rpc)(call.ctx.get(), req, cq);
  held->reader->Finish(&held->resp, &call.status, tag);
  call.reader_and_response = std::move(held);
}

TEST_P(TenancyTest, QueuesDestroyedWhileParkedAreBoundedAndCostNoThreads) {
  const v1::OpenSessionResponse alice = Open("alice");
  ASSERT_NO_FATAL_FAILURE(Gate(alice, "alice"));  // Flag 1, never signalled.
  const int threads_before =
      testing::ProcStatusValue(daemon_->pid(), "Threads");
  grpc::Status refused;
  int destroyed = 0;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    v1::CreateQueueRequest create;
    create.set_session_id(alice.session_id());
    v1::CreateQueueResponse created;
    refused = stub_->CreateQueue(As("alice").get(), create, &created);
    if (!refused.ok()) break;
    v1::WaitHostValueRequest wait;
    wait.set_session_id(alice.session_id());
    wait.set_queue_id(created.queue_id());
    wait.set_flag_id(1);
    wait.set_value(1);
    v1::WaitHostValueResponse waiting;
    ASSERT_TRUE(stub_->WaitHostValue(As("alice").get(), wait, &waiting).ok());
    // The destroy parks until the queue drains (never, here): give up on
    // the answer, not on the destroy. A deadline can pass before the
    // handler starts (slow sanitizer builds), so retry until the queue's id
    // is gone; a destroy that did start answers NOT_FOUND when repeated.
    v1::DestroyQueueRequest destroy;
    destroy.set_session_id(alice.session_id());
    destroy.set_queue_id(created.queue_id());
    v1::QueryQueueRequest query;
    query.set_session_id(alice.session_id());
    query.set_queue_id(created.queue_id());
    bool gone = false;
    for (int attempt = 0; attempt < 50 && !gone; ++attempt) {
      v1::DestroyQueueResponse answer;
      auto ctx = As("alice");
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(50));
      const StatusCode code =
          stub_->DestroyQueue(ctx.get(), destroy, &answer).error_code();
      ASSERT_TRUE(code == StatusCode::DEADLINE_EXCEEDED ||
                  (attempt > 0 && code == StatusCode::NOT_FOUND))
          << "destroy of a parked queue answered " << code;
      v1::QueryQueueResponse state;
      gone = stub_->QueryQueue(As("alice").get(), query, &state).error_code() ==
             StatusCode::NOT_FOUND;
    }
    ASSERT_TRUE(gone) << "queue " << created.queue_id() << " never destroyed";
    ++destroyed;
  }
  // 64 queues a session (the default one counts), draining ones included.
  EXPECT_EQ(destroyed, 63);
  EXPECT_EQ(refused.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(),
                                "63 of them destroyed and still draining"))
      << refused.error_message();
  // (The fake CUDA driver emulates each stream with a thread of its own, so
  // only the CPU backend's count says something about the daemon. gRPC's
  // own pool may grow by a few threads while it answers the cancelled
  // destroys; 63 parked queues with a thread each would add 63.)
  if (on_cpu()) {
    EXPECT_LE(testing::ProcStatusValue(daemon_->pid(), "Threads"),
              threads_before + 8)
        << "a parked queue holds no thread";
  }
  EXPECT_EQ(Stats("alice").queues(), 64u);
  // Closing the session releases them all.
  v1::CloseSessionRequest close;
  close.set_session_id(alice.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(As("alice").get(), close, &closed).ok());
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(10), [&] {
    const v1::TenantStats t = Stats("alice");
    return t.queues() == 0 && t.sessions() == 0 && t.inflight_commands() == 0;
  }));
}

// A host wait that times out leaves nothing behind: its watch on the event
// or queue and its pending-wait charge (8192 a tenant) go with the timeout,
// not when the awaited work completes (never, here).
TEST_P(TenancyTest, TimedOutSynchronizesLeaveNoWatchBehind) {
  const v1::OpenSessionResponse alice = Open("alice");
  ASSERT_NO_FATAL_FAILURE(Gate(alice, "alice"));  // Flag 1, never signalled.
  ASSERT_NO_FATAL_FAILURE(EventBehindGate(alice, "alice", 2));

  // More timed-out waits than the tenant may have pending at once, half on
  // the event and half on the gated queue, a window of them in flight.
  constexpr int kWaits = 9000;
  constexpr int kWindow = 256;
  grpc::CompletionQueue cq;
  std::vector<AsyncCall> calls(kWaits);
  int started = 0, finished = 0, timed_out = 0;
  std::string first_other;  // The first answer that was not the timeout.
  auto start = [&](int i) {
    AsyncCall& c = calls[i];
    c.ctx = As("alice");
    void* tag = reinterpret_cast<void*>(intptr_t{i});
    if (i % 2 == 0) {
      v1::SynchronizeEventRequest req;
      req.set_session_id(alice.session_id());
      req.set_event_id(2);
      req.set_timeout_ms(1);
      StartAsync(stub_.get(), &v1::GpuStream::Stub::AsyncSynchronizeEvent, req,
                 &cq, tag, c);
    } else {
      v1::SynchronizeQueueRequest req;
      req.set_session_id(alice.session_id());
      req.set_queue_id(alice.default_queue_id());
      req.set_timeout_ms(1);
      StartAsync(stub_.get(), &v1::GpuStream::Stub::AsyncSynchronizeQueue, req,
                 &cq, tag, c);
    }
  };
  while (started < std::min(kWindow, kWaits)) start(started++);
  void* tag;
  bool ok;
  while (finished < kWaits && cq.Next(&tag, &ok)) {
    AsyncCall& c = calls[reinterpret_cast<intptr_t>(tag)];
    ++finished;
    // The daemon's timeout, not the client's deadline.
    const bool daemon_timed_out =
        c.status.error_code() == StatusCode::DEADLINE_EXCEEDED &&
        absl::StrContains(c.status.error_message(), "timeout_ms");
    timed_out += daemon_timed_out;
    if (!daemon_timed_out && first_other.empty()) {
      first_other =
          absl::StrCat("wait ", reinterpret_cast<intptr_t>(tag), ": ",
                       c.status.error_code(), " ", c.status.error_message());
    }
    c.Release();  // Its memory goes now, not at the end.
    if (started < kWaits) start(started++);
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(timed_out, kWaits) << first_other;
  // Still room to wait: each timeout gave its charge back.
  v1::SynchronizeEventRequest more;
  more.set_session_id(alice.session_id());
  more.set_event_id(2);
  more.set_timeout_ms(1);
  v1::SynchronizeEventResponse resp;
  const grpc::Status again =
      stub_->SynchronizeEvent(As("alice").get(), more, &resp);
  EXPECT_EQ(again.error_code(), StatusCode::DEADLINE_EXCEEDED)
      << again.error_message();
  // And the gate still opens: the record completes, a wait returns OK.
  Ungate(alice, "alice", 1);
  more.set_timeout_ms(20000);
  const grpc::Status done =
      stub_->SynchronizeEvent(As("alice").get(), more, &resp);
  EXPECT_TRUE(done.ok()) << done.error_message();
}

// A unary wait whose client goes away (here: its deadline passes) ends then,
// not when the awaited thing happens (never, here): its host-wait slot,
// watch and response are released at once. 20,000 abandoned WaitFlags are
// more than the tenant may have pending (8192); then some of each other
// waiting call. Under ThreadSanitizer, where a call costs a hundred times
// more, a tenth of them with ten times the deadline: the same paths, raced,
// within the test command's time (the limit is proved by the other builds).
TEST_P(TenancyTest, AbandonedUnaryWaitsAreReleasedAtOnce) {
  const bool tsan = std::getenv("GPUSTREAM_TSAN") != nullptr;
  const int scale = tsan ? 10 : 1;
  const auto deadline = std::chrono::milliseconds(25 * scale);
  const v1::OpenSessionResponse alice = Open("alice");
  ASSERT_NO_FATAL_FAILURE(Gate(alice, "alice"));  // Flag 1, never signalled.
  ASSERT_NO_FATAL_FAILURE(EventBehindGate(alice, "alice", 2));
  v1::AllocateBufferRequest alloc;
  alloc.set_session_id(alice.session_id());
  alloc.set_id(3);
  alloc.set_size_bytes(1 << 20);
  v1::AllocateBufferResponse allocated;
  ASSERT_TRUE(stub_->AllocateBuffer(As("alice").get(), alloc, &allocated).ok());
  // Queues that wait on the gate, to be destroyed (the session's default
  // queue counts against its 64).
  constexpr int kDestroys = 16;
  for (int i = 0; i < kDestroys; ++i) {
    v1::CreateQueueRequest queue;
    queue.set_session_id(alice.session_id());
    queue.set_id(100 + i);
    v1::CreateQueueResponse made;
    ASSERT_TRUE(stub_->CreateQueue(As("alice").get(), queue, &made).ok());
    v1::WaitHostValueRequest wait;
    wait.set_session_id(alice.session_id());
    wait.set_queue_id(100 + i);
    wait.set_flag_id(1);
    wait.set_value(1);
    v1::WaitHostValueResponse waiting;
    ASSERT_TRUE(stub_->WaitHostValue(As("alice").get(), wait, &waiting).ok());
  }
  // Every call is one of these, with `deadline` and no timeout_ms (with
  // 5 ms most expire before the daemon runs them).
  enum Kind { kWaitFlag, kSyncQueue, kSyncEvent, kRead, kDestroy };
  // The abandoning client has a connection of its own (a local subchannel
  // pool), and the tenant's checks go over the fixture's. Once, in the
  // ThreadSanitizer build, a call made on the storm's connection right
  // after the storm found the connection reset, for a reason not found
  // (nothing in the daemon closes a connection it serves): the test prints
  // what a call on it gets afterwards, and requires the other to serve.
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const auto storm = v1::GpuStream::NewStub(grpc::CreateCustomChannel(
      daemon_->tcp_target(), grpc::InsecureChannelCredentials(),
      own_connection));
  const int kWaitFlags = 20000 / scale, kEachOther = 300 / scale;
  int destroys_started = 0;
  // Runs `kinds`, a window of them at a time; the calls that ended
  // DEADLINE_EXCEEDED, and in `first_other` the first that did not.
  std::string first_other;
  auto abandon = [&](const std::vector<Kind>& kinds) {
    grpc::CompletionQueue cq;
    std::vector<AsyncCall> calls(kinds.size());
    auto start = [&](size_t i) {
      AsyncCall& c = calls[i];
      c.ctx = As("alice");
      c.ctx->set_deadline(std::chrono::system_clock::now() + deadline);
      void* tag = reinterpret_cast<void*>(i);
      switch (kinds[i]) {
        case kWaitFlag: {
          v1::WaitFlagRequest req;
          req.set_session_id(alice.session_id());
          req.set_flag_id(1);
          req.set_value(1);
          StartAsync(storm.get(), &v1::GpuStream::Stub::AsyncWaitFlag, req, &cq,
                     tag, c);
          break;
        }
        case kSyncQueue: {
          v1::SynchronizeQueueRequest req;
          req.set_session_id(alice.session_id());
          req.set_queue_id(alice.default_queue_id());
          StartAsync(storm.get(), &v1::GpuStream::Stub::AsyncSynchronizeQueue,
                     req, &cq, tag, c);
          break;
        }
        case kSyncEvent: {
          v1::SynchronizeEventRequest req;
          req.set_session_id(alice.session_id());
          req.set_event_id(2);
          StartAsync(storm.get(), &v1::GpuStream::Stub::AsyncSynchronizeEvent,
                     req, &cq, tag, c);
          break;
        }
        case kRead: {
          v1::ReadBufferRequest req;
          req.set_session_id(alice.session_id());
          req.set_queue_id(alice.default_queue_id());
          req.set_buffer_id(3);
          req.set_size(64 << 10);
          StartAsync(storm.get(), &v1::GpuStream::Stub::AsyncReadBuffer, req,
                     &cq, tag, c);
          break;
        }
        case kDestroy: {
          v1::DestroyQueueRequest req;
          req.set_session_id(alice.session_id());
          req.set_queue_id(100 + destroys_started++);
          StartAsync(storm.get(), &v1::GpuStream::Stub::AsyncDestroyQueue, req,
                     &cq, tag, c);
          break;
        }
      }
    };
    constexpr size_t kWindow = 256;
    size_t started = 0, finished = 0;
    int deadline_exceeded = 0;
    while (started < std::min(kWindow, kinds.size())) start(started++);
    void* tag;
    bool ok;
    while (finished < kinds.size() && cq.Next(&tag, &ok)) {
      const size_t i = reinterpret_cast<size_t>(tag);
      AsyncCall& c = calls[i];
      ++finished;
      if (c.status.error_code() == StatusCode::DEADLINE_EXCEEDED) {
        ++deadline_exceeded;
      } else if (first_other.empty()) {
        first_other = absl::StrCat("call ", i, " (kind ", kinds[i],
                                   "): ", c.status.error_code(), " ",
                                   c.status.error_message());
      }
      c.Release();
      if (started < kinds.size()) start(started++);
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return deadline_exceeded;
  };

  // Some of each other kind, and some WaitFlags; then the 20,000.
  std::vector<Kind> kinds(kWaitFlags / 10, kWaitFlag);
  for (Kind k : {kSyncQueue, kSyncEvent, kRead}) {
    kinds.insert(kinds.end(), kEachOther, k);
  }
  kinds.insert(kinds.end(), kDestroys, kDestroy);
  EXPECT_EQ(abandon(kinds), static_cast<int>(kinds.size())) << first_other;
  const uint64_t rss_before = testing::RssBytes(daemon_->pid());
  EXPECT_EQ(abandon(std::vector<Kind>(kWaitFlags, kWaitFlag)), kWaitFlags)
      << first_other;
  // Every abandoned wait gave its slot back (the daemon notices a deadline
  // a moment after the client does).
  EXPECT_TRUE(
      testing::PollUntil(absl::Seconds(10 * scale),
                         [&] { return Stats("alice").host_waits() == 0; }))
      << Stats("alice").host_waits() << " host waits still pending";
  {
    v1::QueryQueueRequest query;
    query.set_session_id(alice.session_id());
    query.set_queue_id(alice.default_queue_id());
    v1::QueryQueueResponse state;
    const grpc::Status after =
        storm->QueryQueue(As("alice").get(), query, &state);
    std::printf("a call on the storm's connection after it: %d %s\n",
                after.error_code(), after.error_message().c_str());
  }
  // And the memory comes back: what the storm's calls took (those gRPC had
  // queued when their deadlines passed: up to hundreds of MB, with the
  // machine's load; 10 to 30 MB stay in use) goes back to the system once
  // it has stayed unused for a second (HeapTrimmer). Not under the
  // sanitizers, whose allocators keep freed memory on purpose.
  if (!testing::UnderSanitizer()) {
    uint64_t rss_after = 0;
    EXPECT_TRUE(
        testing::PollUntil(absl::Seconds(15),
                           [&] {
                             rss_after = testing::RssBytes(daemon_->pid());
                             return rss_after <= rss_before + (64ull << 20);
                           }))
        << "the daemon kept the storm's memory: " << (rss_before >> 10)
        << " kB before, " << (rss_after >> 10) << " kB after";
    std::printf("daemon RSS: %llu kB before the storm, %llu kB after it\n",
                static_cast<unsigned long long>(rss_before >> 10),
                static_cast<unsigned long long>(rss_after >> 10));
  }
  // The tenant still waits: its own timeout answers, not the wait limit.
  v1::WaitFlagRequest more;
  more.set_session_id(alice.session_id());
  more.set_flag_id(1);
  more.set_value(1);
  more.set_timeout_ms(1);
  v1::WaitFlagResponse resp;
  const grpc::Status again = stub_->WaitFlag(As("alice").get(), more, &resp);
  EXPECT_EQ(again.error_code(), StatusCode::DEADLINE_EXCEEDED)
      << again.error_message();
  EXPECT_TRUE(absl::StrContains(again.error_message(), "timeout_ms"))
      << again.error_message();
  // The abandoned destroys that reached the daemon (a call may expire
  // before it does) still happen once their queues drain: the tenant then
  // holds the default queue and those still found.
  Ungate(alice, "alice", 1);
  int found = 0;
  auto settled = [&] {
    found = 0;
    for (int i = 0; i < kDestroys; ++i) {
      v1::QueryQueueRequest query;
      query.set_session_id(alice.session_id());
      query.set_queue_id(100 + i);
      v1::QueryQueueResponse state;
      found += stub_->QueryQueue(As("alice").get(), query, &state).ok();
    }
    return Stats("alice").queues() == 1u + found;
  };
  EXPECT_TRUE(testing::PollUntil(absl::Seconds(10 * scale), settled))
      << Stats("alice").queues() << " queues, " << found << " found";
  more.set_timeout_ms(20000);
  const grpc::Status done = stub_->WaitFlag(As("alice").get(), more, &resp);
  EXPECT_TRUE(done.ok()) << done.error_message();
  EXPECT_EQ(resp.value(), 1u);
}

// A Submit stream whose client cancels it ends its waiting commands at once:
// their host-wait slots come back and the stream finishes, though the flag
// they wait for is never signalled.
TEST_P(TenancyTest, ACancelledStreamEndsItsWaits) {
  const v1::OpenSessionResponse alice = Open("alice");
  ASSERT_NO_FATAL_FAILURE(Gate(alice, "alice"));  // Flag 1, never signalled.
  constexpr int kWaits = 100;
  auto ctx = As("alice");
  auto stream = stub_->Submit(ctx.get());
  v1::SubmitRequest req;
  req.set_session_id(alice.session_id());
  for (int i = 0; i < kWaits; ++i) {
    v1::Command* command = req.add_commands();
    command->set_seq(i + 1);
    command->mutable_wait_flag()->set_flag_id(1);
    command->mutable_wait_flag()->set_value(1);
  }
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(testing::PollUntil(
      absl::Seconds(10), [&] { return Stats("alice").host_waits() == kWaits; }))
      << Stats("alice").host_waits() << " host waits";
  ctx->TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), StatusCode::CANCELLED);
  EXPECT_TRUE(testing::PollUntil(
      absl::Seconds(10), [&] { return Stats("alice").host_waits() == 0; }))
      << Stats("alice").host_waits() << " host waits still pending";
}

}  // namespace
}  // namespace gpustream
