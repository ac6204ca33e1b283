// CPU completion flags.
#include "server/backend/cpu/cpu_flag.h"

namespace gpustream::backend {

uint64_t CpuFlag::Load() {
  absl::MutexLock lock(&mu_);
  return value_;
}

void CpuFlag::Store(uint64_t value) {
  {
    absl::MutexLock lock(&mu_);
    value_ = value;
  }
  waiters_.Notify(value);
}

Flag::WaitId CpuFlag::AsyncWait(uint64_t value, WaitCondition condition,
                                WaitDone done) {
  return waiters_.Add([this] { return Load(); }, value, condition,
                      std::move(done));
}

void CpuFlag::Release(const absl::Status& reason) { waiters_.Release(reason); }

}  // namespace gpustream::backend
