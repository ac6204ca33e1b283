// Graphs on GPU queues: runs of launches, copies and fills captured into
// executable graphs, and GpuQueue::LaunchGraph.
#include "server/backend/gpu/gpu_graph.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/backend/gpu/gpu_queue.h"

namespace gpustream::backend {
namespace {

// Fewer commands gain nothing from a graph launch over their own calls.
constexpr size_t kMinSegment = 2;

bool Capturable(const GraphCommand& command) {
  return std::holds_alternative<GraphLaunch>(command) ||
         std::holds_alternative<GraphCopy>(command) ||
         std::holds_alternative<GraphFill>(command);
}

// Makes a command's native call on `q`'s stream, which is capturing.
struct CaptureCommand {
  GpuQueueCore& q;

  absl::Status operator()(const GraphLaunch& c) const {
    const auto& kernel = static_cast<const GpuKernel&>(*c.kernel);
    return IssueLaunch(q, kernel, c.config, PackGpuArgs(kernel, c.args));
  }
  absl::Status operator()(const GraphCopy& c) const {
    return IssueCopy(q, *c.src, c.src_offset, *c.dst, c.dst_offset, c.size);
  }
  absl::Status operator()(const GraphFill& c) const {
    return IssueFill(q, *c.dst, c.offset, c.size, c.value);
  }
  template <typename Other>
  absl::Status operator()(const Other&) const {
    return absl::InternalError("a command that a capture cannot record");
  }
};

}  // namespace

GpuGraphSegment::~GpuGraphSegment() {
  absl::MutexLock lock(&mu_);
  if (exec_ == nullptr) return;
  device_->Release(epoch_, [device = device_, exec = exec_] {
    device->Warn(device->driver().GraphExecDestroy(exec));
  });
}

bool GpuGraphSegment::has_kernel() const {
  for (size_t i = begin_; i < end_; ++i) {
    if (std::holds_alternative<GraphLaunch>(graph_.commands()[i])) return true;
  }
  return false;
}

absl::Status GpuGraphSegment::Issue(GpuQueueCore& q) {
  GpuDevice& device = q.device();
  absl::MutexLock lock(&mu_);
  if (device_ != nullptr && device_ != &device) {
    return absl::InternalError("a graph launched on another device");
  }
  // A recovery reset the context that held it, and freed it: its handle
  // must never reach the driver again (it may name a new object).
  if (exec_ != nullptr && epoch_ != device.epoch()) exec_ = nullptr;
  if (exec_ == nullptr) {
    if (absl::Status s = CaptureLocked(q); !s.ok()) return s;
  }
  return device.Check(device.driver().GraphLaunch(exec_, q.stream()));
}

absl::Status GpuGraphSegment::CaptureLocked(GpuQueueCore& q) {
  GpuDevice& device = q.device();
  const GpuDriver& driver = device.driver();
  if (absl::Status s = device.Check(driver.StreamBeginCapture(q.stream()));
      !s.ok()) {
    return s;
  }
  absl::Status recorded;
  const std::vector<GraphCommand>& commands = graph_.commands();
  for (size_t i = begin_; i < end_; ++i) {
    recorded = std::visit(CaptureCommand{q}, commands[i]);
    if (!recorded.ok()) {
      recorded =
          absl::Status(recorded.code(),
                       absl::StrCat("capturing graph command ", i, " of ",
                                    commands.size(), ": ", recorded.message()));
      break;
    }
  }
  // Ended whatever happened: the stream must not stay capturing.
  absl::StatusOr<GpuGraphExecHandle> exec = driver.StreamEndCapture(q.stream());
  if (!recorded.ok()) {
    if (exec.ok()) device.Warn(driver.GraphExecDestroy(*exec));
    return recorded;
  }
  if (!exec.ok()) return device.Check(exec.status());
  device_ = &device;
  exec_ = *exec;
  epoch_ = device.epoch();
  return absl::OkStatus();
}

GpuGraphPlan::GpuGraphPlan(const Graph& graph) {
  const std::vector<GraphCommand>& commands = graph.commands();
  size_t i = 0;
  while (i < commands.size()) {
    size_t run = i;
    while (run < commands.size() && Capturable(commands[run])) ++run;
    if (run - i >= kMinSegment) {
      steps_.push_back(
          {i, run, std::make_unique<GpuGraphSegment>(graph, i, run)});
      i = run;
      continue;
    }
    const size_t next = std::max(run, i + 1);
    if (!steps_.empty() && steps_.back().segment == nullptr) {
      steps_.back().end = next;  // One by one, after the last ones.
    } else {
      steps_.push_back({i, next, nullptr});
    }
    i = next;
  }
}

absl::Status GpuQueue::LaunchGraph(std::shared_ptr<const Graph> graph,
                                   std::shared_ptr<Event> done) {
  if (!core_->device().traits().graphs) {
    return Queue::LaunchGraph(std::move(graph), std::move(done));
  }
  auto plan = std::static_pointer_cast<const GpuGraphPlan>(
      graph->Native([&] { return std::make_shared<GpuGraphPlan>(*graph); }));
  absl::Status enqueued;
  for (const GpuGraphPlan::Step& step : plan->steps()) {
    if (step.segment == nullptr) {
      enqueued = ReplayGraphCommands(*this, *graph, step.begin, step.end);
    } else {
      GpuQueueCore::Op op;
      op.issue = [segment = step.segment.get()](GpuQueueCore& q) {
        return segment->Issue(q);
      };
      // The graph, and with it the segment, lives until the launch ran.
      op.done = [graph](absl::Status) {};
      op.kernel = step.segment->has_kernel();
      enqueued = core_->Submit(std::move(op));
      if (!enqueued.ok()) {
        enqueued = absl::Status(
            enqueued.code(),
            absl::StrCat(
                "graph commands ", step.begin, " to ", step.end - 1, " of ",
                graph->commands().size(),
                " (one executable graph) were refused: ", enqueued.message()));
      }
    }
    if (!enqueued.ok()) break;
  }
  return RecordGraphLaunch(*this, std::move(graph), std::move(done),
                           std::move(enqueued));
}

}  // namespace gpustream::backend
