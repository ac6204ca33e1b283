// Graphs on GPU queues: runs of launches, copies, fills and writes
// captured into executable graphs, and GpuQueue::LaunchGraph.
#include "server/backend/gpu/gpu_graph.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/backend/gpu/gpu_queue.h"
#include "server/backend/gpu/gpu_sm_partition.h"

namespace gpustream::backend {
namespace {

// Fewer commands gain nothing from a graph launch over their own calls.
constexpr size_t kMinSegment = 2;

bool Capturable(const GraphCommand& command) {
  if (const auto* write = std::get_if<GraphWrite>(&command)) {
    return !write->data.empty();
  }
  return std::holds_alternative<GraphLaunch>(command) ||
         std::holds_alternative<GraphCopy>(command) ||
         std::holds_alternative<GraphFill>(command);
}

// Frees pinned blocks on the cleanup thread (a free synchronizes the
// context: not during a capture, and not on a caller's thread).
void FreeWrites(GpuDevice* device, uint64_t epoch, GpuGraphWrites writes) {
  if (writes.blocks.empty()) return;
  device->Release(epoch, [device, writes = std::move(writes)] {
    absl::WriterMutexLock no_capture(&device->capture_mu());
    for (void* block : writes.blocks) {
      if (block != nullptr) device->Warn(device->driver().HostFree(block));
    }
  });
}

bool HasKernel(const Graph& graph, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (std::holds_alternative<GraphLaunch>(graph.commands()[i])) return true;
  }
  return false;
}

// Makes a command's native call on `stream`, which is capturing. A
// write copies from `host`, its pinned copy.
struct CaptureCommand {
  GpuDevice& device;
  GpuStreamHandle stream;
  const void* host;

  absl::Status operator()(const GraphLaunch& c) const {
    const auto& kernel = static_cast<const GpuKernel&>(*c.kernel);
    return IssueLaunch(device, stream, kernel, c.config,
                       PackGpuArgs(kernel, c.args));
  }
  absl::Status operator()(const GraphCopy& c) const {
    return IssueCopy(device, stream, *c.src, c.src_offset, *c.dst, c.dst_offset,
                     c.size);
  }
  absl::Status operator()(const GraphFill& c) const {
    return IssueFill(device, stream, *c.dst, c.offset, c.size, c.value);
  }
  absl::Status operator()(const GraphWrite& c) const {
    return IssueWrite(device, stream, *c.dst, c.offset, host, c.data.size());
  }
  template <typename Other>
  absl::Status operator()(const Other&) const {
    return absl::InternalError("a command that a capture cannot record");
  }
};

}  // namespace

GpuGraphExec::~GpuGraphExec() {
  // The partition goes after the graph whose kernels run in it, the
  // writes' bytes after the graph that copies them.
  device_->Release(
      epoch_, [device = device_, handle = handle_, partition = partition_] {
        device->Warn(device->driver().GraphExecDestroy(handle));
      });
  FreeWrites(device_, epoch_, std::move(writes_));
}

absl::Status GpuGraphExec::Launch(GpuQueueCore& q) {
  if (q.epoch() != epoch_) {  // Prepare matched them; a reset kills both.
    return absl::FailedPreconditionError(
        "an executable graph of an earlier context");
  }
  absl::MutexLock lock(&mu_);
  return q.device().Check(q.device().driver().GraphLaunch(handle_, q.stream()));
}

GpuGraphSegment::GpuGraphSegment(const Graph& graph, size_t begin, size_t end)
    : graph_(graph),
      begin_(begin),
      end_(end),
      has_kernel_(HasKernel(graph, begin, end)) {}

absl::StatusOr<std::shared_ptr<GpuGraphExec>> GpuGraphSegment::Prepare(
    GpuQueueCore& core) {
  absl::MutexLock lock(&mu_);
  if (uncapturable_) return nullptr;
  if (exec_ != nullptr && exec_->epoch() == core.epoch() &&
      exec_->partition() == core.partition().get()) {
    return exec_;
  }
  absl::StatusOr<std::shared_ptr<GpuGraphExec>> made = Capture(core);
  if (made.ok()) {
    exec_ = *std::move(made);
    return exec_;
  }
  GpuDevice& device = core.device();
  if (absl::IsAborted(made.status()) || device.failed() ||
      core.epoch() != device.epoch()) {
    return made.status();
  }
  // A limit of the driver's, not the client's fault: the commands still
  // run, one by one.
  uncapturable_ = true;
  device.Warn(absl::Status(
      made.status().code(),
      absl::StrCat("graph commands ", begin_, " to ", end_ - 1,
                   " could not be captured (enqueued one by one from now "
                   "on): ",
                   made.status().message())));
  return nullptr;
}

absl::StatusOr<std::shared_ptr<GpuGraphExec>> GpuGraphSegment::Capture(
    GpuQueueCore& core) {
  GpuDevice& device = core.device();
  const GpuDriver& driver = device.driver();
  GpuDevice::Pass pass(device, core.epoch());
  if (!pass) return device.PassRefused();
  if (absl::Status s = device.MakeCurrent(); !s.ok()) return s;
  // A stream of the queue's partition: the graph's kernels run in the
  // context they were captured in.
  auto* partition = dynamic_cast<GpuSmPartition*>(core.partition().get());
  absl::StatusOr<GpuStreamHandle> stream = partition != nullptr
                                               ? partition->CreateStream(0)
                                               : driver.StreamCreate(0);
  if (!stream.ok()) return device.Check(stream.status());
  // The writes' bytes, pinned before the capture (an allocation is a call
  // a capture forbids its own thread).
  const std::vector<GraphCommand>& commands = graph_.commands();
  GpuGraphWrites writes;
  writes.blocks.assign(end_ - begin_, nullptr);
  absl::Status recorded;
  for (size_t i = begin_; i < end_ && recorded.ok(); ++i) {
    const auto* write = std::get_if<GraphWrite>(&commands[i]);
    if (write == nullptr) continue;
    absl::StatusOr<void*> block =
        driver.HostAlloc(write->data.size(), /*mapped=*/false);
    if (!block.ok()) {
      recorded = device.Check(block.status());
    } else {
      writes.blocks[i - begin_] = *block;
      std::memcpy(*block, write->data.data(), write->data.size());
    }
  }
  absl::StatusOr<GpuGraphExecHandle> exec = absl::InternalError("not captured");
  if (recorded.ok()) {
    absl::ReaderMutexLock no_sync(&device.capture_mu());
    recorded = device.Check(driver.StreamBeginCapture(*stream));
    for (size_t i = begin_; i < end_ && recorded.ok(); ++i) {
      recorded =
          std::visit(CaptureCommand{device, *stream, writes.blocks[i - begin_]},
                     commands[i]);
      if (!recorded.ok()) {
        recorded = absl::Status(
            recorded.code(), absl::StrCat("capturing graph command ", i, ": ",
                                          recorded.message()));
      }
    }
    // Ended whatever happened: the stream must not stay capturing.
    if (!absl::IsAborted(recorded)) exec = driver.StreamEndCapture(*stream);
  }
  device.Warn(driver.StreamDestroy(*stream));  // Nothing ran on it.
  if (recorded.ok() && !exec.ok()) recorded = device.Check(exec.status());
  if (!recorded.ok()) {
    if (exec.ok()) device.Warn(driver.GraphExecDestroy(*exec));
    FreeWrites(&device, core.epoch(), std::move(writes));
    return recorded;
  }
  return std::make_shared<GpuGraphExec>(&device, core.epoch(), core.partition(),
                                        *exec, std::move(writes));
}

GpuGraphPlan::GpuGraphPlan(const Graph& graph) {
  const std::vector<GraphCommand>& commands = graph.commands();
  size_t segments = 0;
  size_t i = 0;
  while (i < commands.size()) {
    size_t run = i;
    while (run < commands.size() && run - i < GpuGraphSegment::kMaxCommands &&
           Capturable(commands[run])) {
      ++run;
    }
    if (run - i >= kMinSegment && segments < kMaxSegments) {
      steps_.push_back(
          {i, run, std::make_unique<GpuGraphSegment>(graph, i, run)});
      ++segments;
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
    absl::StatusOr<std::shared_ptr<GpuGraphExec>> exec = nullptr;
    if (step.segment != nullptr) exec = step.segment->Prepare(*core_);
    if (exec.ok() && *exec == nullptr) {  // One by one.
      enqueued = ReplayGraphCommands(*this, *graph, step.begin, step.end);
    } else {
      if (exec.ok()) {
        GpuQueueCore::Op op;
        op.issue = [exec = *exec](GpuQueueCore& q) { return exec->Launch(q); };
        // The graph, and with it what its commands use, lives until it ran.
        op.done = [graph](absl::Status) {};
        op.kernel = step.segment->has_kernel();
        enqueued = core_->Submit(std::move(op));
      } else {
        enqueued = exec.status();
      }
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
