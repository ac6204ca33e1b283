// Release binaries' choice of Abseil mutex checking.
#ifndef GPUSTREAM_SERVER_UTIL_RELEASE_MUTEXES_H_
#define GPUSTREAM_SERVER_UTIL_RELEASE_MUTEXES_H_

#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace gpustream::util {

// Debian's Abseil checks every absl::Mutex acquisition for lock-order
// cycles (it keeps a process-wide graph of locks held): on the CPU
// backend's launch path, six acquisitions per launch, that costs 40% of
// the launch rate (bench: 0.8M -> 1.2M noop launches/s in-process). An
// optimized build (NDEBUG) turns the check off, once, before any thread
// starts, unless GPUSTREAM_CHECK_LOCK_ORDER is set in the environment: the
// tests set it for every process they start (tests/daemon_process.cc), so
// that a lock-order inversion still aborts a test; debug builds always
// keep it.
inline void UseReleaseMutexes() {
#ifdef NDEBUG
  if (std::getenv("GPUSTREAM_CHECK_LOCK_ORDER") != nullptr) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace gpustream::util

#endif  // GPUSTREAM_SERVER_UTIL_RELEASE_MUTEXES_H_
