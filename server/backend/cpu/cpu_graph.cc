// Graph launches on a CPU queue: the commands between two waits run as one
// resumable op, straight from the graph (no per-command op, closure or
// argument copy), which is what makes a replay cheaper than the same
// commands enqueued one by one.
#include <chrono>
#include <cstring>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/cpu/cpu_buffer.h"
#include "server/backend/cpu/cpu_queue.h"
#include "server/backend/graph.h"

namespace gpustream::backend {
namespace {

// Runs commands [next, end) of a graph on the queue's execution thread. Its
// RecordEvents' points were made at enqueue, in order (so a later wait of
// the same launch sees them); they complete when reached, and all the
// ones left complete when the segment is dropped or fails, so no queue
// waits on them forever. Not thread-safe: the queue runs one op at a time.
class GraphSegment {
 public:
  GraphSegment(std::shared_ptr<const Graph> graph, size_t begin, size_t end,
               std::vector<std::shared_ptr<CpuEventPoint>> records)
      : graph_(std::move(graph)),
        next_(begin),
        end_(end),
        records_(std::move(records)) {}

  absl::Status operator()(const CpuOp::Context& c) {
    if (c.dropped) {
      CompleteRecordsLeft();
      return absl::OkStatus();
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<GraphCommand>& commands = graph_->commands();
    while (next_ < end_) {
      absl::Status s = Run(commands[next_++], c);
      if (!s.ok()) {
        CompleteRecordsLeft();
        return s;
      }
      if (next_ < end_ &&
          std::chrono::steady_clock::now() - start >= kCpuTurnSlice) {
        *c.again = true;  // Yield: the rest runs at the queue's next turn.
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Run(const GraphCommand& command, const CpuOp::Context& c) {
    if (const auto* launch = std::get_if<GraphLaunch>(&command)) {
      return c.core->RunLaunch(*c.slot,
                               static_cast<const CpuKernel&>(*launch->kernel),
                               launch->config, launch->args);
    }
    if (const auto* write = std::get_if<GraphWrite>(&command)) {
      std::memcpy(CpuData(write->dst, write->offset), write->data.data(),
                  write->data.size());
    } else if (const auto* copy = std::get_if<GraphCopy>(&command)) {
      CpuCopy(copy->src, copy->src_offset, copy->dst, copy->dst_offset,
              copy->size);
    } else if (const auto* fill = std::get_if<GraphFill>(&command)) {
      CpuFill(fill->dst, fill->offset, fill->size, fill->value);
    } else if (std::holds_alternative<GraphRecordEvent>(command)) {
      records_[next_record_++]->Complete();
    } else if (const auto* write_flag = std::get_if<GraphWriteFlag>(&command)) {
      write_flag->flag->Store(write_flag->value);
    } else if (const auto* host = std::get_if<GraphHostFunc>(&command)) {
      (*host->fn)();
    }
    // Waits are ops of their own (LaunchGraph): never in a segment.
    return absl::OkStatus();
  }

  void CompleteRecordsLeft() {
    while (next_record_ < records_.size()) records_[next_record_++]->Complete();
  }

  std::shared_ptr<const Graph> graph_;
  size_t next_;
  const size_t end_;
  std::vector<std::shared_ptr<CpuEventPoint>> records_;
  size_t next_record_ = 0;
};

bool IsWait(const GraphCommand& command) {
  return std::holds_alternative<GraphWaitEvent>(command) ||
         std::holds_alternative<GraphWaitFlag>(command);
}

}  // namespace

absl::Status CpuQueue::LaunchGraph(std::shared_ptr<const Graph> graph) {
  const std::vector<GraphCommand>& commands = graph->commands();
  std::vector<CpuOp> ops;
  size_t i = 0;
  while (i < commands.size()) {
    if (const auto* wait = std::get_if<GraphWaitEvent>(&commands[i])) {
      // The latest record now: one made earlier in this launch (the capture
      // allows no other), whose point exists already.
      std::shared_ptr<CpuEventPoint> point =
          static_cast<CpuEvent&>(*wait->event).Latest();
      if (point != nullptr) {
        CpuOp op;
        op.kind = CpuOp::Kind::kWaitEvent;
        op.point = std::move(point);
        ops.push_back(std::move(op));
      }
      ++i;
      continue;
    }
    if (const auto* wait = std::get_if<GraphWaitFlag>(&commands[i])) {
      CpuOp op;
      op.kind = CpuOp::Kind::kWaitFlag;
      op.flag = std::static_pointer_cast<CpuFlag>(wait->flag);
      op.value = wait->value;
      op.condition = wait->condition;
      ops.push_back(std::move(op));
      ++i;
      continue;
    }
    const size_t begin = i;
    std::vector<std::shared_ptr<CpuEventPoint>> records;
    for (; i < commands.size() && !IsWait(commands[i]); ++i) {
      if (const auto* record = std::get_if<GraphRecordEvent>(&commands[i])) {
        records.push_back(static_cast<CpuEvent&>(*record->event).NewRecord());
      }
    }
    CpuOp op;
    op.fn = GraphSegment(graph, begin, i, std::move(records));
    ops.push_back(std::move(op));
  }
  core_->EnqueueBatch(std::move(ops));
  return absl::OkStatus();
}

}  // namespace gpustream::backend
