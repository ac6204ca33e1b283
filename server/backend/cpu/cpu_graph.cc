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

// Runs commands [next, end) of a graph on the queue's execution thread, as
// many as fit in a turn (kCpuTurnSlice). Each run of consecutive launches
// goes under one stoppable launch of the slot (CpuQueueCore::RunStoppable:
// its time limit counts from the run's first kernel), so a launch costs a
// kernel call and nothing more; the other commands run outside it, each
// after a check that the queue was not cancelled. Its RecordEvents' points
// were made at enqueue, in order (so a later wait of the same launch sees
// them), and `done` (the launch's end, or null) after them; they complete
// when reached, and all the ones left complete when the segment is dropped,
// stopped or fails, so no queue waits on them forever. Not thread-safe: the
// queue runs one op at a time.
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
    absl::Status s = RunTurn(c);
    if (!s.ok()) {
      *c.again = false;
      CompleteRecordsLeft();
    } else if (next_ == end_) {
      CompleteRecordsLeft();  // The launch's end, if it is this segment's.
    }
    return s;
  }

 private:
  absl::Status RunTurn(const CpuOp::Context& c) {
    const auto start = c.start;
    const std::vector<GraphCommand>& commands = graph_->commands();
    while (next_ < end_) {
      absl::Status s;
      if (std::holds_alternative<GraphLaunch>(commands[next_])) {
        s = c.core->RunStoppable(
            *c.slot, start,
            [&](const volatile int* stop, const CpuKernel** running) {
              return RunLaunches(start, stop, running);
            });
      } else {
        // A cancel since the turn began (its error) drops the rest.
        s = c.core->error();
        if (s.ok()) Run(commands[next_++]);
      }
      if (!s.ok()) return s;
      if (next_ < end_ &&
          std::chrono::steady_clock::now() - start >= kCpuTurnSlice) {
        *c.again = true;  // Yield: the rest runs at the queue's next turn.
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // The launches from next_ on, up to another command or the turn's end;
  // returns at once when asked to stop (RunStoppable says why).
  absl::Status RunLaunches(std::chrono::steady_clock::time_point start,
                           const volatile int* stop,
                           const CpuKernel** running) {
    const std::vector<GraphCommand>& commands = graph_->commands();
    while (next_ < end_ && *stop == 0) {
      const auto* launch = std::get_if<GraphLaunch>(&commands[next_]);
      if (launch == nullptr) break;
      ++next_;
      const auto& kernel = static_cast<const CpuKernel&>(*launch->kernel);
      *running = &kernel;
      if (absl::Status s = kernel.Run(launch->config, launch->args, stop);
          !s.ok()) {
        return s;
      }
      if (std::chrono::steady_clock::now() - start >= kCpuTurnSlice) break;
    }
    return absl::OkStatus();
  }

  // Any command but a launch or a wait.
  void Run(const GraphCommand& command) {
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

absl::Status CpuQueue::LaunchGraph(std::shared_ptr<const Graph> graph,
                                   std::shared_ptr<Event> done) {
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
    // The launch's end completes with the last segment, when it is last.
    if (i == commands.size() && done != nullptr) {
      records.push_back(static_cast<CpuEvent&>(*done).NewRecord());
      done.reset();
    }
    CpuOp op;
    op.fn = GraphSegment(graph, begin, i, std::move(records));
    ops.push_back(std::move(op));
  }
  if (done != nullptr) {  // The graph ends with a wait, or is empty.
    CpuOp op;
    op.fn = [point = static_cast<CpuEvent&>(*done).NewRecord()](
                const CpuOp::Context&) {
      point->Complete();  // Dropped or skipped too: nobody hangs on it.
      return absl::OkStatus();
    };
    ops.push_back(std::move(op));
  }
  core_->EnqueueBatch(std::move(ops));
  return absl::OkStatus();
}

}  // namespace gpustream::backend
