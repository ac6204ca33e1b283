// A point in a queue's work that other queues and the host can wait for.
#ifndef GPUSTREAM_SERVER_BACKEND_EVENT_H_
#define GPUSTREAM_SERVER_BACKEND_EVENT_H_

#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/backend/watch.h"

namespace gpustream::backend {

// As a CUDA event: Queue::RecordEvent moves the event's "last recorded point"
// to the end of that queue's work; waits target the point recorded when the
// wait was issued. An event never recorded counts as complete. Thread-safe.
class Event {
 public:
  virtual ~Event() = default;

  virtual bool timing_enabled() const = 0;

  // Whether the last recorded point has completed.
  virtual bool IsComplete() = 0;

  // Calls `done` once the point recorded so far has completed: at once, on
  // the caller's thread, if it already has (then null is returned); else
  // on a backend thread, unless the returned watch is cancelled first.
  virtual std::shared_ptr<Watch> OnComplete(
      absl::AnyInvocable<void()> done) = 0;

  // Milliseconds from `start` to this event. FAILED_PRECONDITION unless both
  // are complete and record timing.
  virtual absl::StatusOr<float> ElapsedMillisSince(Event& start) = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_EVENT_H_
