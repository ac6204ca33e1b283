// HipAdapter's graphs: stream capture into an executable graph, and its
// launch (the GpuDriver contract in server/backend/gpu/gpu_driver.h), as
// CUDA's (cuda_graphs.cc).
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/backend/hip/hip_adapter.h"
#include "server/backend/hip/hip_api.h"
#include "server/backend/hip/hip_status.h"

namespace gpustream::backend {
namespace {

hipapi::Stream* Hip(GpuStreamHandle s) {
  return reinterpret_cast<hipapi::Stream*>(s);
}
hipapi::GraphExec* Hip(GpuGraphExecHandle e) {
  return reinterpret_cast<hipapi::GraphExec*>(e);
}

}  // namespace

// THREAD_LOCAL, as on CUDA: the cleanup thread's frees must not invalidate
// a capture, nor fail because of one.
absl::Status HipAdapter::StreamBeginCapture(GpuStreamHandle stream) const {
  return ToStatus(driver_->hipStreamBeginCapture(
                      Hip(stream), hipapi::kCaptureModeThreadLocal),
                  "hipStreamBeginCapture", driver_.get());
}

absl::StatusOr<GpuGraphExecHandle> HipAdapter::StreamEndCapture(
    GpuStreamHandle stream) const {
  hipapi::Graph* graph = nullptr;
  if (absl::Status s =
          ToStatus(driver_->hipStreamEndCapture(Hip(stream), &graph),
                   "hipStreamEndCapture", driver_.get());
      !s.ok()) {
    return s;
  }
  hipapi::GraphExec* exec = nullptr;
  absl::Status instantiated =
      ToStatus(driver_->hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0),
               "hipGraphInstantiate", driver_.get());
  // The executable graph is independent of the graph it was made from.
  absl::Status destroyed = ToStatus(driver_->hipGraphDestroy(graph),
                                    "hipGraphDestroy", driver_.get());
  if (!instantiated.ok()) return instantiated;
  if (!destroyed.ok()) {
    driver_->hipGraphExecDestroy(exec);
    return destroyed;
  }
  return reinterpret_cast<GpuGraphExecHandle>(exec);
}

absl::Status HipAdapter::GraphLaunch(GpuGraphExecHandle exec,
                                     GpuStreamHandle stream) const {
  return ToStatus(driver_->hipGraphLaunch(Hip(exec), Hip(stream)),
                  "hipGraphLaunch", driver_.get());
}

absl::Status HipAdapter::GraphExecDestroy(GpuGraphExecHandle exec) const {
  return ToStatus(driver_->hipGraphExecDestroy(Hip(exec)),
                  "hipGraphExecDestroy", driver_.get());
}

}  // namespace gpustream::backend
