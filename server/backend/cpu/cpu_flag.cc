// CPU completion flags.
#include "server/backend/cpu/cpu_flag.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace gpustream::backend {

uint64_t CpuFlag::Load() {
  absl::MutexLock lock(&mu_);
  return value_;
}

void CpuFlag::Store(uint64_t value) {
  std::vector<WaitDone> ready;
  {
    absl::MutexLock lock(&mu_);
    value_ = value;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (Satisfies(value, it->second.value, it->second.condition)) {
        ready.push_back(std::move(it->second.done));
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Outside the lock: a callback may touch this flag again.
  for (auto& done : ready) done(value);
}

Flag::WaitId CpuFlag::AsyncWait(uint64_t value, WaitCondition condition,
                                WaitDone done) {
  absl::StatusOr<uint64_t> result;
  {
    absl::MutexLock lock(&mu_);
    if (released_) {
      result = release_reason_;
    } else if (Satisfies(value_, value, condition)) {
      result = value_;
    } else {
      const WaitId id = next_wait_id_++;
      waiters_.emplace(id, Waiter{value, condition, std::move(done)});
      return id;
    }
  }
  done(std::move(result));
  return 0;
}

void CpuFlag::CancelWait(WaitId id) {
  absl::MutexLock lock(&mu_);
  waiters_.erase(id);
}

void CpuFlag::Release(const absl::Status& reason) {
  absl::flat_hash_map<WaitId, Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    released_ = true;
    release_reason_ = reason;
    waiters.swap(waiters_);
  }
  for (auto& [id, waiter] : waiters) waiter.done(reason);
}

void CpuFlag::BlockUntil(uint64_t value, WaitCondition condition) {
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return released_ || Satisfies(value_, value, condition);
  };
  absl::MutexLock lock(&mu_, absl::Condition(&ready));
}

}  // namespace gpustream::backend
