// TimedDone: a done callback raced against a timer.
#include "server/session/timed_done.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpustream::session {

void TimedDone::Arm(const std::shared_ptr<TimedDone>& self, uint32_t timeout_ms,
                    std::string what, absl::AnyInvocable<void()> on_timeout) {
  if (timeout_ms == 0) return;
  absl::MutexLock lock(&self->mu_);
  if (self->claimed_) return;  // Already finished.
  self->timer_id_ = self->timer_->Schedule(
      absl::Milliseconds(timeout_ms),
      [self, what = std::move(what), on_timeout = std::move(on_timeout),
       timeout_ms]() mutable {
        if (!self->Claim()) return;
        if (on_timeout) on_timeout();
        self->FinishClaimed(absl::DeadlineExceededError(
            absl::StrCat(what, " did not complete within timeout_ms ",
                         timeout_ms, " (the work goes on)")));
      });
}

bool TimedDone::Claim() {
  absl::MutexLock lock(&mu_);
  return !std::exchange(claimed_, true);
}

void TimedDone::OnFinish(absl::AnyInvocable<void()> cleanup) {
  absl::MutexLock lock(&mu_);
  if (!claimed_) cleanup_ = std::move(cleanup);
}

void TimedDone::FinishClaimed(absl::Status status) {
  Done done;
  absl::AnyInvocable<void()> cleanup;
  util::TimerThread::Id timer_id = 0;
  {
    absl::MutexLock lock(&mu_);
    done = std::move(done_);
    done_ = nullptr;
    cleanup = std::move(cleanup_);
    cleanup_ = nullptr;
    timer_id = std::exchange(timer_id_, 0);
  }
  if (timer_id != 0) timer_->Cancel(timer_id);
  if (cleanup) cleanup();
  if (done) done(std::move(status));
}

void TimedDone::Finish(absl::Status status) {
  if (Claim()) FinishClaimed(std::move(status));
}

}  // namespace gpustream::session
