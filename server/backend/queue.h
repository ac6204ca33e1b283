// An in-order queue of device work: a CUDA/HIP stream, or a CPU worker.
#ifndef GPUSTREAM_SERVER_BACKEND_QUEUE_H_
#define GPUSTREAM_SERVER_BACKEND_QUEUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/backend/buffer.h"
#include "server/backend/event.h"
#include "server/backend/flag.h"
#include "server/backend/module.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// A buffer argument: the kernel sees the memory from `offset` on.
struct BufferArg {
  std::shared_ptr<Buffer> buffer;
  uint64_t offset = 0;
};

// One launch argument, already checked against the kernel's signature.
using KernelArg = std::variant<BufferArg, int32_t, uint32_t, int64_t, uint64_t,
                               float, double, std::string>;

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_memory_bytes = 0;
};

// Contract for every enqueue method: arguments were validated by the caller
// (ids resolved, ranges and kinds checked); the method returns once the work
// is enqueued, never waiting for the device. Work runs in enqueue order.
// A failure while running becomes the queue's sticky error: later work is
// skipped, callbacks see the error, and the queue stays failed (as CUDA).
// Enqueued work keeps the objects it uses alive. All methods are
// thread-safe; the queue's destructor waits for enqueued work to finish.
class Queue {
 public:
  using Done = absl::AnyInvocable<void(absl::Status)>;

  virtual ~Queue() = default;

  virtual void Launch(const Kernel& kernel, const LaunchConfig& config,
                      std::vector<KernelArg> args) = 0;
  // Host to device: `data` is staged (copied) before this returns.
  virtual void Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                     std::string data) = 0;
  // Device to host: `done` receives the bytes once the copy has run.
  virtual void Read(
      std::shared_ptr<Buffer> src, uint64_t offset, uint64_t size,
      absl::AnyInvocable<void(absl::StatusOr<std::string>)> done) = 0;
  virtual void Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                    std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                    uint64_t size) = 0;
  // Repeats the 32-bit `value` over [offset, offset + size); size % 4 == 0.
  virtual void Fill(std::shared_ptr<Buffer> dst, uint64_t offset, uint64_t size,
                    uint32_t value) = 0;

  virtual void RecordEvent(std::shared_ptr<Event> event) = 0;
  // Later work waits for the event's point recorded so far.
  virtual void WaitEvent(std::shared_ptr<Event> event) = 0;
  // Later work waits for all work enqueued on `other` so far.
  virtual void WaitQueue(Queue& other) = 0;

  // Later work stalls until the flag satisfies the condition.
  virtual void WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                        WaitCondition condition) = 0;
  virtual void WriteFlag(std::shared_ptr<Flag> flag, uint64_t value) = 0;

  // Runs `fn` on a backend thread when the queue reaches this point. `fn`
  // must be quick and must not block (it posts a notification): the queue
  // does not wait for the client; blocking semantics are built on top with a
  // WaitFlag after it.
  virtual void HostFunc(absl::AnyInvocable<void()> fn) = 0;

  // Calls `done` with the sticky status once all work enqueued so far has
  // completed: at once, on this thread, when the queue is already idle.
  virtual void OnIdle(Done done) = 0;

  // True when no enqueued work is pending.
  virtual bool IsIdle() = 0;
  // The sticky error, OK if none.
  virtual absl::Status error() = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_QUEUE_H_
