// Stress of the races between a timed wait's timer and what it waits for:
// WaitFlag with a 1 ms timeout against SignalFlag, SynchronizeQueue with a
// timeout against completing work, and a session's close against
// operations being enqueued on it. Meant for the sanitizer builds
// (--config=asan, --config=tsan): every response is freed the moment its
// `done` runs, so a completion path that wrote into it afterwards is a
// use-after-free ASan reports, and an unordered write a race TSan reports.
// Each case is bounded in iterations and in time.
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/session/session.h"
#include "server/session/session_manager.h"

namespace gpustream::session {
namespace {

using ::absl::StatusCode;

// No case runs longer than this, whatever its iteration count (sanitizer
// builds are 5-20x slower).
constexpr absl::Duration kCaseBudget = absl::Seconds(8);

// Counts the `done`s of operations that wait, and checks each runs once.
class DoneLedger {
 public:
  // A done that records its status's code, then runs `then` (which frees
  // the response).
  Session::Done Track(absl::AnyInvocable<void(absl::Status)> then) {
    started_.fetch_add(1);
    auto ran = std::make_shared<std::atomic<int>>(0);
    return [this, ran, then = std::move(then)](absl::Status s) mutable {
      EXPECT_EQ(ran->fetch_add(1), 0) << "a done ran twice";
      then(s);
      absl::MutexLock lock(&mu_);
      ++finished_;
    };
  }
  // Waits (bounded) until every tracked done has run.
  bool AllFinished(absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    auto all = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return finished_ == started_.load();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&all), limit);
  }

 private:
  std::atomic<int64_t> started_{0};
  absl::Mutex mu_;
  int64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
};

class TimedWaitStressTest : public ::testing::Test {
 protected:
  TimedWaitStressTest()
      : device_(backend::CpuDeviceOptions{8 << 20}),
        modules_(*modules::ModuleRegistry::Create(device_, {})) {}

  std::shared_ptr<Session> NewSession(uint64_t key) {
    SessionLimits limits;
    limits.max_queues = 8;
    auto session = Session::Create(
        absl::StrCat("s", key), {"tenant", "stress", 0, absl::StrCat("p", key)},
        {&device_, modules_.get(), &timer_, limits, tenant_, key});
    EXPECT_TRUE(session.ok()) << session.status();
    return *session;
  }

  static uint64_t NewFlag(Session& session) {
    v1::CreateFlagResponse resp;
    EXPECT_TRUE(session.CreateFlag({}, &resp).ok());
    return resp.flag_id();
  }

  static absl::Status Signal(Session& session, uint64_t flag, uint64_t value) {
    v1::SignalFlagRequest req;
    req.set_flag_id(flag);
    req.set_value(value);
    v1::SignalFlagResponse resp;
    return session.SignalFlag(req, &resp);
  }

  // Holds `queue` until `flag` holds `value` or more.
  static absl::Status Gate(Session& session, uint64_t queue, uint64_t flag,
                           uint64_t value) {
    v1::WaitHostValueRequest req;
    req.set_queue_id(queue);
    req.set_flag_id(flag);
    req.set_value(value);
    req.set_condition(v1::WAIT_CONDITION_GREATER_EQUAL);
    v1::WaitHostValueResponse resp;
    return session.WaitHostValue(req, &resp);
  }

  static absl::Status Spin(Session& session, uint64_t queue, uint64_t ns) {
    v1::LaunchKernelRequest req;
    req.set_queue_id(queue);
    req.set_module("samples");
    req.set_kernel("spin_ns");
    req.mutable_grid()->set_x(1);
    req.mutable_block()->set_x(1);
    req.add_args()->set_u64(ns);
    v1::LaunchKernelResponse resp;
    return session.LaunchKernel(req, &resp);
  }

  // Whether the tenant holds no wait slot within a few seconds: a slot goes
  // back when the callback holding it is destroyed, which may be just
  // after the call's `done` ran, on another thread.
  bool WaitsReleased() { return WaitsReleased(*tenant_); }
  static bool WaitsReleased(const tenants::Tenant& tenant) {
    const absl::Time end = absl::Now() + absl::Seconds(5);
    while (tenant.waits() != 0) {
      if (absl::Now() > end) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  util::TimerThread timer_;
  backend::CpuDevice device_;
  std::unique_ptr<modules::ModuleRegistry> modules_;
  const std::shared_ptr<tenants::Tenant> tenant_ =
      std::make_shared<tenants::Tenant>("tenant", false, 1, v1::Quota());
};

// A 1 ms WaitFlag against a SignalFlag from another thread, in a tight
// loop. Iterations alternate between three kinds so that the outcome of
// two is known: signalled before the wait (OK), never signalled
// (DEADLINE_EXCEEDED), and signalled concurrently (either, but with the
// value the signal wrote if OK).
TEST_F(TimedWaitStressTest, WaitFlagTimeoutRacesSignal) {
  auto session = NewSession(1);
  const uint64_t flag = NewFlag(*session);
  DoneLedger ledger;
  // The signaller writes the value the main thread asks for, once, and
  // says when it has: the next iteration starts only after that, so a late
  // signal never lands on a later iteration's wait.
  absl::Mutex mu;
  uint64_t to_signal ABSL_GUARDED_BY(mu) = 0;
  uint64_t signalled ABSL_GUARDED_BY(mu) = 0;
  bool stop ABSL_GUARDED_BY(mu) = false;
  std::thread signaller([&] {
    while (true) {
      uint64_t v;
      {
        absl::MutexLock lock(&mu);
        auto asked = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
          return stop || to_signal != signalled;
        };
        mu.Await(absl::Condition(&asked));
        if (stop) return;
        v = to_signal;
      }
      EXPECT_TRUE(Signal(*session, flag, v).ok());
      absl::MutexLock lock(&mu);
      signalled = v;
    }
  });
  std::atomic<int> ok{0}, timed_out{0};
  const absl::Time end = absl::Now() + kCaseBudget;
  int i = 0;
  for (; i < 3000 && absl::Now() < end; ++i) {
    // Each iteration waits for a value no earlier signal wrote.
    const uint64_t value = 10 + static_cast<uint64_t>(i);
    const int kind = i % 3;
    if (kind == 0) {
      ASSERT_TRUE(Signal(*session, flag, value).ok());
    }
    auto* resp = new v1::WaitFlagResponse();
    v1::WaitFlagRequest req;
    req.set_flag_id(flag);
    req.set_value(value);
    req.set_condition(v1::WAIT_CONDITION_EQUAL);
    req.set_timeout_ms(1);
    absl::Notification finished;
    session->WaitFlag(
        req, resp, ledger.Track([&, resp, kind, value](absl::Status s) {
          if (s.ok()) {
            EXPECT_NE(kind, 1) << "a wait nobody signalled succeeded";
            EXPECT_EQ(resp->value(), value);
            ok.fetch_add(1);
          } else {
            EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
            EXPECT_NE(kind, 0) << "a wait signalled beforehand timed out";
            timed_out.fetch_add(1);
          }
          delete resp;  // What a finished RPC does with its response.
          finished.Notify();
        }));
    if (kind == 2) {
      absl::MutexLock lock(&mu);
      to_signal = value;
    }
    ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
    if (kind == 2) {
      absl::MutexLock lock(&mu);
      auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
        return signalled == value;
      };
      ASSERT_TRUE(
          mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10)));
    }
  }
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  signaller.join();
  EXPECT_TRUE(ledger.AllFinished(absl::Seconds(10)));
  EXPECT_EQ(ok.load() + timed_out.load(), i);
  EXPECT_GE(ok.load(), (i + 2) / 3);         // Every kind 0, maybe some 2.
  EXPECT_GE(timed_out.load(), (i + 1) / 3);  // Every kind 1, maybe some 2.
  // Released waits give their slots back: the tenant holds none.
  EXPECT_TRUE(WaitsReleased());
}

// SynchronizeQueue with a 1 ms timeout against work of about that length.
TEST_F(TimedWaitStressTest, SynchronizeTimeoutRacesCompletion) {
  auto session = NewSession(2);
  const uint64_t queue = session->default_queue_id();
  const uint64_t gate = NewFlag(*session);
  DoneLedger ledger;
  std::mt19937_64 rng(7);
  std::atomic<int> ok{0}, timed_out{0};
  const absl::Time end = absl::Now() + kCaseBudget;
  int i = 0;
  for (; i < 1500 && absl::Now() < end; ++i) {
    // Kinds: 0 no work and a long timeout (OK); 1 a queue held until the
    // synchronize has answered (DEADLINE_EXCEEDED, however late the timer
    // runs on a loaded machine); 2 work about as long (either).
    const int kind = i % 3;
    if (kind == 1) {
      ASSERT_TRUE(Gate(*session, queue, gate, i).ok());
    } else {
      ASSERT_TRUE(
          Spin(*session, queue, kind == 0 ? 0 : rng() % 2'000'000).ok());
    }
    auto* resp = new v1::SynchronizeQueueResponse();
    v1::SynchronizeQueueRequest req;
    req.set_queue_id(queue);
    req.set_timeout_ms(kind == 0 ? 10'000 : 1);
    absl::Notification finished;
    session->SynchronizeQueue(
        req, resp, ledger.Track([&, resp, kind](absl::Status s) {
          if (s.ok()) {
            EXPECT_NE(kind, 1) << "a held queue finished";
            ok.fetch_add(1);
          } else {
            EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
            EXPECT_NE(kind, 0) << "an idle queue's synchronize timed out";
            timed_out.fetch_add(1);
          }
          delete resp;  // What a finished RPC does with its response.
          finished.Notify();
        }));
    ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(20)));
    if (kind == 1) ASSERT_TRUE(Signal(*session, gate, i).ok());
  }
  // An untimed synchronize returns once everything ran.
  absl::Notification drained;
  v1::SynchronizeQueueRequest untimed;
  untimed.set_queue_id(queue);
  session->SynchronizeQueue(untimed, nullptr, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    drained.Notify();
  });
  ASSERT_TRUE(drained.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(ledger.AllFinished(absl::Seconds(10)));
  EXPECT_EQ(ok.load() + timed_out.load(), i);
  EXPECT_GE(ok.load(), (i + 2) / 3);
  EXPECT_GE(timed_out.load(), (i + 1) / 3);
  // Once the queue is idle, no timed-out synchronize holds a wait slot.
  EXPECT_TRUE(WaitsReleased());
}

// Threads enqueue work, timed waits and object churn on sessions while
// another thread closes them: every operation either succeeds or fails
// with the closed session's code, every `done` runs once, and once all
// sessions are gone the tenant holds nothing.
TEST_F(TimedWaitStressTest, CloseRacesEnqueue) {
  v1::ServerConfig config;
  v1::Tenant* t = config.add_tenants();
  t->set_name("t");
  t->add_tls_subject("t");
  auto tenants = *tenants::TenantRegistry::Create(config);
  auto sharing = *DeviceSharing::Create(v1::GPU_SHARING_SHARED_CONTEXT,
                                        &device_, modules_.get(), {}, {});
  SessionManager manager({{sharing.get()}}, &timer_, tenants.get(), {});
  const tenants::Principal who = *tenants->Authenticate({{}, "t"});
  DoneLedger ledger;
  const absl::Time end = absl::Now() + kCaseBudget;
  int rounds = 0;
  for (; rounds < 60 && absl::Now() < end; ++rounds) {
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(manager.Open(who, {}, &opened).ok());
    auto session = *manager.Find("t", opened.session_id());
    const uint64_t queue = session->default_queue_id();
    const uint64_t flag = NewFlag(*session);
    std::atomic<bool> closed{false};
    std::vector<std::thread> workers;
    for (int w = 0; w < 3; ++w) {
      workers.emplace_back([&, w] {
        for (int n = 0; n < 200; ++n) {
          absl::Status s;
          switch ((n + w) % 4) {
            case 0:
              s = Spin(*session, queue, 20'000);
              break;
            case 1: {
              v1::CreateEventResponse ev;
              s = session->CreateEvent({}, &ev);
              break;
            }
            case 2:
              s = Signal(*session, flag, n);
              break;
            case 3: {
              auto* resp = new v1::WaitFlagResponse();
              v1::WaitFlagRequest req;
              req.set_flag_id(flag);
              req.set_value(1u << 30);  // Never written: times out or ends.
              req.set_timeout_ms(1 + n % 3);
              session->WaitFlag(req, resp,
                                ledger.Track([resp](absl::Status st) {
                                  EXPECT_NE(st.code(), StatusCode::kOk);
                                  delete resp;
                                }));
              continue;
            }
          }
          if (!s.ok()) {
            // Only the end of the session refuses work here.
            EXPECT_TRUE(closed.load()) << s;
            // NOT_FOUND once the id is gone; CANCELLED, or the queue's
            // sticky FAILED_PRECONDITION naming the close, while it goes.
            EXPECT_TRUE(s.code() == StatusCode::kNotFound ||
                        s.code() == StatusCode::kCancelled ||
                        (s.code() == StatusCode::kFailedPrecondition &&
                         absl::StrContains(s.message(), "was closed")))
                << s;
          }
        }
      });
    }
    absl::SleepFor(absl::Microseconds(200 * (rounds % 5)));
    closed.store(true);
    absl::Notification gone;
    manager.Close("t", opened.session_id(), [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      gone.Notify();
    });
    for (auto& w : workers) w.join();
    ASSERT_TRUE(gone.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  EXPECT_TRUE(ledger.AllFinished(absl::Seconds(10)));
  EXPECT_EQ(manager.session_count(), 0u);
  EXPECT_GT(rounds, 0);
  const auto tenant = tenants->All().front();
  EXPECT_EQ(tenant->sessions(), 0u);
  EXPECT_EQ(tenant->queues(), 0u);
  EXPECT_EQ(tenant->memory_bytes(), 0u);
  EXPECT_TRUE(WaitsReleased(*tenant));
  v1::TenantStats stats;
  tenant->Describe(&stats);
  EXPECT_EQ(stats.inflight_commands(), 0u);
}

}  // namespace
}  // namespace gpustream::session
