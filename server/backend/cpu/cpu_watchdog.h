// The CPU device's kernel time limit: one watchdog thread for the device
// that asks launches running past the limit to stop.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_WATCHDOG_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_WATCHDOG_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpustream::backend {

// Why a launch was asked to stop.
enum class LaunchStop { kNone, kTimeLimit, kCancelled };

// The launch running on one execution thread, and the word its kernel polls
// (GsLaunch::stop_requested). Stop requests name the launch they target, so
// a request that arrives after that launch ended never stops the next one
// on the same thread. Thread-safe: the execution thread begins and ends
// launches; the watchdog and Queue::Cancel request stops.
class LaunchSlot {
 public:
  using Clock = std::chrono::steady_clock;

  // `limit`: InfiniteDuration() for none.
  explicit LaunchSlot(absl::Duration limit) : limit_(limit) {}
  LaunchSlot(const LaunchSlot&) = delete;
  LaunchSlot& operator=(const LaunchSlot&) = delete;

  absl::Duration limit() const { return limit_; }

  // Starts a launch that began at `start` (the stop word reads 0; the time
  // limit runs from `start`). Called by the execution thread only.
  void Begin(Clock::time_point start);
  // Ends the launch begun last: why it was asked to stop, if it was.
  LaunchStop End();
  // Asks launch `id` to stop, if it is still running and was not asked
  // before (the first reason wins). Never blocks on the kernel.
  void RequestStop(uint64_t id, LaunchStop why);
  // Asks the launch running now, if any, to stop (RequestStop for its id):
  // for a queue whose batch holds the slot, so whatever runs is its own.
  void RequestStopRunning(LaunchStop why);

  // What the kernel polls: nonzero once it has been asked to stop. Lives as
  // long as the slot.
  const volatile int* stop_word() const { return &stop_word_; }

  // Watchdog: stops the running launch if its deadline is at or before
  // `now`; else lowers `*next` to that deadline.
  void Check(Clock::time_point now, Clock::time_point* next);

 private:
  // Asks the running launch to stop unless it was asked before.
  void StopLocked(LaunchStop why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration limit_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t running_ ABSL_GUARDED_BY(mu_) = 0;  // Launch id; 0: none.
  Clock::time_point deadline_ ABSL_GUARDED_BY(mu_);
  LaunchStop stop_ ABSL_GUARDED_BY(mu_) = LaunchStop::kNone;
  // Written under mu_ with std::atomic_ref, read by kernels without a lock
  // (a volatile load of an aligned int: the C ABI cannot take an atomic).
  alignas(64) mutable int stop_word_ = 0;
};

// One slot per execution thread and a single thread that wakes at the
// earliest deadline of the launches running (every launch has the same
// limit, so a launch begun later never has an earlier deadline than the
// watchdog's next wake-up: launches register nothing with it). No thread
// when the limit is infinite. Thread-safe.
class CpuWatchdog {
 public:
  // `limit` <= 0 or infinite: no limit.
  CpuWatchdog(absl::Duration limit, size_t slots);
  // Joins the thread; launches still running are no longer watched.
  ~CpuWatchdog();
  CpuWatchdog(const CpuWatchdog&) = delete;
  CpuWatchdog& operator=(const CpuWatchdog&) = delete;

  LaunchSlot& slot(size_t i) { return *slots_[i]; }
  size_t size() const { return slots_.size(); }

 private:
  void Loop();

  std::vector<std::unique_ptr<LaunchSlot>> slots_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_WATCHDOG_H_
