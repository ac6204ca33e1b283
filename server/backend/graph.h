// A captured graph: commands recorded once, validated once, replayed on any
// queue of the device by one LaunchGraph.
#ifndef GPUSTREAM_SERVER_BACKEND_GRAPH_H_
#define GPUSTREAM_SERVER_BACKEND_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/buffer.h"
#include "server/backend/event.h"
#include "server/backend/flag.h"
#include "server/backend/module.h"
#include "server/backend/queue.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// One recorded command, holding what it uses: a graph keeps its buffers,
// flags and events alive (and a Write its bytes) for as long as it lives.
struct GraphLaunch {
  const Kernel* kernel;  // Loaded modules outlive every graph.
  LaunchConfig config;
  std::vector<KernelArg> args;
};
struct GraphWrite {
  std::shared_ptr<Buffer> dst;
  uint64_t offset;
  std::string data;  // Owned by the graph: copied once, at capture.
};
struct GraphCopy {
  std::shared_ptr<Buffer> src;
  uint64_t src_offset;
  std::shared_ptr<Buffer> dst;
  uint64_t dst_offset;
  uint64_t size;
};
struct GraphFill {
  std::shared_ptr<Buffer> dst;
  uint64_t offset;
  uint64_t size;
  uint32_t value;
};
struct GraphRecordEvent {
  std::shared_ptr<Event> event;
};
// Only of an event recorded earlier in the same graph (the capture checks).
struct GraphWaitEvent {
  std::shared_ptr<Event> event;
};
struct GraphWaitFlag {
  std::shared_ptr<Flag> flag;
  uint64_t value;
  WaitCondition condition;
};
struct GraphWriteFlag {
  std::shared_ptr<Flag> flag;
  uint64_t value;
};
// Called on every replay (Queue::HostFunc's contract: quick, never
// blocking); launches of one graph never overlap, but the calls of two
// consecutive launches may, so `fn` must be safe to call concurrently.
struct GraphHostFunc {
  std::shared_ptr<absl::AnyInvocable<void()>> fn;
};

using GraphCommand = std::variant<GraphLaunch, GraphWrite, GraphCopy, GraphFill,
                                  GraphRecordEvent, GraphWaitEvent,
                                  GraphWaitFlag, GraphWriteFlag, GraphHostFunc>;

// The most commands one graph may hold (API: RESOURCE_EXHAUSTED past it).
inline constexpr size_t kMaxGraphCommands = 65536;

// Immutable once built, so any number of queues may replay it at once;
// the caller serializes launches of one graph where that matters (the
// session does: one graph's launches never overlap). Thread-safe.
class Graph {
 public:
  explicit Graph(std::vector<GraphCommand> commands);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::vector<GraphCommand>& commands() const { return commands_; }
  // Bytes the graph owns (its Writes' data).
  uint64_t owned_bytes() const { return owned_bytes_; }

  // The backend's own form of the graph (the GPU layer's executable
  // graphs): made by the first caller's `make`, kept as long as the graph,
  // the same object for every caller. One backend per graph (a session's
  // graphs belong to its device).
  std::shared_ptr<void> Native(
      absl::FunctionRef<std::shared_ptr<void>()> make) const;

 private:
  const std::vector<GraphCommand> commands_;
  const uint64_t owned_bytes_;
  mutable absl::Mutex mu_;
  mutable std::shared_ptr<void> native_ ABSL_GUARDED_BY(mu_);
};

// Enqueues commands [begin, end) of `graph` through the queue's ordinary
// methods, in order (Queue::LaunchGraph's default does all of them). The
// commands were validated at capture, so each is enqueued as is. If the
// queue refuses one (its driver failed at once) the commands before it
// stay enqueued and the error names the command's index.
absl::Status ReplayGraphCommands(Queue& queue, const Graph& graph, size_t begin,
                                 size_t end);

// How every LaunchGraph ends, once the commands were enqueued (`enqueued`:
// OK, or the refusal that stopped them part-way): records `done` (if not
// null) after them, holding `graph` until it completes. Returns the first
// error.
absl::Status RecordGraphLaunch(Queue& queue, std::shared_ptr<const Graph> graph,
                               std::shared_ptr<Event> done,
                               absl::Status enqueued);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GRAPH_H_
