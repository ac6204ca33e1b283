// CPU events.
#include "server/backend/cpu/cpu_event.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"

namespace gpustream::backend {

bool CpuEvent::IsComplete() {
  absl::MutexLock lock(&mu_);
  return completed_ >= recorded_;
}

void CpuEvent::OnComplete(absl::AnyInvocable<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    if (completed_ < recorded_) {
      waiters_.push_back({recorded_, std::move(done)});
      return;
    }
  }
  done();
}

absl::StatusOr<float> CpuEvent::ElapsedMillisSince(Event& start_event) {
  auto& start = static_cast<CpuEvent&>(start_event);
  if (!timing_ || !start.timing_) {
    return absl::FailedPreconditionError(
        "both events must be created with enable_timing");
  }
  absl::Time begin, end;
  {
    absl::MutexLock lock(&start.mu_);
    if (start.recorded_ == 0 || start.completed_ < start.recorded_) {
      return absl::FailedPreconditionError(
          "start_event_id has not been recorded and completed");
    }
    begin = start.completed_at_;
  }
  {
    absl::MutexLock lock(&mu_);
    if (recorded_ == 0 || completed_ < recorded_) {
      return absl::FailedPreconditionError(
          "end_event_id has not been recorded and completed");
    }
    end = completed_at_;
  }
  return static_cast<float>(absl::ToDoubleMilliseconds(end - begin));
}

uint64_t CpuEvent::NextGeneration() {
  absl::MutexLock lock(&mu_);
  return ++recorded_;
}

uint64_t CpuEvent::RecordedGeneration() {
  absl::MutexLock lock(&mu_);
  return recorded_;
}

void CpuEvent::Complete(uint64_t generation) {
  std::vector<absl::AnyInvocable<void()>> ready;
  {
    absl::MutexLock lock(&mu_);
    completed_ = std::max(completed_, generation);
    completed_at_ = absl::Now();
    auto done = [&](Waiter& w) { return w.generation <= completed_; };
    for (auto& w : waiters_) {
      if (done(w)) ready.push_back(std::move(w.done));
    }
    waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), done),
                   waiters_.end());
  }
  for (auto& fn : ready) fn();
}

void CpuEvent::BlockUntil(uint64_t generation) {
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return completed_ >= generation;
  };
  absl::MutexLock lock(&mu_, absl::Condition(&ready));
}

}  // namespace gpustream::backend
