// FlagWaiters.
#include "server/backend/flag_waiters.h"

#include <utility>
#include <vector>

namespace gpustream::backend {

Flag::WaitId FlagWaiters::Add(absl::FunctionRef<uint64_t()> load,
                              uint64_t value, WaitCondition condition,
                              Flag::WaitDone done) {
  absl::StatusOr<uint64_t> result;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t now = load();
    if (released_) {
      result = release_reason_;
    } else if (Satisfies(now, value, condition)) {
      result = now;
    } else {
      const Flag::WaitId id = next_id_++;
      waiters_.emplace(id, Waiter{value, condition, std::move(done)});
      return id;
    }
  }
  done(std::move(result));
  return 0;
}

void FlagWaiters::Cancel(Flag::WaitId id) {
  absl::MutexLock lock(&mu_);
  waiters_.erase(id);
}

void FlagWaiters::Notify(uint64_t value) {
  std::vector<Flag::WaitDone> ready;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (Satisfies(value, it->second.value, it->second.condition)) {
        ready.push_back(std::move(it->second.done));
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Outside the lock: a callback may touch the flag again.
  for (auto& done : ready) done(value);
}

bool FlagWaiters::Release(const absl::Status& reason) {
  absl::flat_hash_map<Flag::WaitId, Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (released_) return false;
    released_ = true;
    release_reason_ = reason;
    waiters.swap(waiters_);
  }
  for (auto& [id, waiter] : waiters) waiter.done(reason);
  return true;
}

bool FlagWaiters::released() {
  absl::MutexLock lock(&mu_);
  return released_;
}

}  // namespace gpustream::backend
