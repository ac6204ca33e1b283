// Finishing a waiting operation exactly once: on completion or on timeout.
#ifndef GPUSTREAM_SERVER_SESSION_TIMED_DONE_H_
#define GPUSTREAM_SERVER_SESSION_TIMED_DONE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/session/call_cancel.h"
#include "server/util/timer_thread.h"

namespace gpustream::session {

// Wraps the `done` of a waiting operation (synchronize, wait flag, read,
// destroy queue): the first of Finish(), the timeout and the caller's
// cancellation wins, later ones do nothing. Neither a timeout nor a
// cancellation cancels the work waited for. Shared between the completion
// path, the timer and the transport; thread-safe.
class TimedDone {
 public:
  using Done = absl::AnyInvocable<void(absl::Status)>;

  TimedDone(Done done, util::TimerThread* timer)
      : done_(std::move(done)), timer_(timer) {}

  // Arms the timeout (none when `timeout_ms` is 0): done(DEADLINE_EXCEEDED
  // naming `what`) on the timer thread if the timeout wins.
  static void Arm(const std::shared_ptr<TimedDone>& self, uint32_t timeout_ms,
                  std::string what);
  // Finishes with CANCELLED naming `what` when `cancel` fires (the caller
  // went away); nothing when `cancel` is null.
  static void EndOnCancel(const std::shared_ptr<TimedDone>& self,
                          const std::shared_ptr<CallCancel>& cancel,
                          std::string what);

  // Runs `cleanup` when the call finishes, whatever finishes it (its work,
  // the timeout, the caller's cancellation, a teardown), before `done`; at
  // once if it has finished already. For what the call leaves registered
  // elsewhere (a watch, a flag wait). Cleanups run in registration order.
  void OnFinish(absl::AnyInvocable<void()> cleanup);

  // Runs `done` with `status` unless it already ran.
  void Finish(absl::Status status);

  // Claims the right to finish: true exactly once. A completion path that
  // must write into the response before `done` runs claims first, so a
  // timeout can never release the response while it is being written.
  bool Claim();
  // Runs `done` after a successful Claim().
  void FinishClaimed(absl::Status status);

 private:
  absl::Mutex mu_;
  bool claimed_ ABSL_GUARDED_BY(mu_) = false;
  Done done_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::AnyInvocable<void()>> cleanups_ ABSL_GUARDED_BY(mu_);
  util::TimerThread* const timer_;
  util::TimerThread::Id timer_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_TIMED_DONE_H_
