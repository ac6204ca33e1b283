// The C++ client's promises, proved against a real gpustreamd process on the
// CPU backend (the client behaves the same on every backend): enqueued work
// leaves at once, batches fit the daemon's message bound, a rejection
// reaches the synchronize of the queue it targeted, no lock is held across a
// blocked stream write, host functions survive a broken notification
// stream, and close() is bounded even when the daemon is frozen.
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/gpustream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backend_daemon.h"
#include "tests/client_fixture.h"

namespace gpustream {
namespace {

using client::Client;
using client::Queue;
using ::testing::HasSubstr;
using ::testing::Not;

using CppClientTest = testing::ClientTest;

TEST_F(CppClientTest, ALoneLaunchRunsWhileTheClientSleeps) {
  client::Flag flag = session_->create_flag();
  auto counter = session_->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  Queue& q = session_->default_queue();
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());  // The flag exists.

  const absl::Time enqueued = absl::Now();
  q.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{7}});
  q.write_flag(flag, 1);
  // No flush, no synchronize: the host "works" while the daemon runs the
  // launch, and the flag the queue writes after it shows the daemon got it.
  const bool ran = testing::PollUntil(
      absl::Seconds(5), [&] { return ReadFlagUnary(flag) == 1; },
      absl::Milliseconds(1));
  EXPECT_TRUE(ran) << "the launch never reached the daemon";
  EXPECT_LT(absl::Now() - enqueued, absl::Seconds(1));
  auto value = q.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)[0], 7u);
}

// LaunchOptions: clusters (ranks read back), a cooperative grid barrier,
// and the daemon's refusals reported by synchronize with their codes.
TEST_F(CppClientTest, LaunchOptionsReachTheDaemon) {
  Queue& q = session_->default_queue();
  auto ranks = session_->allocate(16 * 4);
  // grid_barrier_u32 declares 8 bytes per thread: 512 blocks of one.
  auto words = session_->allocate(512 * 8);
  ASSERT_TRUE(ranks.ok() && words.ok());
  q.launch("samples", "block_rank_u32", {8, 2}, {1}, {*ranks},
           {.cluster = {4, 2}});
  auto got = q.read<uint32_t>(*ranks, 16);
  ASSERT_TRUE(got.ok()) << got.status();
  for (uint32_t y = 0; y < 2; ++y) {
    for (uint32_t x = 0; x < 8; ++x) {
      EXPECT_EQ((*got)[x + 8 * y], x % 4 + 4 * y) << x << ", " << y;
    }
  }
  q.launch("samples", "grid_barrier_u32", {8}, {32}, {*words},
           {.cooperative = true, .shared_memory_bytes = 1024});
  auto barrier = q.read<uint32_t>(*words, 16);
  ASSERT_TRUE(barrier.ok()) << barrier.status();
  for (uint32_t b = 0; b < 8; ++b) {
    EXPECT_EQ((*barrier)[b], b + 1);
    EXPECT_EQ((*barrier)[8 + b], 36u);
  }
  q.launch("samples", "block_rank_u32", {6}, {1}, {*ranks}, {.cluster = {4}});
  absl::Status s = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("not a multiple of cluster"));
  q.launch("samples", "grid_barrier_u32", {512}, {1}, {*words},
           {.cooperative = true});
  s = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(s.message(), HasSubstr("resident"));
}

// A graph captured with queue.capture() replays on any queue, holds the
// buffers it uses, and refuses what a capture cannot hold.
TEST_F(CppClientTest, GraphsCaptureOnceAndReplay) {
  Queue q = session_->create_queue(), other = session_->create_queue();
  auto counter = session_->allocate(8);
  auto src = session_->allocate(16);
  auto dst = session_->allocate(16);
  ASSERT_TRUE(counter.ok() && src.ok() && dst.ok());
  q.fill(*counter, 0, 8, 0);
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  absl::StatusOr<client::Graph> captured = q.capture([&] {
    q.fill(*src, 0, 16, 0x01020304);
    q.copy(*src, 0, *dst, 0, 16);
    q.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{5}});
  });
  ASSERT_TRUE(captured.ok()) << captured.status();
  client::Graph graph = *std::move(captured);
  *src = client::Buffer();  // Freed: the graph keeps it.
  for (int i = 0; i < 3; ++i) q.launch(graph);
  other.launch(graph);  // Starts after the launches on q.
  ASSERT_TRUE(other.synchronize(absl::Seconds(10)).ok());
  auto count = other.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ((*count)[0], 20u);
  auto copied = other.read<uint32_t>(*dst, 4);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(*copied, std::vector<uint32_t>(4, 0x01020304));

  ASSERT_TRUE(q.begin_capture().ok());
  EXPECT_EQ(q.begin_capture().code(), absl::StatusCode::kFailedPrecondition);
  q.enqueue_host_func([] {});
  q.wait_for(other);
  absl::StatusOr<client::Graph> refused = q.end_capture();
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::StatusOr<client::Graph> none = q.end_capture();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  // Both rejections, in order, in one report.
  absl::Status s = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), HasSubstr("; then INVALID_ARGUMENT"));
  EXPECT_THAT(s.message(), HasSubstr("WaitQueue cannot be captured"));
  q.launch(*refused);  // Empty: neither was recorded.
  EXPECT_TRUE(q.synchronize(absl::Seconds(10)).ok());
}

// Integer literals of any type, and argument lists built at run time, are
// converted to the kernel's declared kinds; an argument that does not fit
// is refused at the call: nothing is sent, and the queue reports it.
TEST_F(CppClientTest, KernelArgumentsConvertOrAreRefusedAtTheCall) {
  auto counter = session_->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  Queue& q = session_->default_queue();
  q.fill(*counter, 0, 8, 0);
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 7u});
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 4ull});
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 4LL});
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 1});  // An int.
  std::vector<client::Arg> built;
  built.emplace_back(*counter);
  built.emplace_back(size_t{100});
  q.launch("samples", "add_u64", {1}, {1}, built);
  auto sum = q.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ((*sum)[0], 116u);

  // Refused at the call: a negative int for U64, a float for U64, a wrong
  // count. None reaches the daemon: the counter stays at 116.
  q.launch("samples", "add_u64", {1}, {1}, {*counter, -1});
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 2.5f});
  q.launch("samples", "add_u64", {1}, {1}, {*counter});
  const absl::Status refused = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("kernel samples.add_u64: argument 1 is a U64 "
                        "parameter; got integer -1: outside [0, 2^64)"));
  EXPECT_THAT(
      refused.message(),
      HasSubstr("; then INVALID_ARGUMENT: launch_kernel samples.add_u64 "
                "on the default queue"));
  EXPECT_THAT(refused.message(),
              HasSubstr("argument 1 is a U64 parameter; got float 2.5: pass "
                        "an integer"));
  EXPECT_THAT(refused.message(),
              HasSubstr("kernel samples.add_u64 takes 2 argument(s) (BUFFER, "
                        "U64), got 1"));
  sum = q.read<uint64_t>(*counter, 1);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ((*sum)[0], 116u);
}

TEST_F(CppClientTest, WritesLargerThanTheMessageBoundArriveWhole) {
  // A daemon that refuses requests over 4 MiB: the old client sent 512
  // pending 1 MiB writes in one 512 MiB request.
  StartSmallMessageDaemon({"--cpu_memory_bytes=134217728"});
  constexpr size_t kBytes = 40 << 20;
  auto buffer = session_->allocate(kBytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::string data(kBytes, '\0');
  for (size_t i = 0; i < kBytes; ++i) data[i] = static_cast<char>(i * 7 + 3);
  Queue& q = session_->default_queue();
  // 24 MiB in 1 MiB writes, pending together, then one 16 MiB write.
  constexpr size_t kMiB = 1 << 20;
  for (size_t off = 0; off < 24 * kMiB; off += kMiB) {
    q.write(*buffer, off, absl::string_view(data).substr(off, kMiB));
  }
  q.write(*buffer, 24 * kMiB, absl::string_view(data).substr(24 * kMiB));
  ASSERT_TRUE(q.synchronize(absl::Seconds(60)).ok());
  auto back = q.read(*buffer, 0, kBytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == data) << "the bytes read back differ";
}

TEST_F(CppClientTest, ARejectionReachesOnlyTheQueueItTargeted) {
  Queue a = session_->create_queue();
  Queue b = session_->create_queue();
  auto counter = session_->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  a.launch("samples", "no_such_kernel", {1}, {1}, {});
  b.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
  // b's caller never sees a's error, however often it synchronizes.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(b.synchronize(absl::Seconds(10)).ok());
  }
  const absl::Status s = a.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("launch_kernel samples.no_such_kernel "
                                     "on queue ",
                                     a.id(), " (seq ")));
  EXPECT_THAT(s.message(), HasSubstr("no_such_kernel"));
  // Reported once.
  EXPECT_TRUE(a.synchronize(absl::Seconds(10)).ok());
}

// A blocking read reports the queue's earlier rejected commands instead of
// bytes they never wrote; every failure is reported, in order.
TEST_F(CppClientTest, ReadReportsEarlierRejectionsEachOfThem) {
  Queue q = session_->create_queue();
  auto buffer = session_->allocate(64);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  q.fill(*buffer, 0, 64, 0);
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  // Refused: fills a range past the buffer's end; then an unknown kernel.
  q.fill(*buffer, 32, 64, 0xABCDABCD);
  q.launch("samples", "no_such_kernel", {1}, {1}, {});
  auto read = q.read(*buffer, 0, 64);
  ASSERT_FALSE(read.ok()) << "stale bytes returned as OK";
  EXPECT_EQ(read.status().code(), absl::StatusCode::kOutOfRange)
      << read.status();
  EXPECT_THAT(read.status().message(),
              HasSubstr(absl::StrCat("fill_buffer buffer ", buffer->id(),
                                     " on queue ", q.id())));
  EXPECT_THAT(read.status().message(),
              HasSubstr("; then NOT_FOUND: launch_kernel "
                        "samples.no_such_kernel on queue"));
  // Reported once: the next read returns the bytes.
  auto again = q.read(*buffer, 0, 64);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, std::string(64, '\0'));
}

TEST_F(CppClientTest, ConcurrentQueuesKeepTheirOwnErrors) {
  auto counter = session_->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  constexpr int kRounds = 50;
  std::atomic<int> wrong{0};
  std::atomic<int> bad_seen{0};
  std::thread bad([&] {
    Queue q = session_->create_queue();
    for (int i = 0; i < kRounds; ++i) {
      q.fill(*counter, 0, 6, 0);  // Not a multiple of 4: INVALID_ARGUMENT.
      const absl::Status s = q.synchronize(absl::Seconds(10));
      if (s.code() == absl::StatusCode::kInvalidArgument &&
          absl::StrContains(s.message(), "fill_buffer buffer")) {
        ++bad_seen;
      }
    }
  });
  std::thread good([&] {
    Queue q = session_->create_queue();
    for (int i = 0; i < kRounds; ++i) {
      q.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
      if (!q.synchronize(absl::Seconds(10)).ok()) ++wrong;
    }
  });
  bad.join();
  good.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(bad_seen.load(), kRounds);
}

TEST_F(CppClientTest, QueuelessRejectionsReachAnyQueue) {
  // A session holds 4 objects: the default queue, the counter and 2 events.
  StartDaemonWithConfig("limits { max_objects_per_session: 4 }\n");
  auto counter = session_->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  client::Event e1 = session_->create_event();
  client::Event e2 = session_->create_event();
  client::Event e3 = session_->create_event();  // Refused.
  const absl::Status s = session_->default_queue().synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("create_event ", e3.id(), " (seq ")));
}

TEST_F(CppClientTest, AnotherSessionsObjectsAreCaughtNotAliased) {
  // Ids are per session: session B's flag 1 sent on a queue of session A
  // would name A's flag 1. The client refuses it instead.
  auto other = client_->open_session();
  ASSERT_TRUE(other.ok()) << other.status();
  client::Flag mine = session_->create_flag();
  client::Flag theirs = (*other)->create_flag();
  ASSERT_EQ(mine.id(), theirs.id());  // Both sessions minted the same id.
  auto their_buffer = (*other)->allocate(64);
  ASSERT_TRUE(their_buffer.ok()) << their_buffer.status();
  Queue& q = session_->default_queue();
  q.write_flag(theirs, 7);
  absl::Status s = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("write_flag flag ", theirs.id(),
                                     " on the default queue (seq ")));
  EXPECT_THAT(s.message(), Not(HasSubstr(absl::StrCat(q.id()))));
  EXPECT_THAT(s.message(), HasSubstr("belongs to another session"));
  EXPECT_EQ(ReadFlagUnary(mine), 0u);  // Untouched.

  q.launch("samples", "fill_u32", {1}, {64}, {*their_buffer, 5u, uint64_t{16}});
  s = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("launch_kernel samples.fill_u32"));
  auto read = q.read(*their_buffer, 0, 4);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("belongs to another session"));
  client::Flag moved_from = session_->create_flag();
  client::Flag taken = std::move(moved_from);
  q.wait_for_host_value(moved_from, 1);  // NOLINT: testing use after move.
  s = q.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST_F(CppClientTest, ADestroyedQueuesErrorsGoToTheSession) {
  Queue& survivor = session_->default_queue();
  uint64_t gone_id;
  {
    Queue doomed = session_->create_queue();
    gone_id = doomed.id();
    doomed.launch("samples", "nope", {1}, {1}, {});
    ASSERT_TRUE(session_->flush().ok());
  }
  const absl::Status s = survivor.synchronize(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(
      s.message(),
      HasSubstr(absl::StrCat("launch_kernel samples.nope on queue ", gone_id)));
}

TEST_F(CppClientTest, EnqueueAndChecksGoOnWhileAWriteIsBlocked) {
  auto buffer = session_->allocate(32 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Queue writer = session_->create_queue();
  Queue other = session_->create_queue();
  ASSERT_TRUE(other.synchronize(absl::Seconds(10)).ok());
  // Freeze the daemon: the stream's flow-control window fills and the
  // client's stream write blocks.
  ASSERT_TRUE(daemon_->Freeze());
  const std::string mib(1 << 20, 'x');
  for (int i = 0; i < 32; ++i) writer.write(*buffer, i * mib.size(), mib);
  absl::SleepFor(absl::Milliseconds(300));  // Let the writer block.
  // Other threads still enqueue and check errors at once.
  absl::Notification done;
  std::thread t([&] {
    other.launch("samples", "noop", {1}, {1}, {});
    (void)session_->take_error();
    done.Notify();
  });
  const bool prompt = done.WaitForNotificationWithTimeout(absl::Seconds(2));
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  t.join();
  EXPECT_TRUE(prompt) << "an enqueue waited for a blocked stream write";
  EXPECT_TRUE(writer.synchronize(absl::Seconds(30)).ok());
  EXPECT_TRUE(other.synchronize(absl::Seconds(30)).ok());
  auto tail = writer.read(*buffer, (32 << 20) - 4, 4);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(*tail, "xxxx");
}

TEST_F(CppClientTest, HostFunctionsSurviveABrokenNotificationStream) {
  Queue& q = session_->default_queue();
  std::atomic<int> ran{0};
  q.enqueue_host_func([&] { ++ran; });
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  ASSERT_EQ(ran.load(), 1);
  client::SessionCore& core = session_->core();
  ASSERT_EQ(core.notification_streams_opened(), 1);
  core.BreakNotificationStreamForTesting();
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(5), [&] {
    return core.notification_streams_opened() == 2;
  }));
  for (int i = 0; i < 3; ++i) q.enqueue_host_func([&] { ++ran; });
  const absl::Status s = q.synchronize(absl::Seconds(10));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ran.load(), 4);
}

TEST_F(CppClientTest, HostFunctionsReachedWhileTheStreamBreaksStillRun) {
  // The notification may be sent into the dying stream and lost: the queue's
  // reached flag shows the library which host function it passed.
  constexpr int kRounds = 5;
  Queue a = session_->create_queue();
  Queue b = session_->create_queue();
  std::atomic<int> ran_a{0}, ran_b{0};
  a.enqueue_host_func([&] { ++ran_a; });
  ASSERT_TRUE(a.synchronize(absl::Seconds(10)).ok());
  for (int i = 0; i < kRounds; ++i) {
    session_->core().BreakNotificationStreamForTesting();
    a.enqueue_host_func([&] { ++ran_a; });
    b.enqueue_host_func([&] { ++ran_b; });
    const absl::Status sa = a.synchronize(absl::Seconds(10));
    const absl::Status sb = b.synchronize(absl::Seconds(10));
    ASSERT_TRUE(sa.ok()) << "round " << i << ": " << sa;
    ASSERT_TRUE(sb.ok()) << "round " << i << ": " << sb;
  }
  EXPECT_EQ(ran_a.load(), kRounds + 1);  // Each exactly once.
  EXPECT_EQ(ran_b.load(), kRounds);
}

// Calls the daemon does not bound take the caller's timeout.
TEST_F(CppClientTest, ReadWithATimeoutGivesUpAndTheQueueGoesOn) {
  auto buffer = session_->allocate(8);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Queue q = session_->create_queue();
  client::Flag gate = session_->create_flag();
  q.fill(*buffer, 0, 8, 0x07070707);
  q.wait_for_host_value(gate, 1);
  const absl::Time start = absl::Now();
  auto late = q.read(*buffer, 0, 8, absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded)
      << late.status();
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(5));
  // The read stays enqueued; its bytes, when they come, go nowhere, and
  // the next read gets its own.
  ASSERT_TRUE(gate.signal(1).ok());
  auto bytes = q.read(*buffer, 0, 8, absl::Seconds(30));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string(8, '\x07'));
  EXPECT_TRUE(q.synchronize(absl::Seconds(30)).ok());
}

TEST_F(CppClientTest, AnAllocationThatTimedOutIsFreedWhenItComes) {
  // Two of these do not fit the CPU device's default 1 GiB.
  constexpr uint64_t kBytes = uint64_t{640} << 20;
  ASSERT_TRUE(daemon_->Freeze());
  auto late = session_->allocate(kBytes, client::MemoryKind::kDevice,
                                 absl::Milliseconds(300));
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded)
      << late.status();
  // The daemon makes it once thawed, then frees it: the memory comes back
  // (the device returns it on its cleanup thread, so not at once).
  absl::StatusOr<client::Buffer> again = absl::UnknownError("not tried");
  EXPECT_TRUE(testing::PollUntil(absl::Seconds(20), [&] {
    again = session_->allocate(kBytes, client::MemoryKind::kDevice,
                               absl::Seconds(10));
    return again.ok();
  })) << again.status();
  // And nothing about it is reported: the free of a buffer that was never
  // made (had the allocation failed) would not be either.
  EXPECT_TRUE(session_->default_queue().synchronize(absl::Seconds(10)).ok());
  EXPECT_TRUE(session_->take_error().ok());
}

TEST_F(CppClientTest, EnqueueTimeoutGivesUpWhileTheDaemonDoesNotRead) {
  auto session =
      client_->open_session({.enqueue_timeout = absl::Milliseconds(300)});
  ASSERT_TRUE(session.ok()) << session.status();
  client::Session& s = **session;
  auto buffer = s.allocate(1 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Queue q = s.create_queue();
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  ASSERT_TRUE(daemon_->Freeze());
  // Writes pile up unsent until the client's bound (64 MiB) is reached;
  // then one waits its timeout and is refused. (A stall of a loaded
  // machine alone does not end the loop: the bound must be reached too.)
  const std::string mib(1 << 20, 'x');
  absl::Duration slowest;
  int written = 0;
  for (; written < 512 && (written < 64 || slowest < absl::Milliseconds(250));
       ++written) {
    const absl::Time start = absl::Now();
    q.write(*buffer, 0, mib);
    slowest = std::max(slowest, absl::Now() - start);
  }
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  EXPECT_GE(slowest, absl::Milliseconds(250)) << written << " writes";
  EXPECT_LT(slowest, absl::Seconds(5));
  const absl::Status refused = q.synchronize(absl::Seconds(60));
  EXPECT_EQ(refused.code(), absl::StatusCode::kDeadlineExceeded) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("enqueue_timeout"));
  // The refusal was reported; the session goes on.
  q.fill(*buffer, 0, 4, 0x61616161);
  auto head = q.read(*buffer, 0, 4, absl::Seconds(30));
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, "aaaa");
}

TEST_F(CppClientTest, CloseIsBoundedWhenTheDaemonIsFrozen) {
  Queue q = session_->create_queue();
  q.launch("samples", "noop", {1}, {1}, {});
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  ASSERT_TRUE(daemon_->Freeze());
  q.launch("samples", "noop", {1}, {1}, {});
  const absl::Time start = absl::Now();
  const absl::Status s = session_->close();
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, client::SessionCore::kCloseTimeout + absl::Seconds(2));
  // The daemon, thawed, serves a new session at once.
  auto again = client_->open_session();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->default_queue().synchronize(absl::Seconds(10)).ok());
}

TEST_F(CppClientTest, CloseOfAnIdleSessionIsQuick) {
  Queue q = session_->create_queue();
  client::Flag gate = session_->create_flag();
  q.wait_for_host_value(gate, 1);  // Parked forever.
  q.launch("samples", "noop", {1}, {1}, {});
  const absl::Time start = absl::Now();
  EXPECT_TRUE(session_->close().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(CppClientTest, EnqueuesAfterCloseAreDroppedAndSynchronizeSaysWhy) {
  Queue q = session_->create_queue();
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());  // The queue exists.
  ASSERT_TRUE(session_->close().ok());
  q.launch("samples", "noop", {1}, {1}, {});
  const absl::Status s = q.synchronize(absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // Named by its public id, never by the secret one.
  EXPECT_THAT(session_->public_id(), ::testing::MatchesRegex("s-[0-9a-f]{16}"));
  EXPECT_THAT(s.message(),
              HasSubstr("session " + session_->public_id() + " is closed"));
  EXPECT_THAT(s.message(), Not(HasSubstr(session_->id())));
}

}  // namespace
}  // namespace gpustream
