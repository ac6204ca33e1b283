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

  // Whether Release() was called: queue waits pass from then on.
  bool released() { return waiters_.released(); }

 private:
  absl::Mutex mu_;
  uint64_t value_ ABSL_GUARDED_BY(mu_) = 0;
  // Host waits and the queues parked on the flag (CpuQueueCore), alike.
  FlagWaiters waiters_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_
