// What a client can make gpustreamd hold through its streams, against a
// real daemon on the CPU backend: read results promised on a Submit stream
// (refused past max_pending_result_bytes), results split to fit a message,
// streams cancelled with results pending, results nobody reads (flow
// control), and notifications nobody reads.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gpustream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using SubmitStream =
    grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>;

constexpr uint64_t kMiB = uint64_t{1} << 20;
// The daemon's configuration: messages of at most 4 MiB, and
// max_pending_result_bytes at its default, 256 MiB.
constexpr uint64_t kMaxMessage = 4 * kMiB;
constexpr uint64_t kPendingLimit = 256 * kMiB;
constexpr char kConfig[] =
    "cpu_memory_bytes: 268435456\n"
    "limits { max_message_bytes: 4194304 "
    "max_pending_result_bytes: 268435456 }\n";
// The hub's backlog and a stream's send queue (notification_hub.h,
// notification_reactor.h).
constexpr uint64_t kBacklog = 4096;
constexpr uint64_t kStreamQueue = kBacklog + 1;

#if defined(__SANITIZE_ADDRESS__)
// ASan's quarantine keeps up to 256 MiB of freed memory resident.
constexpr uint64_t kAllocatorSlack = 640 * kMiB;
#else
constexpr uint64_t kAllocatorSlack = 128 * kMiB;
#endif

// The buffer every test reads: byte i is a hash of i, so a piece in the
// wrong place shows.
std::string Pattern(uint64_t size) {
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<char>((i * 0x9E3779B97F4A7C15ull) >> 56);
  }
  return bytes;
}

// The value of the unlabelled metric `name` that the daemon serves over
// HTTP at `address` ("127.0.0.1:PORT") /metrics; -1 if the scrape fails or
// lacks it.
double ScrapeMetric(const std::string& address, absl::string_view name) {
  std::vector<std::string> host_port = absl::StrSplit(address, ':');
  int port = 0;
  if (host_port.size() != 2 || !absl::SimpleAtoi(host_port[1], &port)) {
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  std::string body;
  if (inet_pton(AF_INET, host_port[0].c_str(), &to.sin_addr) == 1 &&
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char chunk[16384];
      for (ssize_t n; (n = recv(fd, chunk, sizeof(chunk), 0)) > 0;) {
        body.append(chunk, n);
      }
    }
  }
  close(fd);
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    double value = 0;
    if (absl::ConsumePrefix(&line, name) && absl::ConsumePrefix(&line, " ") &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(line), &value)) {
      return value;
    }
  }
  return -1;
}

// Calls `attempt` every 50 ms until it returns true or `timeout` passes;
// whether it did.
template <typename F>
bool PollUntil(absl::Duration timeout, F attempt) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!attempt()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

class StreamBoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_path_ = testing::TempPath(".txtpb");
    std::ofstream(config_path_) << kConfig;
    auto daemon = testing::DaemonProcess::Start(
        {"--backend=cpu", "--config=" + config_path_,
         "--metrics_listen=127.0.0.1:0"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    // The metrics address, from the daemon's log line
    // "event=metrics_listening address=127.0.0.1:PORT".
    ASSERT_TRUE(PollUntil(absl::Seconds(10), [&] {
      const std::string log = daemon_->log();
      const size_t event = log.find("event=metrics_listening");
      const size_t at = log.find("address=", event);
      if (event == std::string::npos || at == std::string::npos) return false;
      const size_t start = at + 8;
      metrics_address_ =
          log.substr(start, log.find_first_of(" \n", start) - start);
      absl::StripAsciiWhitespace(&metrics_address_);
      return true;
    })) << daemon_->log();
    // gRPC's default channel: it receives messages of at most 4 MiB, so
    // every result must come in pieces that small.
    stub_ = v1::GpuStream::NewStub(grpc::CreateChannel(
        daemon_->unix_target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(20)));
    v1::OpenSessionResponse opened;
    grpc::Status s = stub_->OpenSession(&ctx, {}, &opened);
    ASSERT_TRUE(s.ok()) << s.error_message();
    session_id_ = opened.session_id();
    queue_ = opened.default_queue_id();
  }

  void TearDown() override { std::remove(config_path_.c_str()); }

  static std::chrono::system_clock::time_point Deadline(absl::Duration d) {
    return absl::ToChronoTime(absl::Now() + d);
  }

  // One unary RPC on the test's session, bounded by 30 s.
  template <typename Req, typename Resp>
  void Unary(grpc::Status (v1::GpuStream::Stub::*rpc)(grpc::ClientContext*,
                                                      const Req&, Resp*),
             Req req, Resp* resp = nullptr) {
    Resp ignored;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(30)));
    req.set_session_id(session_id_);
    grpc::Status s = (stub_.get()->*rpc)(&ctx, req, resp ? resp : &ignored);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void SynchronizeQueue() {
    v1::SynchronizeQueueRequest sync;
    sync.set_queue_id(queue_);
    sync.set_timeout_ms(30000);
    Unary(&v1::GpuStream::Stub::SynchronizeQueue, sync);
  }

  // Buffer `id` of `pattern.size()` bytes holding `pattern`, written in
  // pieces that fit a message.
  void AllocateAndWrite(uint64_t id, const std::string& pattern) {
    v1::AllocateBufferRequest alloc;
    alloc.set_id(id);
    alloc.set_size_bytes(pattern.size());
    Unary(&v1::GpuStream::Stub::AllocateBuffer, alloc);
    for (uint64_t at = 0; at < pattern.size(); at += kMiB) {
      v1::WriteBufferRequest write;
      write.set_queue_id(queue_);
      write.set_buffer_id(id);
      write.set_offset(at);
      write.set_data(pattern.substr(at, kMiB));
      Unary(&v1::GpuStream::Stub::WriteBuffer, write);
    }
    SynchronizeQueue();
  }

  // Adds a command with the next seq to `req`.
  v1::Command* Add(v1::SubmitRequest& req) {
    v1::Command* c = req.add_commands();
    c->set_seq(++seq_);
    return c;
  }

  // Adds commands that hold the queue until flag `flag_id` is signalled.
  void AddGate(v1::SubmitRequest& req, uint64_t flag_id) {
    Add(req)->mutable_create_flag()->set_id(flag_id);
    auto* gate = Add(req)->mutable_wait_host_value();
    gate->set_queue_id(queue_);
    gate->set_flag_id(flag_id);
    gate->set_value(1);
  }

  uint64_t AddRead(v1::SubmitRequest& req, uint64_t buffer_id, uint64_t offset,
                   uint64_t size) {
    v1::Command* c = Add(req);
    auto* read = c->mutable_read_buffer();
    read->set_queue_id(queue_);
    read->set_buffer_id(buffer_id);
    read->set_offset(offset);
    read->set_size(size);
    return c->seq();
  }

  void AddSignal(v1::SubmitRequest& req, uint64_t flag_id) {
    auto* signal = Add(req)->mutable_signal_flag();
    signal->set_flag_id(flag_id);
    signal->set_value(1);
  }

  uint64_t rss() const { return testing::RssBytes(daemon_->pid()); }
  // Under ThreadSanitizer (--config=tsan sets GPUSTREAM_TSAN), its shadow
  // memory, four times what the daemon touches, is part of the RSS, which
  // then says little about what the daemon holds: the RSS bounds are
  // checked by the other builds.
  static bool RssMeaningful() {
    return std::getenv("GPUSTREAM_TSAN") == nullptr;
  }
  uint64_t peak_rss() const {
    return std::max<int64_t>(
               0, testing::ProcStatusValue(daemon_->pid(), "VmHWM")) *
           1024;
  }

  // Bytes of read results the daemon holds admitted and unsent, all Submit
  // streams together (its own accounting of max_pending_result_bytes).
  double pending_result_bytes() const {
    return ScrapeMetric(metrics_address_,
                        "gpustream_submit_result_bytes_pending");
  }

  std::string config_path_;
  std::string metrics_address_;
  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::string session_id_;
  uint64_t queue_ = 0;
  uint64_t seq_ = 0;
};

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
    next_id = n.host_func_reached().callback_id() + 1;
    ++delivered;
  }
};

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
  PublishHostFuncs(*stub_, session_id_, queue_, kPublished + 1, kPublished + 1);
  ASSERT_TRUE(reader->Read(&n));
  walk.Take(n);
  EXPECT_EQ(walk.next_id, kPublished + 2);
  ctx.TryCancel();
  (void)reader->Finish();
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

  PublishHostFuncs(*stub_, session_id_, queue_, kPublished + 1, kPublished + 1);
  ASSERT_TRUE(reader->Read(&n));
  walk.Take(n);
  EXPECT_EQ(walk.next_id, kPublished + 2);
  ctx.TryCancel();
  (void)reader->Finish();
}

}  // namespace
}  // namespace gpustream
