// TimedDone: a done callback raced against a timer.
#include "server/session/timed_done.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpustream::session {

void TimedDone::Arm(const std::shared_ptr<TimedDone>& self, uint32_t timeout_ms,
                    std::string what) {
  if (timeout_ms == 0) return;
  absl::MutexLock lock(&self->mu_);
  if (self->claimed_) return;  // Already finished.
  self->timer_id_ = self->timer_->Schedule(
      absl::Milliseconds(timeout_ms),
      [self, what = std::move(what), timeout_ms] {
        self->Finish(absl::DeadlineExceededError(
            absl::StrCat(what, " did not complete within timeout_ms ",
                         timeout_ms, " (the work goes on)")));
      });
}

void TimedDone::EndOnCancel(const std::shared_ptr<TimedDone>& self,
                            const std::shared_ptr<CallCancel>& cancel,
                            std::string what) {
  if (cancel == nullptr) return;
  // Holds `self` until the call finishes, which forgets it.
  const CallCancel::Id id = cancel->OnCancel([self, what = std::move(what)] {
    self->Finish(absl::CancelledError(
        absl::StrCat(what, ": the caller cancelled the call or went away")));
  });
  if (id != 0) self->OnFinish([cancel, id] { cancel->Forget(id); });
}

bool TimedDone::Claim() {
  absl::MutexLock lock(&mu_);
  return !std::exchange(claimed_, true);
}

void TimedDone::OnFinish(absl::AnyInvocable<void()> cleanup) {
  {
    absl::MutexLock lock(&mu_);
    if (!claimed_) {
      cleanups_.push_back(std::move(cleanup));
      return;
    }
  }
  cleanup();
}

void TimedDone::FinishClaimed(absl::Status status) {
  Done done;
  std::vector<absl::AnyInvocable<void()>> cleanups;
  util::TimerThread::Id timer_id = 0;
  {
    absl::MutexLock lock(&mu_);
    done = std::move(done_);
    done_ = nullptr;
    cleanups.swap(cleanups_);
    timer_id = std::exchange(timer_id_, 0);
  }
  if (timer_id != 0) timer_->Cancel(timer_id);
  for (auto& cleanup : cleanups) cleanup();
  if (done) done(std::move(status));
}

void TimedDone::Finish(absl::Status status) {
  if (Claim()) FinishClaimed(std::move(status));
}

}  // namespace gpustream::session
