// Graphs on GPU queues: runs of launches, copies, fills and writes
// captured into executable graphs, and GpuQueue::LaunchGraph.
#include "server/backend/gpu/gpu_graph.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <variant>

#include "absl/cleanup/cleanup.h"
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
    return !write->data.empty() &&
           write->data.size() <= GpuGraphSegment::kMaxWriteBytes;
  }
  return std::holds_alternative<GraphLaunch>(command) ||
         std::holds_alternative<GraphCopy>(command) ||
         std::holds_alternative<GraphFill>(command);
}

uint64_t WriteBytes(const GraphCommand& command) {
  const auto* write = std::get_if<GraphWrite>(&command);
  return write != nullptr ? write->data.size() : 0;
}

// Frees the writes' block on the cleanup thread (a free synchronizes the
// context: not during a capture, and not on a caller's thread).
void FreeWrites(GpuDevice* device, uint64_t epoch, GpuGraphWrites writes) {
  if (writes.block == nullptr) return;
  device->Release(epoch, [device, block = writes.block] {
    absl::WriterMutexLock no_capture(&device->capture_mu());
    device->Warn(device->driver().HostFree(block));
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

// One launch of `exec` on `core`'s stream, as one op.
absl::Status SubmitLaunch(GpuQueueCore& core,
                          std::shared_ptr<GpuGraphExec> exec,
                          std::shared_ptr<const Graph> graph, bool kernel) {
  GpuQueueCore::Op op;
  op.issue = [exec](GpuQueueCore& q) { return exec->Launch(q); };
  // The graph (what its commands use) and the executable graph (its
  // partition, its writes' bytes) live until it ran.
  op.done = [graph = std::move(graph), exec](absl::Status) {};
  op.kernel = kernel;
  return core.Submit(std::move(op));
}

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
  GpuDevice& device = core.device();
  absl::MutexLock lock(&mu_);
  if (exec_ != nullptr && exec_->epoch() == core.epoch() &&
      exec_->partition() == core.partition().get()) {
    return exec_;
  }
  if (failed_epoch_ != core.epoch()) skip_ = 0;  // A new context: try now.
  if (skip_ > 0) {
    --skip_;
    return nullptr;
  }
  absl::StatusOr<std::shared_ptr<GpuGraphExec>> made = Capture(core);
  if (made.ok()) {
    if (*made == nullptr) return nullptr;  // A synchronizing call ran.
    exec_ = *std::move(made);
    backoff_ = 1;
    return exec_;
  }
  if (device.failed()) return device.failure();
  if (core.epoch() != device.epoch()) return device.PassRefused();
  // The driver's refusal, not the client's fault: the commands still run,
  // one by one, and the capture is tried again later.
  device.CountCaptureFailure();
  failed_epoch_ = core.epoch();
  skip_ = backoff_;
  backoff_ = std::min<uint32_t>(backoff_ * 2, 1024);
  device.Warn(absl::Status(
      made.status().code(),
      absl::StrCat("graph commands ", begin_, " to ", end_ - 1,
                   " could not be captured (enqueued one by one for the next ",
                   skip_ + 1, " launches): ", made.status().message())));
  return nullptr;
}

absl::StatusOr<std::shared_ptr<GpuGraphExec>> GpuGraphSegment::Capture(
    GpuQueueCore& core) {
  GpuDevice& device = core.device();
  const GpuDriver& driver = device.driver();
  // Never waits for a synchronizing call (one drains the whole context,
  // other tenants' work included): this launch goes one by one instead.
  if (!device.capture_mu().ReaderTryLock()) return nullptr;
  absl::Cleanup unlock = [&device] { device.capture_mu().ReaderUnlock(); };
  GpuDevice::Pass pass(device, core.epoch());
  if (!pass) return device.PassRefused();
  if (absl::Status s = device.MakeCurrent(); !s.ok()) return s;
  // The writes' bytes, pinned before the capture (an allocation is a call
  // a capture forbids its own thread), in one block.
  const std::vector<GraphCommand>& commands = graph_.commands();
  uint64_t write_bytes = 0;
  for (size_t i = begin_; i < end_; ++i) write_bytes += WriteBytes(commands[i]);
  GpuGraphWrites writes;
  if (write_bytes > 0) {
    absl::StatusOr<void*> block =
        driver.HostAlloc(write_bytes, /*mapped=*/false);
    if (!block.ok()) return device.Check(block.status());
    writes.block = *block;
  }
  // A stream of the queue's partition: the graph's kernels run in the
  // context they were captured in.
  auto* partition = dynamic_cast<GpuSmPartition*>(core.partition().get());
  absl::StatusOr<GpuStreamHandle> stream = partition != nullptr
                                               ? partition->CreateStream(0)
                                               : driver.StreamCreate(0);
  if (!stream.ok()) {
    FreeWrites(&device, core.epoch(), writes);
    return device.Check(stream.status());
  }
  absl::Status recorded = device.Check(driver.StreamBeginCapture(*stream));
  absl::StatusOr<GpuGraphExecHandle> exec = absl::InternalError("not captured");
  if (recorded.ok()) {
    uint64_t at = 0;  // In the writes' block.
    for (size_t i = begin_; i < end_ && recorded.ok(); ++i) {
      const uint64_t bytes = WriteBytes(commands[i]);
      char* host = nullptr;
      if (bytes > 0) {
        host = static_cast<char*>(writes.block) + at;
        std::memcpy(host, std::get<GraphWrite>(commands[i]).data.data(), bytes);
        at += bytes;
      }
      recorded = std::visit(CaptureCommand{device, *stream, host}, commands[i]);
      if (!recorded.ok()) {
        recorded = absl::Status(
            recorded.code(), absl::StrCat("capturing graph command ", i, ": ",
                                          recorded.message()));
      }
    }
    // Ended whatever happened: a capture left open would restrain this
    // (pooled) thread's later calls.
    exec = driver.StreamEndCapture(*stream);
  }
  device.Warn(driver.StreamDestroy(*stream));  // Nothing ran on it.
  if (recorded.ok() && !exec.ok()) recorded = device.Check(exec.status());
  if (!recorded.ok()) {
    if (exec.ok()) device.Warn(driver.GraphExecDestroy(*exec));
    FreeWrites(&device, core.epoch(), writes);
    return recorded;
  }
  return std::make_shared<GpuGraphExec>(&device, core.epoch(), core.partition(),
                                        *exec, writes);
}

GpuGraphPlan::GpuGraphPlan(const Graph& graph) {
  const std::vector<GraphCommand>& commands = graph.commands();
  size_t segments = 0;
  size_t i = 0;
  while (i < commands.size()) {
    size_t run = i;
    uint64_t write_bytes = 0;
    while (run < commands.size() && run - i < GpuGraphSegment::kMaxCommands &&
           Capturable(commands[run]) &&
           write_bytes + WriteBytes(commands[run]) <=
               GpuGraphSegment::kMaxWriteBytesPerSegment) {
      write_bytes += WriteBytes(commands[run]);
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
      enqueued = exec.ok() ? SubmitLaunch(*core_, *exec, graph,
                                          step.segment->has_kernel())
                           : exec.status();
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
