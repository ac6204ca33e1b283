// A graph as the GPU layer launches it: every run of two or more kernel
// launches, copies and fills is captured once into an executable graph
// (GpuDriver::StreamBeginCapture) and launched by one stream operation;
// the other commands (writes, events, flags, host functions: the daemon
// tracks each of them) are enqueued one by one, in order between them.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/graph.h"

namespace gpustream::backend {

class GpuDevice;
class GpuQueueCore;

// Commands [begin, end) of a graph, all launches, copies or fills, as one
// executable graph. Captured on the first launch, on the launching queue's
// stream from inside its op's issue (so nothing else calls on that stream
// meanwhile), and again after a device recovery reset the context that
// held it. Thread-safe: launches of one graph never overlap, but they may
// come from any queue, and the driver's graph objects are not thread-safe,
// so every use of the executable graph is under mu_. Lock order: the
// queue core's, then mu_.
class GpuGraphSegment {
 public:
  GpuGraphSegment(const Graph& graph, size_t begin, size_t end)
      : graph_(graph), begin_(begin), end_(end) {}
  // Destroys the executable graph on the device's cleanup thread, unless
  // its context is gone.
  ~GpuGraphSegment();
  GpuGraphSegment(const GpuGraphSegment&) = delete;
  GpuGraphSegment& operator=(const GpuGraphSegment&) = delete;

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  // Whether it launches a kernel (a suspect when the device faults).
  bool has_kernel() const;
  // Launches it on `q`'s stream (inside an Op's issue), capturing it first
  // if needed. On error nothing of it is on the stream.
  absl::Status Issue(GpuQueueCore& q);

 private:
  // Records the commands on `q`'s stream into exec_.
  absl::Status CaptureLocked(GpuQueueCore& q)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Graph& graph_;  // Owns the plan that owns this segment.
  const size_t begin_;
  const size_t end_;
  absl::Mutex mu_;
  GpuDevice* device_ ABSL_GUARDED_BY(mu_) = nullptr;
  GpuGraphExecHandle exec_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // Of the context holding exec_.
};

// How GpuQueue::LaunchGraph enqueues a graph: its commands in steps, each
// either an executable graph or a run of commands to enqueue one by one.
// Made once per graph (Graph::Native); immutable after.
class GpuGraphPlan {
 public:
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
