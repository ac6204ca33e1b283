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
#include "server/backend/watch.h"

namespace gpustream::backend {

class Graph;  // graph.h

// A buffer argument: the kernel sees the memory from `offset` on.
struct BufferArg {
  std::shared_ptr<Buffer> buffer;
  uint64_t offset = 0;
};

// One launch argument, already checked against the kernel's signature.
using KernelArg = std::variant<BufferArg, int32_t, uint32_t, int64_t, uint64_t,
                               float, double, std::string>;

// Contract for every enqueue method: arguments were validated by the caller
// (ids resolved, ranges, kinds and the kernel's limits checked). The method
// returns once the work is enqueued, never waiting for the device and never
// blocking on the driver: a backend whose native queue would block (CUDA
// blocks the caller past about a thousand pending operations) holds the
// work in the daemon, within a bounded budget per queue, and hands it on as
// the device completes earlier work. A non-OK return means the work was not
// enqueued (the driver refused it at once) and the queue is unchanged.
//
// Work runs in enqueue order. A failure while running becomes the queue's
// sticky error: everything enqueued later, waits included, is skipped
// (callbacks see the error), and the queue stays failed, as in CUDA. Events
// recorded after the failure still complete, so other queues never hang.
//
// Enqueued work keeps the objects it uses alive until it has run. All
// methods are thread-safe. Queues are shared (std::shared_ptr) and their
// native resources are released on the device's cleanup thread, wherever
// the last reference goes: the destructor of an idle queue never blocks.
class Queue {
 public:
  using Done = absl::AnyInvocable<void(absl::Status)>;
  using ReadDone = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;

  virtual ~Queue() = default;

  virtual absl::Status Launch(const Kernel& kernel, const LaunchConfig& config,
                              std::vector<KernelArg> args) = 0;
  // The checks Launch makes of the device's own limits (a cooperative grid
  // it cannot hold resident, a cluster the kernel cannot run: OUT_OF_RANGE
  // naming the limit), without enqueueing: a capture runs them once, for
  // the graph's every replay. Launch runs them too.
  virtual absl::Status CheckLaunch(const Kernel& kernel,
                                   const LaunchConfig& config) {
    return absl::OkStatus();
  }
  // Host to device: `data` is staged before this returns.
  virtual absl::Status Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                             std::string data) = 0;
  // Device to host: `done` receives the bytes once the copy has run (or the
  // sticky error). Not called when the return is non-OK.
  virtual absl::Status Read(std::shared_ptr<Buffer> src, uint64_t offset,
                            uint64_t size, ReadDone done) = 0;
  virtual absl::Status Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                            std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                            uint64_t size) = 0;
  // Repeats the 32-bit `value` over [offset, offset + size); offset and size
  // are multiples of 4.
  virtual absl::Status Fill(std::shared_ptr<Buffer> dst, uint64_t offset,
                            uint64_t size, uint32_t value) = 0;

  virtual absl::Status RecordEvent(std::shared_ptr<Event> event) = 0;
  // Later work waits for the event's record that is the latest *now*; a
  // later RecordEvent neither releases nor extends this wait. An event never
  // recorded means no wait.
  virtual absl::Status WaitEvent(std::shared_ptr<Event> event) = 0;
  // Later work waits for all work enqueued on `other` so far.
  virtual absl::Status WaitQueue(Queue& other) = 0;

  // Later work stalls until the flag satisfies the condition (or the flag
  // is released: Flag::Release).
  virtual absl::Status WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                                WaitCondition condition) = 0;
  virtual absl::Status WriteFlag(std::shared_ptr<Flag> flag,
                                 uint64_t value) = 0;

  // Runs `fn` on a daemon thread when the queue reaches this point (never
  // inside a driver callback). `fn` must be quick and must not block (it
  // posts a notification): the queue does not wait for it; blocking
  // semantics are built on top with a WaitFlag after it. Skipped after a
  // sticky error.
  virtual absl::Status HostFunc(absl::AnyInvocable<void()> fn) = 0;

  // Enqueues a captured graph's commands as if each were enqueued here, in
  // order, then records `done` (if not null: the launch's end, for the
  // next launch of the graph to wait on; recorded even when the launch
  // fails part-way, after what was enqueued); the queued work holds
  // `graph` until it has run. The default (graph.cc) enqueues them one by
  // one through the methods above; a backend may do it faster. The caller
  // serializes launches of one graph.
  virtual absl::Status LaunchGraph(std::shared_ptr<const Graph> graph,
                                   std::shared_ptr<Event> done);

  // Calls `done` with the sticky status once all work enqueued so far has
  // completed (or been dropped by Cancel): at once, on this thread, when the
  // queue is already idle (then null is returned); else on a backend
  // thread, unless the returned watch is cancelled first.
  virtual std::shared_ptr<Watch> OnIdle(Done done) = 0;

  // Teardown: the queue takes no more work; work still held in the daemon
  // is dropped (its callbacks get `reason`), and `reason` becomes the sticky
  // error if there was none. Work already handed to a GPU may still run.
  // Waits the queue is stalled on are released through their flags.
  virtual void Cancel(const absl::Status& reason) = 0;

  // True when no enqueued work is pending.
  virtual bool IsIdle() = 0;
  // Commands enqueued and not yet completed or dropped, as counted on the
  // queue's WorkAccount (internal operations excluded).
  virtual uint64_t inflight_commands() = 0;
  // The sticky error, OK if none.
  virtual absl::Status error() = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_QUEUE_H_
