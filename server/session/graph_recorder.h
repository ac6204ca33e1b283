// Graph capture: the queue a BeginCapture puts in place of a session's
// queue, and the graph an EndCapture makes of what it recorded.
#ifndef GPUSTREAM_SERVER_SESSION_GRAPH_RECORDER_H_
#define GPUSTREAM_SERVER_SESSION_GRAPH_RECORDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/device.h"
#include "server/backend/graph.h"
#include "server/backend/queue.h"
#include "server/tenants/tenant.h"

namespace gpustream::session {

// The most bytes of Write data one graph may own (RESOURCE_EXHAUSTED past
// it); they count toward the tenant's quota.device_memory_bytes as well.
inline constexpr uint64_t kMaxGraphOwnedBytes = uint64_t{1} << 30;

// While a queue captures, the session hands this out wherever it would hand
// out the queue to enqueue on: every enqueue path records into the graph
// to be instead of running, with its arguments already validated by the
// session (so a replay validates nothing). The device's own launch limits
// are checked now too (Queue::CheckLaunch). What cannot be captured is
// refused with the contract's codes, and a refused command leaves the
// capture as it was. Queries of the queue's state (error, idleness)
// answer for the real queue. Thread-safe.
class GraphRecorder final : public backend::Queue {
 public:
  // `name` names the capture in errors ("the capture on queue_id 3").
  GraphRecorder(std::shared_ptr<backend::Queue> queue,
                std::shared_ptr<tenants::Tenant> tenant, std::string name)
      : queue_(std::move(queue)),
        tenant_(std::move(tenant)),
        name_(std::move(name)) {}
  // An abandoned capture gives back what its Writes reserved.
  ~GraphRecorder() override;

  const std::shared_ptr<backend::Queue>& queue() const { return queue_; }
  // Ends the capture: the commands recorded, and the tenant memory charged
  // for their bytes, which the caller now owns (see MakeGraph).
  std::vector<backend::GraphCommand> Take(uint64_t* charged_bytes);

  absl::Status Launch(const backend::Kernel& kernel,
                      const backend::LaunchConfig& config,
                      std::vector<backend::KernelArg> args) override;
  absl::Status Write(std::shared_ptr<backend::Buffer> dst, uint64_t offset,
                     std::string data) override;
  // FAILED_PRECONDITION: a read waits for the queue.
  absl::Status Read(std::shared_ptr<backend::Buffer> src, uint64_t offset,
                    uint64_t size, ReadDone done) override;
  absl::Status Copy(std::shared_ptr<backend::Buffer> src, uint64_t src_offset,
                    std::shared_ptr<backend::Buffer> dst, uint64_t dst_offset,
                    uint64_t size) override;
  absl::Status Fill(std::shared_ptr<backend::Buffer> dst, uint64_t offset,
                    uint64_t size, uint32_t value) override;
  absl::Status RecordEvent(std::shared_ptr<backend::Event> event) override;
  // INVALID_ARGUMENT unless the event was recorded within this capture.
  absl::Status WaitEvent(std::shared_ptr<backend::Event> event) override;
  // INVALID_ARGUMENT: not capturable.
  absl::Status WaitQueue(backend::Queue& other) override;
  absl::Status WaitFlag(std::shared_ptr<backend::Flag> flag, uint64_t value,
                        backend::WaitCondition condition) override;
  absl::Status WriteFlag(std::shared_ptr<backend::Flag> flag,
                         uint64_t value) override;
  absl::Status HostFunc(absl::AnyInvocable<void()> fn) override;
  // INVALID_ARGUMENT: graphs do not nest.
  absl::Status LaunchGraph(std::shared_ptr<const backend::Graph> graph,
                           std::shared_ptr<backend::Event> done) override;

  std::shared_ptr<backend::Watch> OnIdle(Done done) override {
    return queue_->OnIdle(std::move(done));
  }
  void Cancel(const absl::Status& reason) override { queue_->Cancel(reason); }
  bool IsIdle() override { return queue_->IsIdle(); }
  uint64_t inflight_commands() override { return queue_->inflight_commands(); }
  absl::Status error() override { return queue_->error(); }

 private:
  // RESOURCE_EXHAUSTED once the graph holds kMaxGraphCommands;
  // FAILED_PRECONDITION once Take() ended the capture (an enqueue that
  // raced EndCapture is refused, not lost).
  absl::Status Record(backend::GraphCommand command) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RecordLocked(backend::GraphCommand command)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<backend::Queue> queue_;
  const std::shared_ptr<tenants::Tenant> tenant_;
  const std::string name_;
  absl::Mutex mu_;
  std::vector<backend::GraphCommand> commands_ ABSL_GUARDED_BY(mu_);
  // Events recorded within the capture (their WaitEvents are capturable).
  absl::flat_hash_set<const backend::Event*> recorded_ ABSL_GUARDED_BY(mu_);
  uint64_t charged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

// A graph as a session holds it (the object an EndCapture's graph_id names).
// Launches of one graph never overlap, on one queue or several: each waits
// for the previous launch's end (an event recorded after it) when it runs
// on another queue than the previous one. Thread-safe.
class CapturedGraph {
 public:
  // Makes the graph of `commands`; `ended` is a new event of the device.
  // It takes over the tenant's charges the caller made (one graph, and
  // `charged_bytes` of memory) and gives them back when the last launch
  // using it has run.
  static std::shared_ptr<CapturedGraph> Create(
      std::vector<backend::GraphCommand> commands,
      std::shared_ptr<backend::Event> ended,
      std::shared_ptr<tenants::Tenant> tenant, uint64_t charged_bytes);

  size_t size() const { return graph_->commands().size(); }
  uint64_t owned_bytes() const { return graph_->owned_bytes(); }
  // Enqueues a launch on `queue` (the real queue, never a recorder).
  absl::Status Launch(const std::shared_ptr<backend::Queue>& queue);

 private:
  CapturedGraph(std::shared_ptr<const backend::Graph> graph,
                std::shared_ptr<backend::Event> ended)
      : graph_(std::move(graph)), ended_(std::move(ended)) {}

  const std::shared_ptr<const backend::Graph> graph_;
  // Recorded at the end of every launch.
  const std::shared_ptr<backend::Event> ended_;
  absl::Mutex mu_;  // Serializes launches.
  bool launched_ ABSL_GUARDED_BY(mu_) = false;
  std::weak_ptr<backend::Queue> last_queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_GRAPH_RECORDER_H_
