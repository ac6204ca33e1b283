// The daemon and session that the stream-bounds suites share: a real
// gpustreamd on the CPU backend with 4 MiB messages and the default
// max_pending_result_bytes, one session on it, and helpers to drive it
// through raw gRPC (tests/stream_bounds_test.cc, the Submit stream's
// bounds; tests/notification_stream_test.cc, the notification stream's).
#ifndef GPUSTREAM_TESTS_STREAM_BOUNDS_FIXTURE_H_
#define GPUSTREAM_TESTS_STREAM_BOUNDS_FIXTURE_H_

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
#include <optional>
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
constexpr uint64_t kStreamQueue = 2 * kBacklog + 1;

#if defined(__SANITIZE_ADDRESS__)
// ASan's quarantine keeps up to 256 MiB of freed memory resident.
constexpr uint64_t kAllocatorSlack = 640 * kMiB;
#else
constexpr uint64_t kAllocatorSlack = 128 * kMiB;
#endif

// The buffer every test reads: byte i is a hash of i, so a piece in the
// wrong place shows.
inline std::string Pattern(uint64_t size) {
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<char>((i * 0x9E3779B97F4A7C15ull) >> 56);
  }
  return bytes;
}

// The value of the unlabelled metric `name` that the daemon serves over
// HTTP at `address` ("127.0.0.1:PORT") /metrics; -1 if the scrape fails or
// lacks it.
inline double ScrapeMetric(const std::string& address, absl::string_view name) {
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
inline bool PollUntil(absl::Duration timeout, F attempt) {
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

}  // namespace gpustream

#endif  // GPUSTREAM_TESTS_STREAM_BOUNDS_FIXTURE_H_
