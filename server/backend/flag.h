// A completion flag: a 64-bit slot in pinned host memory, device-mapped.
#ifndef GPUSTREAM_SERVER_BACKEND_FLAG_H_
#define GPUSTREAM_SERVER_BACKEND_FLAG_H_

#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// The host stores and loads the value; queues wait on it (WaitHostValue) or
// store into it (WriteFlag). Thread-safe.
class Flag {
 public:
  using WaitId = uint64_t;
  using WaitDone = absl::AnyInvocable<void(absl::StatusOr<uint64_t>)>;

  virtual ~Flag() = default;

  virtual uint64_t Load() = 0;
  virtual void Store(uint64_t value) = 0;

  // Host-side wait: calls `done` with the satisfying value once the
  // condition holds (at once, on this thread, if it already does), or with
  // the Release() reason. Returns an id for CancelWait.
  virtual WaitId AsyncWait(uint64_t value, WaitCondition condition,
                           WaitDone done) = 0;

  // Drops a pending wait without calling it (its timeout fired, say).
  virtual void CancelWait(WaitId id) = 0;

  // Session teardown or flag destruction: every current and future wait on
  // this flag, by a queue or the host, is released (host waits fail with
  // `reason`), so nothing stays stalled on a value nobody will write. Host
  // waits and daemon-held queue waits are released at once; a wait already
  // on a GPU stream is released by storing the awaited values one by one,
  // in enqueue order, each until its queue has passed it (two EQUAL waits
  // on different values cannot be satisfied by one store). Never blocks.
  virtual void Release(const absl::Status& reason) = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_FLAG_H_
