// Graph capture and captured graphs as a session holds them.
#include "server/session/graph_recorder.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpustream::session {

using backend::GraphCommand;

GraphRecorder::~GraphRecorder() {
  absl::MutexLock lock(&mu_);
  if (charged_bytes_ != 0) tenant_->ReleaseMemory(charged_bytes_);
}

std::vector<GraphCommand> GraphRecorder::Take(uint64_t* charged_bytes) {
  absl::MutexLock lock(&mu_);
  *charged_bytes = std::exchange(charged_bytes_, 0);
  ended_ = true;
  return std::exchange(commands_, {});
}

absl::Status GraphRecorder::Record(GraphCommand command) {
  absl::MutexLock lock(&mu_);
  return RecordLocked(std::move(command));
}

absl::Status GraphRecorder::RecordLocked(GraphCommand command) {
  if (ended_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_,
                     " ended (EndCapture) while this command was on "
                     "its way; it was neither recorded nor run"));
  }
  if (commands_.size() >= backend::kMaxGraphCommands) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, " holds the most commands a graph may have (",
                     backend::kMaxGraphCommands,
                     "); EndCapture and go on in "
                     "another graph"));
  }
  commands_.push_back(std::move(command));
  return absl::OkStatus();
}

absl::Status GraphRecorder::Launch(const backend::Kernel& kernel,
                                   const backend::LaunchConfig& config,
                                   std::vector<backend::KernelArg> args) {
  if (absl::Status s = queue_->CheckLaunch(kernel, config); !s.ok()) return s;
  return Record(backend::GraphLaunch{&kernel, config, std::move(args)});
}

absl::Status GraphRecorder::Write(std::shared_ptr<backend::Buffer> dst,
                                  uint64_t offset, std::string data) {
  const uint64_t size = data.size();
  // One lock for the limit, the charge and the record: concurrent writes
  // cannot pass the limit together.
  absl::MutexLock lock(&mu_);
  if (charged_bytes_ + size > kMaxGraphOwnedBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, " would own ", charged_bytes_ + size,
        " bytes of written data; a graph owns at most ", kMaxGraphOwnedBytes,
        " (write into a buffer before the capture, then capture a copy)"));
  }
  if (absl::Status s = tenant_->ReserveMemory(size); !s.ok()) return s;
  absl::Status recorded = RecordLocked(
      backend::GraphWrite{std::move(dst), offset, std::move(data)});
  if (recorded.ok()) {
    charged_bytes_ += size;
  } else {
    tenant_->ReleaseMemory(size);
  }
  return recorded;
}

absl::Status GraphRecorder::Read(std::shared_ptr<backend::Buffer>, uint64_t,
                                 uint64_t, ReadDone) {
  return absl::FailedPreconditionError(
      absl::StrCat("ReadBuffer would wait for a queue that is recording ",
                   name_, ": EndCapture first"));
}

absl::Status GraphRecorder::Copy(std::shared_ptr<backend::Buffer> src,
                                 uint64_t src_offset,
                                 std::shared_ptr<backend::Buffer> dst,
                                 uint64_t dst_offset, uint64_t size) {
  return Record(backend::GraphCopy{std::move(src), src_offset, std::move(dst),
                                   dst_offset, size});
}

absl::Status GraphRecorder::Fill(std::shared_ptr<backend::Buffer> dst,
                                 uint64_t offset, uint64_t size,
                                 uint32_t value) {
  return Record(backend::GraphFill{std::move(dst), offset, size, value});
}

absl::Status GraphRecorder::RecordEvent(std::shared_ptr<backend::Event> event) {
  absl::MutexLock lock(&mu_);
  const backend::Event* raw = event.get();
  if (absl::Status s =
          RecordLocked(backend::GraphRecordEvent{std::move(event)});
      !s.ok()) {
    return s;
  }
  recorded_.insert(raw);
  return absl::OkStatus();
}

absl::Status GraphRecorder::WaitEvent(std::shared_ptr<backend::Event> event) {
  absl::MutexLock lock(&mu_);
  if (!ended_ && !recorded_.contains(event.get())) {
    return absl::InvalidArgumentError(
        absl::StrCat("event_id names an event not recorded within ", name_,
                     ": a capture may only wait on events it recorded itself"));
  }
  return RecordLocked(backend::GraphWaitEvent{std::move(event)});
}

absl::Status GraphRecorder::WaitQueue(backend::Queue&) {
  return absl::InvalidArgumentError(absl::StrCat(
      "WaitQueue cannot be captured (", name_,
      "); record an event on the other queue before BeginCapture and wait "
      "for it after the graph's launch instead"));
}

absl::Status GraphRecorder::WaitFlag(std::shared_ptr<backend::Flag> flag,
                                     uint64_t value,
                                     backend::WaitCondition condition) {
  return Record(backend::GraphWaitFlag{std::move(flag), value, condition});
}

absl::Status GraphRecorder::WriteFlag(std::shared_ptr<backend::Flag> flag,
                                      uint64_t value) {
  return Record(backend::GraphWriteFlag{std::move(flag), value});
}

absl::Status GraphRecorder::HostFunc(absl::AnyInvocable<void()> fn) {
  return Record(backend::GraphHostFunc{
      std::make_shared<absl::AnyInvocable<void()>>(std::move(fn))});
}

absl::Status GraphRecorder::LaunchGraph(std::shared_ptr<const backend::Graph>,
                                        std::shared_ptr<backend::Event>) {
  return absl::InvalidArgumentError(
      absl::StrCat("LaunchGraph cannot be captured (", name_,
                   "): graphs do not nest; launch it before or after"));
}

// --- CapturedGraph -----------------------------------------------------------

std::shared_ptr<CapturedGraph> CapturedGraph::Create(
    std::vector<GraphCommand> commands, std::shared_ptr<backend::Event> ended,
    std::shared_ptr<tenants::Tenant> tenant, uint64_t charged_bytes) {
  // The backend graph with the tenant's charges: both go with the last
  // reference, which the queued work of a launch may hold past DestroyGraph.
  class Holder {
   public:
    Holder(std::vector<GraphCommand> commands,
           std::shared_ptr<tenants::Tenant> tenant, uint64_t bytes)
        : graph_(std::move(commands)),
          tenant_(std::move(tenant)),
          bytes_(bytes) {}
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
    ~Holder() {
      tenant_->ReleaseMemory(bytes_);
      tenant_->ReleaseGraph();
    }
    const backend::Graph& graph() const { return graph_; }

   private:
    const backend::Graph graph_;
    const std::shared_ptr<tenants::Tenant> tenant_;
    const uint64_t bytes_;
  };
  auto holder = std::make_shared<Holder>(std::move(commands), std::move(tenant),
                                         charged_bytes);
  const backend::Graph* raw = &holder->graph();
  return std::shared_ptr<CapturedGraph>(new CapturedGraph(
      std::shared_ptr<const backend::Graph>(std::move(holder), raw),
      std::move(ended)));
}

absl::Status CapturedGraph::Launch(
    const std::shared_ptr<backend::Queue>& queue) {
  absl::MutexLock lock(&mu_);
  // The previous launch may still run on another queue (or on one since
  // destroyed and draining): this one starts after it.
  if (launched_ && last_queue_.lock() != queue) {
    if (absl::Status s = queue->WaitEvent(ended_); !s.ok()) return s;
  }
  // Even a launch refused part-way may have enqueued commands, and records
  // its end (Queue::LaunchGraph): the next launch waits for it.
  absl::Status launched = queue->LaunchGraph(graph_, ended_);
  launched_ = true;
  last_queue_ = queue;
  return launched;
}

}  // namespace gpustream::session
