// A callback a backend holds until what it waits for happens
// (Event::OnComplete, Queue::OnIdle), which its caller may stop waiting
// for: a host wait that timed out or whose client went away.
#ifndef GPUSTREAM_SERVER_BACKEND_WATCH_H_
#define GPUSTREAM_SERVER_BACKEND_WATCH_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace gpustream::backend {

// The caller's handle. Cancel() destroys the callback, and whatever it
// holds (a response, a charge, a parked call), at once, on the calling
// thread, unless it is already running; the backend then drops the watch
// the next time it looks at it, without running it. Cancel after the
// callback ran, or twice, does nothing. Thread-safe.
class Watch {
 public:
  virtual ~Watch() = default;
  void Cancel() {
    cancelled_.store(true, std::memory_order_release);
    Drop();
  }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 protected:
  // Destroys the callback unless it is running or ran.
  virtual void Drop() = 0;

 private:
  std::atomic<bool> cancelled_{false};
};

// The backend's side: the callback itself, run at most once.
template <typename... Args>
class WatchFor final : public Watch {
 public:
  explicit WatchFor(absl::AnyInvocable<void(Args...)> fn)
      : fn_(std::move(fn)) {}

  // Runs the callback unless it was cancelled or already ran.
  void Run(Args... args) {
    absl::AnyInvocable<void(Args...)> fn;
    {
      absl::MutexLock lock(&mu_);
      if (cancelled()) return;
      fn = std::move(fn_);
      fn_ = nullptr;
    }
    if (fn != nullptr) fn(std::forward<Args>(args)...);
  }

 private:
  void Drop() override {
    absl::AnyInvocable<void(Args...)> fn;  // Destroyed off the lock.
    absl::MutexLock lock(&mu_);
    fn = std::move(fn_);
    fn_ = nullptr;
  }

  absl::Mutex mu_;
  absl::AnyInvocable<void(Args...)> fn_ ABSL_GUARDED_BY(mu_);
};

// Lists of watches drop the cancelled ones when they have doubled since
// the last sweep, so that a point nobody completes holds at most twice the
// watches still wanted. `List` holds std::shared_ptr<WatchFor<...>> (or
// records with a `watch` member: pass `of`).
template <typename List, typename Of>
void SweepCancelled(List& list, size_t& swept_size, Of of) {
  swept_size = std::min(swept_size, list.size());  // Entries ran since.
  if (list.size() < 2 * swept_size + 16) return;
  List kept;
  for (auto& entry : list) {
    if (!of(entry)->cancelled()) kept.push_back(std::move(entry));
  }
  list.swap(kept);
  swept_size = list.size();
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_WATCH_H_
