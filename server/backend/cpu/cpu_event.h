// Events on the CPU backend: generation counters and a completion time.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_EVENT_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_EVENT_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/event.h"

namespace gpustream::backend {

// Each RecordEvent takes the next generation; the queue marks it complete
// when it reaches that point. Waits target the generation current when they
// are issued. Queues of one device complete generations in order per queue.
class CpuEvent : public Event {
 public:
  explicit CpuEvent(bool enable_timing) : timing_(enable_timing) {}

  bool timing_enabled() const override { return timing_; }
  bool IsComplete() override;
  void OnComplete(absl::AnyInvocable<void()> done) override;
  absl::StatusOr<float> ElapsedMillisSince(Event& start) override;

  // Called at enqueue time by RecordEvent: the generation to complete.
  uint64_t NextGeneration();
  // The generation recorded so far (0: never recorded).
  uint64_t RecordedGeneration();
  // Called by the recording queue's worker when it reaches `generation`.
  void Complete(uint64_t generation);
  // Blocks a queue worker until `generation` has completed.
  void BlockUntil(uint64_t generation);

 private:
  struct Waiter {
    uint64_t generation;
    absl::AnyInvocable<void()> done;
  };

  const bool timing_;
  absl::Mutex mu_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time completed_at_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_EVENT_H_
