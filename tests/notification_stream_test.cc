// What a client can make gpustreamd hold through its notification streams,
// and what it gets back across a break, against a real daemon on the CPU
// backend: notifications nobody watches, a watcher that does not read, and
// a stream resumed from the last id its client handled.
#include "tests/stream_bounds_fixture.h"

namespace gpustream {
namespace {

// Publishes host-function notifications with callback ids first..last on
// the test's queue, through one Submit stream, and waits until the queue
// has reached them all.
void PublishHostFuncs(v1::GpuStream::Stub& stub, const std::string& session_id,
                      uint64_t queue, uint64_t first, uint64_t last) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  std::unique_ptr<SubmitStream> stream = stub.Submit(&ctx);
  v1::SubmitRequest req;
  req.set_session_id(session_id);
  uint64_t seq = 0;
  for (uint64_t id = first; id <= last;) {
    req.clear_commands();
    for (int i = 0; i < 5000 && id <= last; ++i, ++id) {
      v1::Command* c = req.add_commands();
      c->set_seq(++seq);
      c->mutable_enqueue_host_func()->set_queue_id(queue);
      c->mutable_enqueue_host_func()->set_callback_id(id);
    }
    ASSERT_TRUE(stream->Write(req));
  }
  req.clear_commands();
  v1::Command* sync = req.add_commands();
  sync->set_seq(++seq);
  sync->mutable_synchronize_queue()->set_queue_id(queue);
  ASSERT_TRUE(stream->Write(req));
  stream->WritesDone();
  bool synced = false;
  v1::SubmitResponse resp;
  while (stream->Read(&resp)) {
    for (const auto& r : resp.results()) {
      EXPECT_EQ(r.status().code(), 0) << r.status().message();
      synced |= r.seq() == sync->seq();
    }
  }
  grpc::Status s = stream->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(synced);
}

// What a watcher reads: every host function in order, except runs replaced
// by a NotificationsDropped with their count.
struct NotificationWalk {
  uint64_t next_id = 1;
  uint64_t delivered = 0, dropped = 0, reports = 0;

  void Take(const v1::Notification& n) {
    if (n.has_notifications_dropped()) {
      EXPECT_GT(n.notifications_dropped().count(), 0u);
      ++reports;
      dropped += n.notifications_dropped().count();
      next_id += n.notifications_dropped().count();
      return;
    }
    ASSERT_TRUE(n.has_host_func_reached());
    EXPECT_EQ(n.host_func_reached().callback_id(), next_id);
    // The tests publish nothing else: the session's ids are the callbacks'.
    EXPECT_EQ(n.id(), n.host_func_reached().callback_id());
    next_id = n.host_func_reached().callback_id() + 1;
    ++delivered;
  }
};

// The stream goes on: the host function published next is what `reader`
// reads next. Then the stream ends.
void ReadsOnThenEnds(v1::GpuStream::Stub& stub, const std::string& session_id,
                     uint64_t queue, grpc::ClientContext& ctx,
                     grpc::ClientReader<v1::Notification>& reader,
                     NotificationWalk& walk) {
  const uint64_t next = walk.next_id;
  PublishHostFuncs(stub, session_id, queue, next, next);
  v1::Notification got;
  ASSERT_TRUE(reader.Read(&got));
  walk.Take(got);
  EXPECT_EQ(walk.next_id, next + 1);
  ctx.TryCancel();
  (void)reader.Finish();
}

// Nobody watches while 10000 host functions run: the session keeps the
// oldest 4096, and the watcher that comes later reads them, then one
// report of the other 5904, then what comes next.
TEST_F(StreamBoundsTest, BacklogKeepsTheBoundAndReportsTheRest) {
  constexpr uint64_t kPublished = 10000;
  PublishHostFuncs(*stub_, session_id_, queue_, 1, kPublished);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(60)));
  v1::WatchNotificationsRequest watch;
  watch.set_session_id(session_id_);
  auto reader = stub_->WatchNotifications(&ctx, watch);
  NotificationWalk walk;
  v1::Notification n;
  for (uint64_t i = 0; i < kBacklog + 1; ++i) {
    ASSERT_TRUE(reader->Read(&n)) << i;
    walk.Take(n);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(walk.delivered, kBacklog);
  EXPECT_EQ(walk.reports, 1u);
  EXPECT_EQ(walk.dropped, kPublished - kBacklog);
  EXPECT_EQ(walk.delivered + walk.dropped, kPublished);
  ReadsOnThenEnds(*stub_, session_id_, queue_, ctx, *reader, walk);
}

// A watcher that does not read while 100000 host functions run: the
// daemon queues a bounded number for it and counts the rest; when it reads
// at last it gets all of them, in order, with runs replaced by reports of
// their exact size, and the stream goes on.
TEST_F(StreamBoundsTest, UnreadWatcherStaysBoundedAndLearnsWhatWasDropped) {
  constexpr uint64_t kPublished = 100000;
  // gRPC's flow-control window kept at its initial 64 KiB (no bandwidth
  // probing), so that what the transport takes before the daemon's writes
  // stall is bounded too: a notification is at least 14 bytes on the wire.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto watcher = v1::GpuStream::NewStub(grpc::CreateCustomChannel(
      daemon_->unix_target(), grpc::InsecureChannelCredentials(), args));
  constexpr uint64_t kInTransport = 65536 / 14;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(120)));
  v1::WatchNotificationsRequest watch;
  watch.set_session_id(session_id_);
  auto reader = watcher->WatchNotifications(&ctx, watch);
  absl::SleepFor(absl::Milliseconds(300));  // Let the stream attach.
  const uint64_t rss_before = rss();
  ASSERT_GT(rss_before, 0u);
  PublishHostFuncs(*stub_, session_id_, queue_, 1, kPublished);
  const uint64_t rss_after = rss();

  NotificationWalk walk;
  v1::Notification n;
  for (uint64_t i = 0; i < kPublished && walk.next_id <= kPublished; ++i) {
    ASSERT_TRUE(reader->Read(&n)) << i;
    walk.Take(n);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(walk.next_id, kPublished + 1);
  EXPECT_EQ(walk.delivered + walk.dropped, kPublished);
  EXPECT_GE(walk.reports, 1u);
  // The stream's queue, plus what the transport took.
  EXPECT_LE(walk.delivered, kStreamQueue + kInTransport);
  if (RssMeaningful()) EXPECT_LT(rss_after, rss_before + kAllocatorSlack);
  std::fprintf(stderr,
               "unread watcher: %llu delivered, %llu dropped in %llu "
               "reports\n",
               static_cast<unsigned long long>(walk.delivered),
               static_cast<unsigned long long>(walk.dropped),
               static_cast<unsigned long long>(walk.reports));

  ReadsOnThenEnds(*stub_, session_id_, queue_, ctx, *reader, walk);
}

// A stream that breaks after its client handled 30 of 100 notifications
// (the other 70 were written into it or queued for it: gone with it), then
// 20 more published while none is open: the stream that resumes from id 30
// gets 31 to 120, in order, nothing twice and no drop report, then the live
// ones. An acknowledgement past the last id is refused, naming the field.
TEST_F(StreamBoundsTest, AStreamResumedFromItsLastIdLosesNothing) {
  auto watch = [&](grpc::ClientContext& ctx, std::optional<uint64_t> ack) {
    ctx.set_deadline(Deadline(absl::Seconds(60)));
    v1::WatchNotificationsRequest req;
    req.set_session_id(session_id_);
    if (ack.has_value()) req.set_acknowledged_id(*ack);
    return stub_->WatchNotifications(&ctx, req);
  };
  NotificationWalk walk;
  v1::Notification n;
  {
    grpc::ClientContext ctx;
    auto first = watch(ctx, 0);
    PublishHostFuncs(*stub_, session_id_, queue_, 1, 100);
    for (int i = 0; i < 30; ++i) {
      ASSERT_TRUE(first->Read(&n)) << i;
      walk.Take(n);
      if (HasFatalFailure()) return;
    }
    ctx.TryCancel();
    (void)first->Finish();
  }
  PublishHostFuncs(*stub_, session_id_, queue_, 101, 120);

  grpc::ClientContext ctx;
  auto resumed = watch(ctx, n.id());
  while (walk.next_id <= 120) {
    ASSERT_TRUE(resumed->Read(&n)) << walk.next_id;
    walk.Take(n);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(walk.delivered, 120u);
  EXPECT_EQ(walk.reports, 0u);

  grpc::ClientContext past_ctx;
  auto past = watch(past_ctx, 121);
  EXPECT_FALSE(past->Read(&n));
  const grpc::Status refused = past->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("acknowledged_id 121"));
  ReadsOnThenEnds(*stub_, session_id_, queue_, ctx, *resumed, walk);
}

}  // namespace
}  // namespace gpustream
