// Completion flags on the CPU backend: a mutex-guarded 64-bit value.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/flag.h"

namespace gpustream::backend {

class CpuFlag : public Flag {
 public:
  uint64_t Load() override;
  void Store(uint64_t value) override;
  WaitId AsyncWait(uint64_t value, WaitCondition condition,
                   WaitDone done) override;
  void CancelWait(WaitId id) override;
  void Release(const absl::Status& reason) override;

  // Blocks the calling queue worker until the condition holds or the flag is
  // released.
  void BlockUntil(uint64_t value, WaitCondition condition);

 private:
  struct Waiter {
    uint64_t value;
    WaitCondition condition;
    WaitDone done;
  };

  absl::Mutex mu_;
  uint64_t value_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status release_reason_ ABSL_GUARDED_BY(mu_);
  WaitId next_wait_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<WaitId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_FLAG_H_
