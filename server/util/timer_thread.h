// One thread that runs callbacks at deadlines (wait timeouts, lease checks).
#ifndef GPUSTREAM_SERVER_UTIL_TIMER_THREAD_H_
#define GPUSTREAM_SERVER_UTIL_TIMER_THREAD_H_

#include <cstdint>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpustream::util {

// Callbacks run on the timer's thread, one at a time, and must be quick.
// Thread-safe. The destructor drops callbacks that have not fired.
class TimerThread {
 public:
  using Id = uint64_t;

  TimerThread();
  ~TimerThread();
  TimerThread(const TimerThread&) = delete;
  TimerThread& operator=(const TimerThread&) = delete;

  Id Schedule(absl::Duration delay, absl::AnyInvocable<void()> fn);
  // Drops the callback if it has not started; harmless after it ran.
  void Cancel(Id id);

 private:
  void Loop();

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::pair<absl::Time, Id>, absl::AnyInvocable<void()>> due_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Id, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gpustream::util

#endif  // GPUSTREAM_SERVER_UTIL_TIMER_THREAD_H_
