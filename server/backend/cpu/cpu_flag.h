// Completion flags on the CPU backend: a mutex-guarded 64-bit value.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/flag.h"
#include "server/backend/flag_waiters.h"

namespace gpustream::backend {

class CpuFlag : public Flag {
 public:
  uint64_t Load() override;
  void Store(uint64_t value) override;
  WaitId AsyncWait(uint64_t value, WaitCondition condition,
                   WaitDone done) override;
  void CancelWait(WaitId id) override { waiters_.Cancel(id); }
  void Release(const absl::Status& reason) override;

  // Blocks the calling queue worker until the condition holds or the flag is
  // released.
  void BlockUntil(uint64_t value, WaitCondition condition);

 private:
  absl::Mutex mu_;  // Guards the value for the workers blocked on it.
  uint64_t value_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  FlagWaiters waiters_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_
