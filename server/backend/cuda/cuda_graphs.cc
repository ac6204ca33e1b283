// CudaAdapter's graphs: stream capture into an executable graph, and its
// launch (the GpuDriver contract in server/backend/gpu/gpu_driver.h).
#include <cuda.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/backend/cuda/cuda_adapter.h"
#include "server/backend/cuda/cuda_status.h"

namespace gpustream::backend {
namespace {

CUstream Cu(GpuStreamHandle s) { return reinterpret_cast<CUstream>(s); }
CUgraphExec Cu(GpuGraphExecHandle e) {
  return reinterpret_cast<CUgraphExec>(e);
}

}  // namespace

// THREAD_LOCAL: a GLOBAL capture would forbid every thread's potentially
// unsafe calls while it lasts, and the daemon frees memory (which
// synchronizes the context) on its cleanup thread at any time.
absl::Status CudaAdapter::StreamBeginCapture(GpuStreamHandle stream) const {
  return ToStatus(driver_->cuStreamBeginCapture(
                      Cu(stream), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                  "cuStreamBeginCapture", driver_.get());
}

absl::StatusOr<GpuGraphExecHandle> CudaAdapter::StreamEndCapture(
    GpuStreamHandle stream) const {
  CUgraph graph = nullptr;
  if (absl::Status s = ToStatus(driver_->cuStreamEndCapture(Cu(stream), &graph),
                                "cuStreamEndCapture", driver_.get());
      !s.ok()) {
    return s;
  }
  CUgraphExec exec = nullptr;
  absl::Status instantiated =
      ToStatus(driver_->cuGraphInstantiateWithFlags(&exec, graph, 0),
               "cuGraphInstantiateWithFlags", driver_.get());
  // The executable graph is independent of the graph it was made from.
  absl::Status destroyed =
      ToStatus(driver_->cuGraphDestroy(graph), "cuGraphDestroy", driver_.get());
  if (!instantiated.ok()) return instantiated;
  if (!destroyed.ok()) {
    driver_->cuGraphExecDestroy(exec);
    return destroyed;
  }
  return reinterpret_cast<GpuGraphExecHandle>(exec);
}

absl::Status CudaAdapter::GraphLaunch(GpuGraphExecHandle exec,
                                      GpuStreamHandle stream) const {
  return ToStatus(driver_->cuGraphLaunch(Cu(exec), Cu(stream)), "cuGraphLaunch",
                  driver_.get());
}

absl::Status CudaAdapter::GraphExecDestroy(GpuGraphExecHandle exec) const {
  return ToStatus(driver_->cuGraphExecDestroy(Cu(exec)), "cuGraphExecDestroy",
                  driver_.get());
}

}  // namespace gpustream::backend
