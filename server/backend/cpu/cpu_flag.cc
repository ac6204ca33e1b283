// CPU completion flags.
#include "server/backend/cpu/cpu_flag.h"

namespace gpustream::backend {

uint64_t CpuFlag::Load() {
  absl::MutexLock lock(&mu_);
  return value_;
}

void CpuFlag::Store(uint64_t value) {
  {
    absl::MutexLock lock(&mu_);  // Wakes workers whose condition now holds.
    value_ = value;
  }
  waiters_.Notify(value);
}

Flag::WaitId CpuFlag::AsyncWait(uint64_t value, WaitCondition condition,
                                WaitDone done) {
  return waiters_.Add([this] { return Load(); }, value, condition,
                      std::move(done));
}

void CpuFlag::Release(const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  waiters_.Release(reason);
}

void CpuFlag::BlockUntil(uint64_t value, WaitCondition condition) {
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return released_ || Satisfies(value_, value, condition);
  };
  absl::MutexLock lock(&mu_, absl::Condition(&ready));
}

}  // namespace gpustream::backend
