// Events on the CPU backend: one completion point per record.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_EVENT_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_EVENT_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/event.h"

namespace gpustream::backend {

// One RecordEvent: completes when the recording queue reaches it. Waits
// hold the point that was the event's latest when they were enqueued, so a
// later record (on any queue) neither releases nor extends them.
// Thread-safe.
class CpuEventPoint {
 public:
  bool IsComplete();
  // Called by the recording queue when it reaches (or drops) the record.
  void Complete();
  // `done` runs at once, on this thread, if complete (null is returned);
  // else on the thread that completes the point, unless the watch is
  // cancelled first. It must be quick (queues parked on the point only
  // become runnable).
  std::shared_ptr<Watch> OnComplete(absl::AnyInvocable<void()> done);
  // The completion time; valid once complete.
  absl::Time completed_at();

 private:
  absl::Mutex mu_;
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time completed_at_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<WatchFor<>>> waiters_ ABSL_GUARDED_BY(mu_);
  size_t swept_size_ ABSL_GUARDED_BY(mu_) = 0;  // SweepCancelled's mark.
};

class CpuEvent : public Event {
 public:
  explicit CpuEvent(bool enable_timing) : timing_(enable_timing) {}

  bool timing_enabled() const override { return timing_; }
  bool IsComplete() override;
  std::shared_ptr<Watch> OnComplete(absl::AnyInvocable<void()> done) override;
  absl::StatusOr<float> ElapsedMillisSince(Event& start) override;

  // RecordEvent, at enqueue time: a new point becomes the latest.
  std::shared_ptr<CpuEventPoint> NewRecord();
  // The latest record, or null if never recorded.
  std::shared_ptr<CpuEventPoint> Latest();

 private:
  const bool timing_;
  absl::Mutex mu_;
  std::shared_ptr<CpuEventPoint> latest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_EVENT_H_
