// A graph as the GPU layer launches it: runs of kernel launches, copies,
// fills and writes are captured into executable graphs
// (GpuDriver::StreamBeginCapture) and each is launched by one stream
// operation; the other commands (events, flags, host functions: the daemon
// tracks each of them) are enqueued one by one, in order between them.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/graph.h"

namespace gpustream::backend {

class GpuDevice;
class GpuQueueCore;

// The pinned host copy of a segment's writes (one block, the writes' bytes
// back to back), which its copy nodes read at every launch: owned by the
// executable graph, freed with it.
struct GpuGraphWrites {
  void* block = nullptr;
};

// An executable graph, made in one context epoch on one SM partition (its
// kernels run in the partition's green context, so it holds the partition
// until it is destroyed), with the pinned bytes its writes copy from.
// Destroyed on the device's cleanup thread, unless its context is gone (a
// reset freed it all). Thread-safe: the driver's graph objects are not, so
// its launches are serialized.
class GpuGraphExec {
 public:
  GpuGraphExec(GpuDevice* device, uint64_t epoch,
               std::shared_ptr<SmPartition> partition,
               GpuGraphExecHandle handle, GpuGraphWrites writes)
      : device_(device),
        epoch_(epoch),
        partition_(std::move(partition)),
        handle_(handle),
        writes_(std::move(writes)) {}
  ~GpuGraphExec();
  GpuGraphExec(const GpuGraphExec&) = delete;
  GpuGraphExec& operator=(const GpuGraphExec&) = delete;

  uint64_t epoch() const { return epoch_; }
  const SmPartition* partition() const { return partition_.get(); }
  // Launches it on `q`'s stream, from inside an op's issue; `q` is of the
  // epoch and partition it was made for (GpuGraphSegment::Prepare).
  absl::Status Launch(GpuQueueCore& q);

 private:
  GpuDevice* const device_;
  const uint64_t epoch_;
  const std::shared_ptr<SmPartition> partition_;
  const GpuGraphExecHandle handle_;
  GpuGraphWrites writes_;
  absl::Mutex mu_;  // Held around launches.
};

// Commands [begin, end) of a graph, all launches, copies, fills or writes,
// as one executable graph. Thread-safe (launches of one graph may come from any
// queue of its session); captures of one segment are serialized.
class GpuGraphSegment {
 public:
  // A longer run is cut: a segment counts as one operation on its stream
  // (one of the stream's budget, one in-flight command of its tenant), so
  // its length bounds what one operation hides, and what a cancel cannot
  // take back once it is on the stream.
  static constexpr size_t kMaxCommands = 64;
  // Writes join a segment up to these sizes (their pinned copy is host
  // memory no quota counts); larger ones go one by one, staged.
  static constexpr size_t kMaxWriteBytes = 4096;
  static constexpr size_t kMaxWriteBytesPerSegment = 65536;

  GpuGraphSegment(const Graph& graph, size_t begin, size_t end);
  GpuGraphSegment(const GpuGraphSegment&) = delete;
  GpuGraphSegment& operator=(const GpuGraphSegment&) = delete;

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  // Whether it launches a kernel (a suspect when the device faults).
  bool has_kernel() const { return has_kernel_; }

  // The executable graph for `core`'s context epoch and SM partition:
  // captured the first time, after a recovery reset the context, or for
  // another partition. The capture runs on the calling thread, on a stream
  // of its own in that partition (no queue's lock is held, and no queue's
  // stream is touched), shared with captures of other segments and
  // exclusive with the device's synchronizing calls
  // (GpuDevice::capture_mu). It never waits: while such a call runs, or
  // after a failed capture (logged), it returns null and the caller
  // enqueues the commands one by one; a failed capture is retried after
  // twice as many launches each time (1, 2, 4, ... 1024), and at once in
  // a new epoch. An error only when the device failed (its ABORTED
  // failure) or its context was reset.
  absl::StatusOr<std::shared_ptr<GpuGraphExec>> Prepare(GpuQueueCore& core);

 private:
  absl::StatusOr<std::shared_ptr<GpuGraphExec>> Capture(GpuQueueCore& core)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Graph& graph_;  // Owns the plan that owns this segment.
  const size_t begin_;
  const size_t end_;
  const bool has_kernel_;
  absl::Mutex mu_;
  std::shared_ptr<GpuGraphExec> exec_ ABSL_GUARDED_BY(mu_);
  // After a failed capture: launches left to go one by one, the next
  // wait, and the epoch it failed in.
  uint32_t skip_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t backoff_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t failed_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// How GpuQueue::LaunchGraph enqueues a graph: its commands in steps, each
// either a segment or a run of commands to enqueue one by one. Made once
// per graph (Graph::Native); immutable after.
class GpuGraphPlan {
 public:
  // Executable graphs use device memory of their own: past this many
  // segments, the rest of a graph goes one by one.
  static constexpr size_t kMaxSegments = 64;

  struct Step {
    size_t begin;
    size_t end;
    std::unique_ptr<GpuGraphSegment> segment;  // Null: one by one.
  };

  explicit GpuGraphPlan(const Graph& graph);
  const std::vector<Step>& steps() const { return steps_; }

 private:
  std::vector<Step> steps_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_H_
