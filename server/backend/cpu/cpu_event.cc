// CPU events.
#include "server/backend/cpu/cpu_event.h"

#include <utility>

#include "absl/status/status.h"

namespace gpustream::backend {

bool CpuEventPoint::IsComplete() {
  absl::MutexLock lock(&mu_);
  return complete_;
}

void CpuEventPoint::Complete() {
  std::vector<std::shared_ptr<WatchFor<>>> ready;
  {
    absl::MutexLock lock(&mu_);
    complete_ = true;
    completed_at_ = absl::Now();
    ready.swap(waiters_);
  }
  for (auto& watch : ready) watch->Run();
}

std::shared_ptr<Watch> CpuEventPoint::OnComplete(
    absl::AnyInvocable<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!complete_) {
      SweepCancelled(waiters_, swept_size_, [](auto& w) { return w.get(); });
      auto watch = std::make_shared<WatchFor<>>(std::move(done));
      waiters_.push_back(watch);
      return watch;
    }
  }
  done();
  return nullptr;
}

absl::Time CpuEventPoint::completed_at() {
  absl::MutexLock lock(&mu_);
  return completed_at_;
}

std::shared_ptr<CpuEventPoint> CpuEvent::NewRecord() {
  auto point = std::make_shared<CpuEventPoint>();
  absl::MutexLock lock(&mu_);
  latest_ = point;
  return point;
}

std::shared_ptr<CpuEventPoint> CpuEvent::Latest() {
  absl::MutexLock lock(&mu_);
  return latest_;
}

bool CpuEvent::IsComplete() {
  std::shared_ptr<CpuEventPoint> point = Latest();
  return point == nullptr || point->IsComplete();
}

std::shared_ptr<Watch> CpuEvent::OnComplete(absl::AnyInvocable<void()> done) {
  std::shared_ptr<CpuEventPoint> point = Latest();
  if (point == nullptr) {
    done();
    return nullptr;
  }
  return point->OnComplete(std::move(done));
}

absl::StatusOr<float> CpuEvent::ElapsedMillisSince(Event& start_event) {
  auto& start = static_cast<CpuEvent&>(start_event);
  if (!timing_ || !start.timing_) {
    return absl::FailedPreconditionError(
        "both events must be created with enable_timing");
  }
  std::shared_ptr<CpuEventPoint> begin = start.Latest();
  if (begin == nullptr || !begin->IsComplete()) {
    return absl::FailedPreconditionError(
        "start_event_id has not been recorded and completed");
  }
  std::shared_ptr<CpuEventPoint> end = Latest();
  if (end == nullptr || !end->IsComplete()) {
    return absl::FailedPreconditionError(
        "end_event_id has not been recorded and completed");
  }
  return static_cast<float>(
      absl::ToDoubleMilliseconds(end->completed_at() - begin->completed_at()));
}

}  // namespace gpustream::backend
