// The dispatcher loop.
#include "server/backend/gpu/gpu_dispatcher.h"

#include <sys/prctl.h>

#include <utility>

namespace gpustream::backend {

GpuDispatcher::GpuDispatcher(absl::AnyInvocable<void()> on_start,
                             absl::AnyInvocable<absl::Duration()> tick)
    : on_start_(std::move(on_start)), tick_(std::move(tick)) {
  thread_ = std::thread(&GpuDispatcher::Loop, this);
}

GpuDispatcher::~GpuDispatcher() { Shutdown(); }

void GpuDispatcher::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  thread_.join();
}

void GpuDispatcher::Post(absl::AnyInvocable<void()> fn) {
  if (!TryPost(fn)) fn();
}

bool GpuDispatcher::TryPost(absl::AnyInvocable<void()>& fn) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return false;
  work_.push_back(std::move(fn));
  return true;
}

void GpuDispatcher::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void GpuDispatcher::Loop() {
  // Completions are noticed by polling at periods down to microseconds; the
  // default timer slack (50 us) would stretch every one of them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  id_ = std::this_thread::get_id();
  if (on_start_) on_start_();
  absl::Duration next = absl::InfiniteDuration();
  std::deque<absl::AnyInvocable<void()>> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !work_.empty() || woken_ || stopping_;
      };
      if (next == absl::InfiniteDuration()) {
        mu_.Await(absl::Condition(&ready));
      } else if (next > absl::ZeroDuration()) {
        mu_.AwaitWithTimeout(absl::Condition(&ready), next);
      }
      if (stopping_ && work_.empty()) {
        stopped_ = true;  // Later posts run on their callers' threads.
        id_ = std::thread::id();
        return;
      }
      woken_ = false;
      batch.swap(work_);
    }
    for (auto& fn : batch) {
      fn();
      fn = nullptr;
    }
    batch.clear();
    next = tick_();
  }
}

}  // namespace gpustream::backend
