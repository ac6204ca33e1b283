// Host-side waits on a completion flag's value, shared by every backend.
#ifndef GPUSTREAM_SERVER_BACKEND_FLAG_WAITERS_H_
#define GPUSTREAM_SERVER_BACKEND_FLAG_WAITERS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/flag.h"

namespace gpustream::backend {

// The host waits (WaitFlag RPCs) of one flag. The flag stores its value
// first and calls Notify() after; Add() reads the value under this object's
// lock, so a wait is either satisfied by the value it reads or registered
// before Notify() looks: no store is missed. Callbacks run outside the lock.
// Thread-safe.
class FlagWaiters {
 public:
  // Runs `done` at once (on this thread) and returns 0 when `load()`
  // satisfies the wait or the flag was released; else registers it.
  Flag::WaitId Add(absl::FunctionRef<uint64_t()> load, uint64_t value,
                   WaitCondition condition, Flag::WaitDone done);
  void Cancel(Flag::WaitId id);
  // The flag now holds `value`: the waits it satisfies complete.
  void Notify(uint64_t value);
  // Every current and later wait fails with `reason`. False if already
  // released.
  bool Release(const absl::Status& reason);
  bool released();

 private:
  struct Waiter {
    uint64_t value;
    WaitCondition condition;
    Flag::WaitDone done;
  };

  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status release_reason_ ABSL_GUARDED_BY(mu_);
  Flag::WaitId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<Flag::WaitId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_FLAG_WAITERS_H_
