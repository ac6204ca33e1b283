// What a client can make gpustreamd hold through its Submit streams,
// against a real daemon on the CPU backend: read results promised (refused
// past max_pending_result_bytes), results split to fit a message, streams
// cancelled with results pending, and results nobody reads (flow control).
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/stream_bounds_fixture.h"

namespace gpustream {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The reads of one Submit stream as they arrive: every piece checked
// against the buffer's bytes, in order.
struct ReadTracker {
  const std::string* pattern;
  std::map<uint64_t, uint64_t> offset;    // Of each admitted read, by seq.
  std::map<uint64_t, uint64_t> received;  // Bytes so far, by seq.
  std::map<uint64_t, int> pieces;
  std::map<uint64_t, std::string> refused;  // Messages, by seq.
  int done = 0;

  void Take(const v1::SubmitResponse& resp) {
    EXPECT_LE(resp.ByteSizeLong(), kMaxMessage);
    for (const v1::CommandResult& r : resp.results()) {
      if (r.status().code() != 0) {
        EXPECT_EQ(r.status().code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
            << r.status().message();
        refused[r.seq()] = r.status().message();
        continue;
      }
      if (!r.has_read_buffer()) continue;
      auto it = offset.find(r.seq());
      ASSERT_NE(it, offset.end()) << "a result for seq " << r.seq();
      const v1::ReadBufferResponse& piece = r.read_buffer();
      uint64_t& got = received[r.seq()];
      ASSERT_EQ(piece.chunk_offset(), got) << "seq " << r.seq();
      ASSERT_EQ(0, std::memcmp(piece.data().data(),
                               pattern->data() + it->second + got,
                               piece.data().size()))
          << "seq " << r.seq() << " at " << got;
      got += piece.data().size();
      ++pieces[r.seq()];
      if (!piece.more()) ++done;
    }
  }
};

// max_pending_result_bytes bounds a session, not each of its streams: with
// 4 reads of 63.5 MiB admitted on one stream (held behind a gate), a second
// stream of the same session and a unary ReadBuffer are refused a read that
// would pass 256 MiB in all, naming the limit and the session's use.
TEST_F(StreamBoundsTest, ThePendingLimitCountsEveryStreamAndReadOfASession) {
  constexpr uint64_t kReadBytes = 63 * kMiB + kMiB / 2, kAdmitted = 4;
  AllocateAndWrite(1, Pattern(64 * kMiB));
  grpc::ClientContext first_ctx;
  first_ctx.set_deadline(Deadline(absl::Seconds(120)));
  std::unique_ptr<SubmitStream> first = stub_->Submit(&first_ctx);
  v1::SubmitRequest req;
  req.set_session_id(session_id_);
  AddGate(req, 9);
  for (uint64_t i = 0; i < kAdmitted; ++i) AddRead(req, 1, 0, kReadBytes);
  ASSERT_TRUE(first->Write(req));
  ASSERT_TRUE(PollUntil(absl::Seconds(10), [&] {
    return pending_result_bytes() == kAdmitted * kReadBytes;
  })) << pending_result_bytes();

  const std::string use = absl::StrCat(kAdmitted * kReadBytes);
  grpc::ClientContext second_ctx;
  second_ctx.set_deadline(Deadline(absl::Seconds(120)));
  std::unique_ptr<SubmitStream> second = stub_->Submit(&second_ctx);
  v1::SubmitRequest more;
  more.set_session_id(session_id_);
  const uint64_t refused_seq = AddRead(more, 1, 0, 3 * kMiB);
  ASSERT_TRUE(second->Write(more));
  v1::SubmitResponse resp;
  ASSERT_TRUE(second->Read(&resp)) << second->Finish().error_message();
  ASSERT_EQ(resp.results_size(), 1) << resp.DebugString();
  EXPECT_EQ(resp.results(0).seq(), refused_seq);
  EXPECT_EQ(resp.results(0).status().code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_THAT(resp.results(0).status().message(),
              HasSubstr("max_pending_result_bytes"));
  EXPECT_THAT(resp.results(0).status().message(), HasSubstr(use));
  EXPECT_THAT(resp.results(0).status().message(), Not(HasSubstr(session_id_)))
      << "the session id is a secret";

  v1::ReadBufferRequest read;
  read.set_session_id(session_id_);
  read.set_queue_id(queue_);
  read.set_buffer_id(1);
  read.set_size(3 * kMiB);
  v1::ReadBufferResponse data;
  grpc::ClientContext read_ctx;
  read_ctx.set_deadline(Deadline(absl::Seconds(30)));
  const grpc::Status unary = stub_->ReadBuffer(&read_ctx, read, &data);
  EXPECT_EQ(unary.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << unary.error_message();
  EXPECT_THAT(unary.error_message(), HasSubstr("max_pending_result_bytes"));
  EXPECT_THAT(unary.error_message(), HasSubstr(use));
  EXPECT_THAT(unary.error_message(), Not(HasSubstr(session_id_)));

  // Once the first stream's results are out, the session reads again.
  req.clear_commands();
  AddSignal(req, 9);
  ASSERT_TRUE(first->Write(req));
  first->WritesDone();
  while (first->Read(&resp)) {
  }
  EXPECT_TRUE(first->Finish().ok());
  grpc::ClientContext again_ctx;
  again_ctx.set_deadline(Deadline(absl::Seconds(30)));
  const grpc::Status again = stub_->ReadBuffer(&again_ctx, read, &data);
  EXPECT_TRUE(again.ok()) << again.error_message();
  EXPECT_EQ(data.data().size(), 3 * kMiB);
  second->WritesDone();
  while (second->Read(&resp)) {
  }
  EXPECT_TRUE(second->Finish().ok());
}

// One request promising 64 reads of 63 MiB: the first four fit the 256 MiB
// limit; the other 60 are refused, naming the limit and the use. The queue
// is held until every read has been admitted or refused, so the split is
// exact. The admitted reads arrive in pieces that each fit a 4 MiB message,
// in order, with the bytes written.
TEST_F(StreamBoundsTest,
       ReadsPastThePendingLimitAreRefusedTheRestArriveInPieces) {
  constexpr uint64_t kReads = 64, kReadBytes = 63 * kMiB;
  constexpr uint64_t kAdmitted = kPendingLimit / kReadBytes;  // 4
  const std::string pattern = Pattern(64 * kMiB);
  AllocateAndWrite(1, pattern);
  const uint64_t rss_before = rss();
  ASSERT_GT(rss_before, 0u);

  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(120)));
  std::unique_ptr<SubmitStream> stream = stub_->Submit(&ctx);
  v1::SubmitRequest req;
  req.set_session_id(session_id_);
  AddGate(req, 9);
  ReadTracker reads{&pattern};
  std::vector<uint64_t> seqs;
  for (uint64_t i = 0; i < kReads; ++i) {
    seqs.push_back(AddRead(req, 1, i * 4096, kReadBytes));
    if (i < kAdmitted) reads.offset[seqs.back()] = i * 4096;
  }
  ASSERT_EQ(pending_result_bytes(), 0) << "nothing admitted before";
  ASSERT_TRUE(stream->Write(req));

  // While the gate holds the queue, the refusals come back and the daemon
  // holds exactly what it admitted: the bound itself, not a memory figure.
  v1::SubmitResponse resp;
  for (int n = 0; n < 10000 && reads.refused.size() < kReads - kAdmitted; ++n) {
    ASSERT_TRUE(stream->Read(&resp)) << stream->Finish().error_message();
    reads.Take(resp);
    if (HasFatalFailure()) return;
  }
  ASSERT_EQ(reads.refused.size(), kReads - kAdmitted);
  EXPECT_EQ(reads.done, 0) << "a read ran before the gate opened";
  EXPECT_EQ(pending_result_bytes(),
            static_cast<double>(kAdmitted * kReadBytes));
  static_assert(kAdmitted * kReadBytes <= kPendingLimit &&
                (kAdmitted + 1) * kReadBytes > kPendingLimit);

  req.clear_commands();
  AddSignal(req, 9);
  ASSERT_TRUE(stream->Write(req));
  for (int n = 0; n < 10000 && reads.done < static_cast<int>(kAdmitted); ++n) {
    ASSERT_TRUE(stream->Read(&resp)) << stream->Finish().error_message();
    reads.Take(resp);
    if (HasFatalFailure()) return;
  }
  ASSERT_EQ(reads.done, static_cast<int>(kAdmitted));
  ASSERT_EQ(reads.refused.size(), kReads - kAdmitted);
  for (uint64_t i = 0; i < kReads; ++i) {
    if (i < kAdmitted) {
      EXPECT_EQ(reads.received[seqs[i]], kReadBytes);
      // 63 MiB in pieces of just under 4 MiB; the first may share its
      // response with the previous read's last piece.
      EXPECT_GE(reads.pieces[seqs[i]], 16) << i;
      EXPECT_LE(reads.pieces[seqs[i]], 17) << i;
      continue;
    }
    const std::string& message = reads.refused[seqs[i]];
    EXPECT_THAT(message, HasSubstr("max_pending_result_bytes"));
    EXPECT_THAT(message, HasSubstr(absl::StrCat(kPendingLimit)));
    EXPECT_THAT(message, HasSubstr(absl::StrCat(kAdmitted * kReadBytes)));
    EXPECT_THAT(message, HasSubstr(absl::StrCat(kReadBytes)));
  }
  stream->WritesDone();
  while (stream->Read(&resp)) reads.Take(resp);
  grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  // Every admitted byte was sent: none is left held.
  EXPECT_TRUE(PollUntil(absl::Seconds(10), [&] {
    return pending_result_bytes() == 0;
  })) << pending_result_bytes();

  // And its memory: the admitted reads at most, not all 64 (4 GB).
  const uint64_t peak = peak_rss();
  std::fprintf(stderr, "daemon memory: %llu MiB before, %llu MiB at most\n",
               static_cast<unsigned long long>(rss_before / kMiB),
               static_cast<unsigned long long>(peak / kMiB));
  if (RssMeaningful()) {
    EXPECT_LT(peak,
              rss_before + kPendingLimit + 2 * kReadBytes + kAllocatorSlack);
  }
}

// The C++ client joins a read's pieces: a read far larger than a message
// comes back whole, at any offset and size.
TEST_F(StreamBoundsTest, ClientReadsLargerThanAMessageComeBackWhole) {
  auto c = client::Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  const std::string pattern = Pattern(24 * kMiB);
  auto buffer = (*session)->allocate(pattern.size());
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  client::Queue& q = (*session)->default_queue();
  for (uint64_t at = 0; at < pattern.size(); at += 2 * kMiB) {
    q.write(*buffer, at, absl::string_view(pattern).substr(at, 2 * kMiB));
    // One write per request: the daemon takes messages of 4 MiB at most.
    ASSERT_TRUE((*session)->flush().ok());
  }
  const absl::Status written = q.synchronize(absl::Seconds(30));
  ASSERT_TRUE(written.ok()) << written;
  auto whole = q.read(*buffer, 0, pattern.size());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(*whole == pattern);
  auto odd = q.read(*buffer, 12345, 10 * kMiB + 7);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_TRUE(*odd == pattern.substr(12345, 10 * kMiB + 7));
  auto small = q.read(*buffer, 100, 10);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(*small, pattern.substr(100, 10));
  EXPECT_TRUE((*session)->close().ok());
}

// Streams cancelled with 252 MiB of reads pending, some half sent, some
// not yet run: the daemon drops their results, gives the memory back and
// goes on serving this session and others.
TEST_F(StreamBoundsTest,
       CancelledStreamsReleaseTheirResultsAndTheDaemonServes) {
  constexpr uint64_t kReadBytes = 63 * kMiB;
  const std::string pattern = Pattern(64 * kMiB);
  AllocateAndWrite(1, pattern);
  const uint64_t rss_before = rss();
  ASSERT_GT(rss_before, 0u);

  for (uint64_t round = 0; round < 4; ++round) {
    // The session's read budget is shared by its streams: the previous
    // round's cancelled stream must have given its bytes back.
    ASSERT_TRUE(PollUntil(absl::Seconds(10), [&] {
      return pending_result_bytes() == 0;
    })) << pending_result_bytes();
    const bool reads_ran = round % 2 == 0;
    const uint64_t flag = 100 + round;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(60)));
    std::unique_ptr<SubmitStream> stream = stub_->Submit(&ctx);
    v1::SubmitRequest req;
    req.set_session_id(session_id_);
    AddGate(req, flag);
    ReadTracker reads{&pattern};
    for (uint64_t i = 0; i < 4; ++i)
      reads.offset[AddRead(req, 1, 0, kReadBytes)] = 0;
    if (reads_ran) AddSignal(req, flag);
    ASSERT_TRUE(stream->Write(req));
    // The request has been run once completed_seq covers it.
    v1::SubmitResponse resp;
    for (int n = 0; n < 1000 && resp.completed_seq() < seq_; ++n) {
      ASSERT_TRUE(stream->Read(&resp));
      reads.Take(resp);
    }
    ASSERT_EQ(resp.completed_seq(), seq_);
    if (reads_ran) {
      // Cancelled after a few pieces.
      for (int n = 0; n < 1000 && reads.pieces.empty(); ++n) {
        ASSERT_TRUE(stream->Read(&resp));
        reads.Take(resp);
      }
      ASSERT_FALSE(reads.pieces.empty());
    }
    ctx.TryCancel();
    for (int n = 0; n < 1000 && stream->Read(&resp); ++n) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
    if (!reads_ran) {
      // The reads run now, their stream gone.
      v1::SignalFlagRequest signal;
      signal.set_flag_id(flag);
      signal.set_value(1);
      Unary(&v1::GpuStream::Stub::SignalFlag, signal);
    }
    SynchronizeQueue();
  }

  // The session still reads.
  v1::ReadBufferRequest read;
  read.set_queue_id(queue_);
  read.set_buffer_id(1);
  read.set_offset(1000);
  read.set_size(64);
  v1::ReadBufferResponse data;
  Unary(&v1::GpuStream::Stub::ReadBuffer, read, &data);
  EXPECT_EQ(data.data(), pattern.substr(1000, 64));

  // Nothing of the cancelled streams' results stays.
  EXPECT_TRUE(!RssMeaningful() ||
              PollUntil(absl::Seconds(10),
                        [&] { return rss() < rss_before + kAllocatorSlack; }))
      << "before: " << rss_before << ", now: " << rss();

  // Another client is served.
  auto c = client::Client::Connect(daemon_->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto session = c->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  auto buffer = (*session)->allocate(8 * kMiB);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  client::Queue& q = (*session)->default_queue();
  q.write(*buffer, 0, absl::string_view(pattern).substr(0, 2 * kMiB));
  auto back = q.read(*buffer, 0, 2 * kMiB);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == pattern.substr(0, 2 * kMiB));
}

// A client that sends failing commands and does not read the failures:
// once 4 MiB of them wait, the daemon stops reading its requests (its
// writes stall) instead of holding 120 MB of errors; when it reads, every
// failure arrives and the stream carries on.
TEST_F(StreamBoundsTest, UnreadResultsHoldBackTheClientsRequests) {
  constexpr int kRequests = 60, kCommands = 2000;
  // Each failure quotes this module name: about 1 KB a result.
  const std::string missing(1000, 'm');
  const uint64_t rss_before = rss();
  ASSERT_GT(rss_before, 0u);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(120)));
  std::unique_ptr<SubmitStream> stream = stub_->Submit(&ctx);
  absl::Mutex mu;
  int written = 0;
  std::thread writer([&] {
    v1::SubmitRequest req;
    req.set_session_id(session_id_);
    uint64_t seq = 0;
    for (int r = 0; r < kRequests; ++r) {
      req.clear_commands();
      for (int i = 0; i < kCommands; ++i) {
        v1::Command* c = req.add_commands();
        c->set_seq(++seq);
        v1::LaunchKernelRequest* launch = c->mutable_launch_kernel();
        launch->set_queue_id(queue_);
        launch->set_module(missing);
        launch->set_kernel("k");
        launch->mutable_grid()->set_x(1);
        launch->mutable_block()->set_x(1);
      }
      if (!stream->Write(req)) return;
      absl::MutexLock lock(&mu);
      ++written;
    }
    stream->WritesDone();
  });
  absl::SleepFor(absl::Seconds(3));
  {
    absl::MutexLock lock(&mu);
    EXPECT_LT(written, kRequests);
  }
  if (RssMeaningful()) EXPECT_LT(rss(), rss_before + kAllocatorSlack);

  uint64_t failures = 0, completed = 0;
  v1::SubmitResponse resp;
  for (int n = 0; n < 1000000 && stream->Read(&resp); ++n) {
    EXPECT_LE(resp.ByteSizeLong(), kMaxMessage);
    for (const v1::CommandResult& r : resp.results()) {
      EXPECT_EQ(r.status().code(), grpc::StatusCode::NOT_FOUND)
          << r.status().message();
      ++failures;
    }
    completed = resp.completed_seq();
  }
  writer.join();
  grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_EQ(written, kRequests);
  EXPECT_EQ(failures, uint64_t{kRequests} * kCommands);
  EXPECT_EQ(completed, uint64_t{kRequests} * kCommands);
}

// Reads whose caller went away while they wait behind a gate are still done
// by the device when the gate opens (into pinned staging memory on a GPU):
// their bytes stay counted until then, so a client cannot queue reads, give
// up on them and repeat to hold more than max_pending_result_bytes. Here
// unary reads that pass their deadline, and then a cancelled stream's: a
// read on another queue is refused meanwhile, and passes once they ran.
// Whether `read` is refused with RESOURCE_EXHAUSTED five times over half a
// second: the daemon gives an abandoned call's bytes back a moment after its
// client gave up, so one refusal may be that moment's.
template <typename F>
bool StaysRefused(F read) {
  for (int i = 0; i < 5; ++i) {
    const grpc::Status s = read();
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      std::fprintf(stderr, "read %d: %d %s\n", i, s.error_code(),
                   s.error_message().c_str());
      return false;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

TEST_F(StreamBoundsTest, AbandonedReadsStillQueuedKeepTheirBytesCounted) {
  // 255 MiB abandoned: one more read of 3 MiB would pass the limit.
  constexpr uint64_t kUnaryBytes = 3 * kMiB, kUnaryReads = 85;
  constexpr uint64_t kStreamBytes = 63 * kMiB + kMiB / 2, kStreamReads = 4;
  AllocateAndWrite(1, Pattern(64 * kMiB));
  v1::CreateQueueRequest create;
  create.set_id(2);
  Unary(&v1::GpuStream::Stub::CreateQueue, create);
  v1::ReadBufferRequest read;
  read.set_session_id(session_id_);
  read.set_queue_id(2);
  read.set_buffer_id(1);
  read.set_size(kUnaryBytes);
  v1::ReadBufferResponse data;
  // A read on queue 2 (never gated), answered within 30 s.
  auto read_other_queue = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(30)));
    return stub_->ReadBuffer(&ctx, read, &data);
  };
  // A read larger than the limit, always refused (taking nothing), says how
  // many bytes of the session are in use: whether that is `bytes`.
  v1::ReadBufferRequest oversized = read;
  oversized.set_size(kPendingLimit + 1);
  std::string said;
  auto in_use_is = [&](uint64_t bytes) {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(30)));
    v1::ReadBufferResponse ignored;
    said = stub_->ReadBuffer(&ctx, oversized, &ignored).error_message();
    return absl::StrContains(said, absl::StrCat(": ", bytes, " bytes"));
  };
  // Opens the gate on flag `flag`; once the abandoned reads ran, a read on
  // queue 2 passes again. Its own bytes count until gRPC is done sending
  // them, a moment after this client has them: wait for that too.
  auto open_and_drain = [&](uint64_t flag) {
    v1::SignalFlagRequest open;
    open.set_flag_id(flag);
    open.set_value(1);
    Unary(&v1::GpuStream::Stub::SignalFlag, open);
    SynchronizeQueue();
    const grpc::Status again = read_other_queue();
    EXPECT_TRUE(again.ok()) << again.error_message();
    EXPECT_EQ(data.data().size(), kUnaryBytes);
    EXPECT_TRUE(PollUntil(absl::Seconds(10), [&] { return in_use_is(0); }))
        << said;
  };

  // Unary reads behind gate 8, each given up after 50 ms.
  {
    v1::SubmitRequest req;  // The gate, through the test's own stream.
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(30)));
    std::unique_ptr<SubmitStream> stream = stub_->Submit(&ctx);
    req.set_session_id(session_id_);
    AddGate(req, 8);
    ASSERT_TRUE(stream->Write(req));
    stream->WritesDone();
    v1::SubmitResponse resp;
    while (stream->Read(&resp)) {
    }
    ASSERT_TRUE(stream->Finish().ok());
  }
  v1::ReadBufferRequest gated = read;
  gated.set_queue_id(queue_);
  // All at once; once the daemon has admitted them all, their callers
  // cancel.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  for (uint64_t i = 0; i < kUnaryReads; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(Deadline(absl::Seconds(60)));
  }
  std::vector<std::thread> readers;
  std::atomic<int> cancelled{0};
  for (uint64_t i = 0; i < kUnaryReads; ++i) {
    readers.emplace_back([&, i] {
      v1::ReadBufferResponse ignored;
      const grpc::Status s =
          stub_->ReadBuffer(contexts[i].get(), gated, &ignored);
      cancelled += s.error_code() == grpc::StatusCode::CANCELLED;
    });
  }
  const bool all_admitted = PollUntil(
      absl::Seconds(30), [&] { return in_use_is(kUnaryReads * kUnaryBytes); });
  for (auto& ctx : contexts) ctx->TryCancel();
  for (std::thread& t : readers) t.join();
  ASSERT_TRUE(all_admitted) << said;
  ASSERT_EQ(cancelled.load(), static_cast<int>(kUnaryReads));
  EXPECT_TRUE(StaysRefused(read_other_queue))
      << "the abandoned unary reads, still queued, no longer count";
  open_and_drain(8);

  // A stream's reads behind gate 9, then the stream cancelled.
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(120)));
  std::unique_ptr<SubmitStream> stream = stub_->Submit(&ctx);
  v1::SubmitRequest req;
  req.set_session_id(session_id_);
  AddGate(req, 9);
  for (uint64_t i = 0; i < kStreamReads; ++i) {
    AddRead(req, 1, 0, kStreamBytes);
  }
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(PollUntil(absl::Seconds(10), [&] {
    return pending_result_bytes() == kStreamReads * kStreamBytes;
  })) << pending_result_bytes();
  ctx.TryCancel();
  v1::SubmitResponse resp;
  while (stream->Read(&resp)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(StaysRefused(read_other_queue))
      << "the cancelled stream's reads, still queued, no longer count";
  open_and_drain(9);
}

}  // namespace
}  // namespace gpustream
