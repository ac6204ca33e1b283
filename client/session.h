// A session on one device: the factory of queues, events, flags, buffers.
#ifndef GPUSTREAM_CLIENT_SESSION_H_
#define GPUSTREAM_CLIENT_SESSION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/buffer.h"
#include "client/event.h"
#include "client/flag.h"
#include "client/queue.h"
#include "client/session_core.h"
#include "client/shared_buffer.h"

namespace gpustream::client {

// Thread-safe, except for the handles it returns (one thread each). Handles
// keep the session's connection alive; closing the session (or destroying
// it) tears down every object on the server.
class Session {
 public:
  explicit Session(std::shared_ptr<SessionCore> core);
  ~Session();  // close()s.

  // The secret session id: whoever has it can use the session. Never
  // print or log it; use public_id().
  const std::string& id() const { return core_->id(); }
  // The session's public name ("s-" and 16 hex digits), as gpustreamctl
  // sessions and the daemon's log show it: safe to print.
  const std::string& public_id() const { return core_->public_id(); }
  // The engine behind the session (for tests and advanced use).
  SessionCore& core() { return *core_; }
  // The session's default queue, created with the session.
  Queue& default_queue() { return default_queue_; }

  // Pipelined: the objects are usable at once; a failure (quota exhausted)
  // is reported by the next synchronize().
  Queue create_queue(int32_t priority = 0);
  Event create_event(bool enable_timing = false);
  Flag create_flag();

  // Synchronous, as cudaMalloc: RESOURCE_EXHAUSTED is reported here. With
  // a `timeout`, DEADLINE_EXCEEDED once it passes: the daemon may still
  // make the buffer, and frees it right after (nothing else is reported).
  // A zero timeout waits as long as the allocation takes (a device zeroes
  // gigabytes in seconds) or until the session or its stream ends.
  absl::StatusOr<Buffer> allocate(
      uint64_t size_bytes, MemoryKind kind = MemoryKind::kDevice,
      absl::Duration timeout = absl::ZeroDuration());
  // HOST_SHARED memory that this process maps too (same host only): the
  // data plane without copies through gRPC. FAILED_PRECONDITION where the
  // daemon serves no share socket.
  absl::StatusOr<SharedBuffer> allocate_shared(uint64_t size_bytes);

  // Waits until every command enqueued so far has been written to the
  // daemon (they leave on their own; this is for callers that then talk to
  // the daemon another way, e.g. a unary RPC).
  absl::Status flush();
  // Collects the first asynchronous command failure since the last check,
  // of any queue.
  absl::Status take_error();
  // Closes the session on the server and the streams. Idempotent. Takes at
  // most SessionCore::kCloseTimeout (10 s), plus the rest of a host function
  // that is running; must not be called from a host function.
  absl::Status close();

 private:
  std::shared_ptr<SessionCore> core_;
  Queue default_queue_;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_SESSION_H_
