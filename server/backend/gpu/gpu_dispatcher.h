// The per-device daemon thread that GPU host callbacks post to.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_DISPATCHER_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_DISPATCHER_H_

#include <atomic>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpustream::backend {

// The thread that notices completions (it polls the queues' progress words)
// and does what follows them: completing operations, handing held work to
// streams, freeing staging. Other threads Post() work to it or Wake() it.
// After each batch of posts it calls `tick`, which returns how long it may
// sleep before the next tick (absl::InfiniteDuration(): nothing to poll,
// sleep until a post or a wake). Thread-safe.
class GpuDispatcher {
 public:
  // `on_start` runs first on the thread (making the context current).
  GpuDispatcher(absl::AnyInvocable<void()> on_start,
                absl::AnyInvocable<absl::Duration()> tick);
  // Runs what was posted, then joins.
  ~GpuDispatcher();
  GpuDispatcher(const GpuDispatcher&) = delete;
  GpuDispatcher& operator=(const GpuDispatcher&) = delete;

  // After Shutdown(), runs `fn` at once on the caller's thread.
  void Post(absl::AnyInvocable<void()> fn);
  // Queues `fn` (taking it) unless Shutdown() ran: then returns false and
  // leaves `fn` to the caller, for callers that must not run it themselves.
  bool TryPost(absl::AnyInvocable<void()>& fn);
  // Runs what was posted and joins the thread. Idempotent.
  void Shutdown();
  // Wakes the thread for a tick (something pollable appeared).
  void Wake();
  // Whether the caller is the dispatcher's thread. Any thread may ask, at
  // any time (Shutdown joining the thread included).
  bool InDispatcher() const { return std::this_thread::get_id() == id_; }

 private:
  void Loop();

  absl::AnyInvocable<void()> on_start_;
  absl::AnyInvocable<absl::Duration()> tick_;
  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void()>> work_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // The loop's thread id while the loop runs: it stores it first and clears
  // it last, so a thread that later reuses the id is not taken for it.
  // thread_ itself is written by join(), after pthread_join, inside
  // libstdc++ (not instrumented: ThreadSanitizer does not see that race).
  std::atomic<std::thread::id> id_{};
  std::thread thread_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_DISPATCHER_H_
