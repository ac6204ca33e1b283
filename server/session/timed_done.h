// Finishing a waiting operation exactly once: on completion or on timeout.
#ifndef GPUSTREAM_SERVER_SESSION_TIMED_DONE_H_
#define GPUSTREAM_SERVER_SESSION_TIMED_DONE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/util/timer_thread.h"

namespace gpustream::session {

// Wraps the `done` of a waiting operation (synchronize, wait flag): the
// first of Finish() and the timeout wins, later ones do nothing. A timeout
// does not cancel the work waited for. Shared between the completion path
// and the timer; thread-safe.
class TimedDone {
 public:
  using Done = absl::AnyInvocable<void(absl::Status)>;

  TimedDone(Done done, util::TimerThread* timer)
      : done_(std::move(done)), timer_(timer) {}

  // Arms the timeout (none when `timeout_ms` is 0). `on_timeout` runs, on
  // the timer thread, before done(DEADLINE_EXCEEDED naming `what`), and
  // only if the timeout wins.
  static void Arm(const std::shared_ptr<TimedDone>& self, uint32_t timeout_ms,
                  std::string what, absl::AnyInvocable<void()> on_timeout);

  // Runs `cleanup` when the call finishes, whatever finishes it (its work,
  // the timeout, a teardown), before `done`; not at all if it has finished
  // already. For what the call leaves registered elsewhere (a watch).
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
  absl::AnyInvocable<void()> cleanup_ ABSL_GUARDED_BY(mu_);
  util::TimerThread* const timer_;
  util::TimerThread::Id timer_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_TIMED_DONE_H_
