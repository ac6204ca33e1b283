// The dispatcher loop.
#include "server/backend/cuda/cuda_dispatcher.h"

#include <utility>

namespace gpustream::backend {

CudaDispatcher::CudaDispatcher(absl::AnyInvocable<void()> on_start,
                               absl::AnyInvocable<bool()> tick,
                               absl::Duration tick_period)
    : on_start_(std::move(on_start)),
      tick_(std::move(tick)),
      tick_period_(tick_period) {
  thread_ = std::thread(&CudaDispatcher::Loop, this);
}

CudaDispatcher::~CudaDispatcher() { Shutdown(); }

void CudaDispatcher::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  thread_.join();
}

void CudaDispatcher::Post(absl::AnyInvocable<void()> fn) {
  if (!TryPost(fn)) fn();
}

bool CudaDispatcher::TryPost(absl::AnyInvocable<void()>& fn) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return false;
  work_.push_back(std::move(fn));
  return true;
}

void CudaDispatcher::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void CudaDispatcher::Loop() {
  if (on_start_) on_start_();
  bool polling = false;
  std::deque<absl::AnyInvocable<void()>> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !work_.empty() || woken_ || stopping_;
      };
      if (polling) {
        mu_.AwaitWithTimeout(absl::Condition(&ready), tick_period_);
      } else {
        mu_.Await(absl::Condition(&ready));
      }
      if (stopping_ && work_.empty()) {
        stopped_ = true;  // Later posts run on their callers' threads.
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
    polling = tick_();
  }
}

}  // namespace gpustream::backend
