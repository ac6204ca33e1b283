// Regression tests from a contract-briefed review of the C++ client: each
// test states a promise and drives the client, against a real gpustreamd on
// the CPU backend, into the situation that once broke it (the comments say
// how). Every wait is bounded.
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
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
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using client::Client;
using client::Queue;
using testing::DaemonProcess;
using ::testing::HasSubstr;

using ClientAttackTest = testing::ClientTest;

// ---------------------------------------------------------------------------
// Promise 5 (call timeouts): synchronize(timeout) / wait(timeout) return
// within their timeout even when the daemon does not answer (frozen, or a
// network partition). The library passes the timeout only to the server.

TEST_F(ClientAttackTest, SynchronizeTimeoutHoldsWhenTheDaemonIsFrozen) {
  Queue q = session_->create_queue();
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  ASSERT_TRUE(daemon_->Freeze());
  absl::Notification returned;
  absl::Status s;
  std::thread t([&] {
    s = q.synchronize(absl::Milliseconds(500));
    returned.Notify();
  });
  const bool prompt = returned.WaitForNotificationWithTimeout(absl::Seconds(5));
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  t.join();
  EXPECT_TRUE(prompt)
      << "synchronize(500ms) still blocked after 5 s with a frozen daemon";
}

TEST_F(ClientAttackTest, FlagWaitTimeoutHoldsWhenTheDaemonIsFrozen) {
  client::Flag flag = session_->create_flag();
  ASSERT_TRUE(session_->default_queue().synchronize(absl::Seconds(10)).ok());
  ASSERT_TRUE(daemon_->Freeze());
  absl::Notification returned;
  std::thread t([&] {
    (void)flag.wait(1, client::WaitCondition::kEqual, absl::Milliseconds(500));
    returned.Notify();
  });
  const bool prompt = returned.WaitForNotificationWithTimeout(absl::Seconds(5));
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  t.join();
  EXPECT_TRUE(prompt)
      << "Flag::wait(500ms) still blocked after 5 s with a frozen daemon";
}

// Promise 3: one thread never receives another queue's error. A call that
// timed out on the client (SessionCore::Call's own timeout, the mechanism a
// client-side call timeout uses) forgets its seq; its late failure is then
// filed as an anonymous queue-less error and handed to an unrelated queue.
TEST_F(ClientAttackTest, ALateFailureOfATimedOutCallIsNotMisrouted) {
  client::Flag never = session_->create_flag();
  Queue other = session_->create_queue();
  ASSERT_TRUE(other.synchronize(absl::Seconds(10)).ok());
  auto result = session_->core().Call(
      [&](v1::Command& c) {
        auto* wait = c.mutable_wait_flag();
        wait->set_flag_id(never.id());
        wait->set_value(1);
      },
      client::SessionCore::Answer::kResult, absl::Milliseconds(200));
  ASSERT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded)
      << result.status();
  // Destroying the flag ends the parked wait with CANCELLED; nobody waits
  // for that result any more.
  { client::Flag gone = std::move(never); }
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Status s = other.synchronize(absl::Seconds(10));
  EXPECT_TRUE(s.ok()) << "a queue that never issued the timed-out call got "
                         "its late error: "
                      << s;
}

// ---------------------------------------------------------------------------
// Promise 2: every SubmitRequest is at most 4 MiB. A single command larger
// than that (a launch with a large BYTES argument) is neither split nor
// refused: it goes out as one oversized request, and the daemon's message
// bound kills the whole Submit stream: every other queue of the session
// fails, rather than the one launch being rejected.
TEST_F(ClientAttackTest, AnOversizedCommandBreaksOnlyItself) {
  StartSmallMessageDaemon();
  Queue big = session_->create_queue();
  Queue other = session_->create_queue();
  ASSERT_TRUE(other.synchronize(absl::Seconds(10)).ok());
  big.launch("samples", "noop", {1}, {1},
             {client::Arg::Bytes(std::string(5 << 20, 'b'))});
  const absl::Status big_status = big.synchronize(absl::Seconds(10));
  EXPECT_FALSE(big_status.ok());
  other.launch("samples", "noop", {1}, {1}, {});
  const absl::Status s = other.synchronize(absl::Seconds(10));
  EXPECT_TRUE(s.ok()) << "one oversized launch broke the session: " << s
                      << " (the launch's own queue saw: " << big_status << ")";
}

// Promise 2 again, at the exact bound: the byte accounting leaves out the
// SubmitRequest's session_id and each command's seq (set after measuring),
// so a batch the client counts as exactly kMaxBatchBytes serializes to more
// than 4 MiB.
TEST_F(ClientAttackTest, ABatchCountedAtTheBoundFitsTheBound) {
  StartSmallMessageDaemon();
  Queue q = session_->create_queue();
  Queue other = session_->create_queue();
  ASSERT_TRUE(other.synchronize(absl::Seconds(10)).ok());
  // The launch command exactly as Queue::launch fills it, sized so that the
  // client counts it at kMaxBatchBytes (ByteSizeLong + its 8 bytes framing).
  const size_t target = client::SessionCore::kMaxBatchBytes - 8;
  size_t n = target - 64;
  v1::Command c;
  for (int i = 0; i < 20; ++i) {
    c.Clear();
    auto* launch = c.mutable_launch_kernel();
    launch->set_queue_id(q.id());
    launch->set_module("samples");
    launch->set_kernel("noop");
    for (auto* d : {launch->mutable_grid(), launch->mutable_block()}) {
      d->set_x(1);
      d->set_y(1);
      d->set_z(1);
    }
    launch->add_args()->set_bytes(std::string(n, 'b'));
    const size_t size = c.ByteSizeLong();
    if (size == target) break;
    n += target - size;
  }
  ASSERT_EQ(c.ByteSizeLong(), target);
  q.launch("samples", "noop", {1}, {1},
           {client::Arg::Bytes(std::string(n, 'b'))});
  const absl::Status q_status = q.synchronize(absl::Seconds(10));
  // noop takes no arguments: the launch itself is rightly refused...
  EXPECT_EQ(q_status.code(), absl::StatusCode::kInvalidArgument) << q_status;
  // ...but nothing else may be hurt.
  other.launch("samples", "noop", {1}, {1}, {});
  const absl::Status s = other.synchronize(absl::Seconds(10));
  EXPECT_TRUE(s.ok()) << "a request counted at the 4 MiB bound exceeded it "
                         "and broke the session: "
                      << s;
}

// ---------------------------------------------------------------------------
// Promise 4/5: host functions. A queue handle destroyed while its host
// function is pending: ~Queue destroys its host flag (member) before the
// queue (base), so the daemon cancels the queue's WaitHostValue, the work
// after the host function does not wait for it, and the library's
// SignalFlag then fails NOT_FOUND, which is reported to an unrelated queue.
TEST_F(ClientAttackTest, DestroyingAQueueKeepsItsHostFunctionOrdering) {
  auto counter = session_->allocate(8);
  ASSERT_TRUE(counter.ok()) << counter.status();
  std::atomic<bool> fn_done{false};
  std::atomic<bool> launch_before_fn_done{false};
  client::Flag seen = session_->create_flag();
  {
    Queue q = session_->create_queue();
    q.enqueue_host_func([&] {
      absl::SleepFor(absl::Milliseconds(500));
      fn_done = true;
    });
    // Work after the host function: must run only once it returned.
    q.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
    q.write_flag(seen, 1);
    // The handle goes away with work pending (DestroyQueue waits for it).
  }
  // The queue wrote `seen` = 1: was the host function done by then?
  auto v = seen.wait(1, client::WaitCondition::kEqual, absl::Seconds(5));
  ASSERT_TRUE(v.ok()) << v.status();
  launch_before_fn_done = !fn_done.load();
  ASSERT_TRUE(
      testing::PollUntil(absl::Seconds(5), [&] { return fn_done.load(); }));
  absl::SleepFor(absl::Milliseconds(300));  // The library's SignalFlag.
  EXPECT_FALSE(launch_before_fn_done.load())
      << "work behind a host function ran before it returned";
  const absl::Status s =
      session_->default_queue().synchronize(absl::Seconds(10));
  EXPECT_TRUE(s.ok()) << "an unrelated queue got an error: " << s;
  auto value = session_->default_queue().read<uint64_t>(*counter, 1);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)[0], 1u);
}

// Promise 4: host functions keep working across a broken notification
// stream. A HostFuncReached the daemon already wrote, but the watcher had
// not read yet (it was running another host function), is lost when the
// stream breaks, unless the next stream replays it or the reached flags
// show it.
TEST_F(ClientAttackTest, AHostFuncNotificationInFlightAtABreakIsNotLost) {
  Queue a = session_->create_queue();
  Queue b = session_->create_queue();
  ASSERT_TRUE(a.synchronize(absl::Seconds(10)).ok());
  std::atomic<bool> a_started{false};
  std::atomic<int> b_ran{0};
  a.enqueue_host_func([&] {
    a_started = true;
    absl::SleepFor(absl::Milliseconds(800));
  });
  ASSERT_TRUE(
      testing::PollUntil(absl::Seconds(5), [&] { return a_started.load(); }));
  b.enqueue_host_func([&] { ++b_ran; });
  // b's notification reaches the client while the watcher is busy in a's.
  absl::SleepFor(absl::Milliseconds(300));
  session_->core().BreakNotificationStreamForTesting();
  EXPECT_TRUE(a.synchronize(absl::Seconds(10)).ok());
  const absl::Status s = b.synchronize(absl::Seconds(5));
  EXPECT_TRUE(s.ok()) << "queue b hangs on its host function: " << s;
  EXPECT_EQ(b_ran.load(), 1);
  // The next stream replayed it (acknowledged_id): no reached flag showed
  // it.
  EXPECT_EQ(session_->core().recovered_host_funcs(), 0);
}

// Leaks: a host function that never ran (its queue was parked when the
// session closed) stays in SessionCore::host_funcs_ after Close. If it
// captured a handle (a shared_ptr<Buffer> to keep the buffer alive, a common
// pattern) the handle keeps the SessionCore alive and the SessionCore keeps
// the function: a reference cycle that leaks the session's core, channel
// stub and everything captured.
TEST_F(ClientAttackTest, ANeverRunHostFunctionDoesNotLeakTheSession) {
  auto sentinel = std::make_shared<int>(0);
  std::weak_ptr<int> watch = sentinel;
  {
    auto allocated = session_->allocate(8);
    ASSERT_TRUE(allocated.ok()) << allocated.status();
    auto buffer = std::make_shared<client::Buffer>(*std::move(allocated));
    Queue q = session_->create_queue();
    client::Flag gate = session_->create_flag();
    q.wait_for_host_value(gate, 1);  // Parked until the session closes.
    q.enqueue_host_func([buffer, sentinel] {});
    sentinel.reset();
  }
  ASSERT_TRUE(session_->close().ok());
  session_.reset();
  EXPECT_TRUE(watch.expired())
      << "the session's core (and the host function) outlived every handle";
}

// ---------------------------------------------------------------------------
// Checks that are expected to hold.

// Daemon SIGKILL: every blocked call returns, nothing hangs, close is quick.
TEST_F(ClientAttackTest, DaemonKillReleasesEveryBlockedCall) {
  Queue q = session_->create_queue();
  client::Flag gate = session_->create_flag();
  q.wait_for_host_value(gate, 1);
  absl::Notification returned;
  absl::Status s;
  std::thread t([&] {
    s = q.synchronize();
    returned.Notify();
  });
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_EQ(daemon_->Stop(SIGKILL), 128 + SIGKILL);
  const bool prompt = returned.WaitForNotificationWithTimeout(absl::Seconds(5));
  if (!prompt) {
    // Unblock by closing, then report.
    (void)session_->close();
  }
  t.join();
  EXPECT_TRUE(prompt);
  EXPECT_FALSE(s.ok());
  q.launch("samples", "noop", {1}, {1}, {});
  EXPECT_FALSE(q.synchronize(absl::Seconds(1)).ok());
  const absl::Time start = absl::Now();
  (void)session_->close();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  daemon_.reset();
}

// Promise 3/5: Flag::signal() is Enqueue + Flush. Once the stream is gone
// (daemon killed, or the session closed) Push drops the command without
// taking a seq, so Flush finds nothing unwritten and returns OK: the signal
// was never sent and the caller is told it succeeded (a queue waiting for it
// would hang, and nothing reports why).
TEST_F(ClientAttackTest, SignalOnADeadSessionDoesNotReportSuccess) {
  client::Flag flag = session_->create_flag();
  ASSERT_TRUE(session_->default_queue().synchronize(absl::Seconds(10)).ok());
  ASSERT_EQ(daemon_->Stop(SIGKILL), 128 + SIGKILL);
  // The reader sees the stream end.
  ASSERT_TRUE(testing::PollUntil(absl::Seconds(5), [&] {
    return !session_->default_queue().synchronize(absl::Seconds(1)).ok();
  }));
  const absl::Status after_kill = flag.signal(1);
  EXPECT_FALSE(after_kill.ok()) << "signal() on a session whose daemon died";
  EXPECT_FALSE(session_->flush().ok()) << "flush() of a broken stream";
  (void)session_->close();
  const absl::Status after_close = flag.signal(2);
  EXPECT_FALSE(after_close.ok()) << "signal() on a closed session";
  daemon_.reset();
}

// Backpressure: with the daemon frozen, an enqueuing thread stops after
// about kMaxPendingBytes (plus gRPC's buffers), and close() releases it.
TEST_F(ClientAttackTest, BackpressureBoundsPendingBytes) {
  auto buffer = session_->allocate(1 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Queue q = session_->create_queue();
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  ASSERT_TRUE(daemon_->Freeze());
  std::atomic<int> written{0};
  std::atomic<bool> stop{false};
  const std::string mib(1 << 20, 'p');
  std::thread t([&] {
    for (int i = 0; i < 400 && !stop; ++i) {
      q.write(*buffer, 0, mib);
      ++written;
    }
  });
  // Until the writer stalls: it has written, then no write for two seconds
  // in a row (at most 30 s; a loaded machine only slows the writes down to
  // the bound).
  int stalled_at = -1, quiet = 0;
  for (int i = 0; i < 60 && quiet < 4; ++i) {
    absl::SleepFor(absl::Milliseconds(500));
    const int now = written.load();
    quiet = now > 0 && now == stalled_at ? quiet + 1 : 0;
    stalled_at = now;
  }
  stop = true;
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  t.join();
  EXPECT_LE(stalled_at, 64 + 16) << "no backpressure";
  EXPECT_GE(stalled_at, 32);
  EXPECT_TRUE(q.synchronize(absl::Seconds(60)).ok());
}

// Chunked reads from several threads at once, interleaved with other
// results, come back whole and in order.
TEST_F(ClientAttackTest, ConcurrentChunkedReadsReassemble) {
  constexpr size_t kBytes = 10 << 20;
  constexpr int kThreads = 3;
  std::vector<client::Buffer> buffers;
  std::vector<std::string> data(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    auto b = session_->allocate(kBytes);
    ASSERT_TRUE(b.ok()) << b.status();
    buffers.push_back(*std::move(b));
    data[t].resize(kBytes);
    for (size_t i = 0; i < kBytes; ++i) {
      data[t][i] = static_cast<char>(i * (t + 3) + t);
    }
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Queue q = session_->create_queue();
      q.write(buffers[t], 0, data[t]);
      for (int r = 0; r < 3; ++r) {
        q.launch("samples", "noop", {1}, {1}, {});
        auto back = q.read(buffers[t], 0, kBytes);
        if (!back.ok() || *back != data[t]) ++bad;
        if (!q.synchronize(absl::Seconds(30)).ok()) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// Close while other threads enqueue, synchronize and run host functions:
// everything returns, nothing crashes (run under --config=asan too).
TEST_F(ClientAttackTest, CloseRacesBusyThreads) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Queue q = session_->create_queue();
      for (int i = 0; i < 2000 && !stop; ++i) {
        q.launch("samples", "noop", {1}, {1}, {});
        if (t % 2 == 0) q.enqueue_host_func([] {});
        if (i % 8 == 0 && !q.synchronize(absl::Seconds(10)).ok()) break;
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  (void)session_->close();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  stop = true;
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace gpustream
