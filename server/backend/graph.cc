// Captured graphs, and their replay through a queue's ordinary methods.
#include "server/backend/graph.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpustream::backend {
namespace {

uint64_t OwnedBytes(const std::vector<GraphCommand>& commands) {
  uint64_t bytes = 0;
  for (const GraphCommand& command : commands) {
    if (const auto* write = std::get_if<GraphWrite>(&command)) {
      bytes += write->data.size();
    }
  }
  return bytes;
}

// Enqueues one command on `queue`.
struct Enqueue {
  Queue& queue;

  absl::Status operator()(const GraphLaunch& c) const {
    return queue.Launch(*c.kernel, c.config, c.args);
  }
  absl::Status operator()(const GraphWrite& c) const {
    return queue.Write(c.dst, c.offset, c.data);
  }
  absl::Status operator()(const GraphCopy& c) const {
    return queue.Copy(c.src, c.src_offset, c.dst, c.dst_offset, c.size);
  }
  absl::Status operator()(const GraphFill& c) const {
    return queue.Fill(c.dst, c.offset, c.size, c.value);
  }
  absl::Status operator()(const GraphRecordEvent& c) const {
    return queue.RecordEvent(c.event);
  }
  absl::Status operator()(const GraphWaitEvent& c) const {
    return queue.WaitEvent(c.event);
  }
  absl::Status operator()(const GraphWaitFlag& c) const {
    return queue.WaitFlag(c.flag, c.value, c.condition);
  }
  absl::Status operator()(const GraphWriteFlag& c) const {
    return queue.WriteFlag(c.flag, c.value);
  }
  absl::Status operator()(const GraphHostFunc& c) const {
    return queue.HostFunc([fn = c.fn] { (*fn)(); });
  }
};

}  // namespace

Graph::Graph(std::vector<GraphCommand> commands)
    : commands_(std::move(commands)), owned_bytes_(OwnedBytes(commands_)) {}

std::shared_ptr<void> Graph::Native(
    absl::FunctionRef<std::shared_ptr<void>()> make) const {
  absl::MutexLock lock(&mu_);
  if (native_ == nullptr) native_ = make();
  return native_;
}

absl::Status ReplayGraphCommands(Queue& queue, const Graph& graph, size_t begin,
                                 size_t end) {
  const std::vector<GraphCommand>& commands = graph.commands();
  for (size_t i = begin; i < end; ++i) {
    absl::Status s = std::visit(Enqueue{queue}, commands[i]);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("graph command ", i, " of ", commands.size(),
                                 " was refused: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status RecordGraphLaunch(Queue& queue, std::shared_ptr<const Graph> graph,
                               std::shared_ptr<Event> done,
                               absl::Status enqueued) {
  if (done == nullptr) return enqueued;
  // Recorded even after a refusal part-way: the commands enqueued before it
  // run, and the next launch must wait for them. The graph lives until
  // then (its commands hold its objects, not the graph's own charges).
  absl::Status recorded = queue.RecordEvent(done);
  if (recorded.ok()) done->OnComplete([graph = std::move(graph)] {});
  return enqueued.ok() ? recorded : enqueued;
}

absl::Status Queue::LaunchGraph(std::shared_ptr<const Graph> graph,
                                std::shared_ptr<Event> done) {
  absl::Status replayed =
      ReplayGraphCommands(*this, *graph, 0, graph->commands().size());
  return RecordGraphLaunch(*this, std::move(graph), std::move(done),
                           std::move(replayed));
}

}  // namespace gpustream::backend
