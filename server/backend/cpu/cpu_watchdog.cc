// The kernel watchdog.
#include "server/backend/cpu/cpu_watchdog.h"

#include <algorithm>
#include <atomic>

namespace gpustream::backend {
namespace {

// Limits beyond this are no limit: a deadline must not overflow the clock.
constexpr absl::Duration kNoLimitBeyond = absl::Hours(24 * 365 * 100);

bool Unlimited(absl::Duration limit) {
  return limit <= absl::ZeroDuration() || limit >= kNoLimitBeyond;
}

}  // namespace

void LaunchSlot::Begin(Clock::time_point start) {
  absl::MutexLock lock(&mu_);
  running_ = ++next_id_;
  deadline_ = Unlimited(limit_) ? Clock::time_point::max()
                                : start + absl::ToChronoNanoseconds(limit_);
  stop_ = LaunchStop::kNone;
  std::atomic_ref<int>(stop_word_).store(0, std::memory_order_relaxed);
}

LaunchStop LaunchSlot::End() {
  absl::MutexLock lock(&mu_);
  running_ = 0;
  return stop_;
}

void LaunchSlot::RequestStop(uint64_t id, LaunchStop why) {
  absl::MutexLock lock(&mu_);
  if (id != 0 && running_ == id) StopLocked(why);
}

void LaunchSlot::RequestStopRunning(LaunchStop why) {
  absl::MutexLock lock(&mu_);
  if (running_ != 0) StopLocked(why);
}

void LaunchSlot::StopLocked(LaunchStop why) {
  if (stop_ != LaunchStop::kNone) return;  // The first reason wins.
  stop_ = why;
  std::atomic_ref<int>(stop_word_).store(1, std::memory_order_release);
}

void LaunchSlot::Check(Clock::time_point now, Clock::time_point* next) {
  uint64_t expired = 0;
  {
    absl::MutexLock lock(&mu_);
    if (running_ == 0 || stop_ != LaunchStop::kNone) return;
    if (deadline_ > now) {
      if (deadline_ < *next) *next = deadline_;
      return;
    }
    expired = running_;
  }
  RequestStop(expired, LaunchStop::kTimeLimit);
}

CpuWatchdog::CpuWatchdog(absl::Duration limit, size_t slots) {
  for (size_t i = 0; i < slots; ++i) {
    slots_.push_back(std::make_unique<LaunchSlot>(
        Unlimited(limit) ? absl::InfiniteDuration() : limit));
  }
  if (!Unlimited(limit) && slots > 0) {
    thread_ = std::thread(&CpuWatchdog::Loop, this);
  }
}

CpuWatchdog::~CpuWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void CpuWatchdog::Loop() {
  using Clock = LaunchSlot::Clock;
  // A launch begun after `now` has its deadline after now + limit, so
  // sleeping that long at most misses none.
  const auto period = absl::ToChronoNanoseconds(slots_.front()->limit());
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point next = now + period;
    for (auto& slot : slots_) slot->Check(now, &next);
    const absl::Duration wait =
        absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(
            next - Clock::now()));
    mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                         std::max(wait, absl::ZeroDuration()));
  }
}

}  // namespace gpustream::backend
