// Calls parked on a session that its teardown must end.
#ifndef GPUSTREAM_SERVER_SESSION_PARKED_CALLS_H_
#define GPUSTREAM_SERVER_SESSION_PARKED_CALLS_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/queue.h"
#include "server/session/timed_done.h"

namespace gpustream::session {

// Waits that no queue cancellation or flag release reaches: a
// SynchronizeEvent (an event completes OK even when teardown drops its
// record), and a DestroyQueue whose queue has already left the session's
// table. Teardown finishes the first with its reason and cancels the
// second's queue. Shared with the calls' callbacks, which may outlive the
// session. Thread-safe.
class ParkedCalls {
 public:
  using Id = uint64_t;

  // 0 once teardown has taken everything: the caller finishes at once.
  Id Park(std::shared_ptr<TimedDone> call) {
    absl::MutexLock lock(&mu_);
    if (closed_) return 0;
    calls_.emplace(next_, std::move(call));
    return next_++;
  }
  Id ParkDestroy(std::shared_ptr<backend::Queue> queue) {
    absl::MutexLock lock(&mu_);
    if (closed_) return 0;
    destroying_.emplace(next_, std::move(queue));
    return next_++;
  }
  void Unpark(Id id) {
    absl::MutexLock lock(&mu_);
    calls_.erase(id);
    destroying_.erase(id);
  }

  // Teardown: everything parked, and no more parking.
  struct Taken {
    std::vector<std::shared_ptr<TimedDone>> calls;
    std::vector<std::shared_ptr<backend::Queue>> destroying;
  };
  Taken TakeAll() {
    Taken taken;
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (auto& [id, call] : calls_) taken.calls.push_back(std::move(call));
    for (auto& [id, q] : destroying_) taken.destroying.push_back(std::move(q));
    calls_.clear();
    destroying_.clear();
    return taken;
  }

 private:
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  Id next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<Id, std::shared_ptr<TimedDone>> calls_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Id, std::shared_ptr<backend::Queue>> destroying_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_PARKED_CALLS_H_
