// CUDA's stream capture and graph entry points over the emulation's
// (tests/fake_gpu/fake_graph.cc): only what the daemon uses, with CUDA's
// codes for misuse (capture rules in fake_gpu.h).
#include <cuda.h>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_cuda_skin.h"
#include "tests/fake_gpu/fake_gpu.h"

namespace fakecuda {
namespace {

namespace gpu = fakegpu;

static_assert(CU_STREAM_CAPTURE_MODE_GLOBAL == gpu::kCaptureModeGlobal);
static_assert(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ==
              gpu::kCaptureModeThreadLocal);
static_assert(CU_STREAM_CAPTURE_MODE_RELAXED == gpu::kCaptureModeRelaxed);

gpu::StreamHandle Gpu(CUstream s) { return HandleCast<gpu::StreamHandle>(s); }
gpu::GraphHandle Gpu(CUgraph g) { return HandleCast<gpu::GraphHandle>(g); }
gpu::GraphExecHandle Gpu(CUgraphExec e) {
  return HandleCast<gpu::GraphExecHandle>(e);
}

}  // namespace

CUresult Fake_cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  return ToCu(gpu::StreamBeginCapture(Gpu(stream), static_cast<int>(mode)));
}

CUresult Fake_cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  return ToCu(
      gpu::StreamEndCapture(Gpu(stream), HandleCast<gpu::GraphHandle*>(graph)));
}

CUresult Fake_cuStreamIsCapturing(CUstream stream,
                                  CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool capturing = false;
  const CUresult r = ToCu(gpu::StreamIsCapturing(Gpu(stream), &capturing));
  if (r == CUDA_SUCCESS) {
    *status = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                        : CU_STREAM_CAPTURE_STATUS_NONE;
  }
  return r;
}

// No instantiation flags are modelled (auto-free, upload, device launch,
// priorities): refused rather than ignored.
CUresult Fake_cuGraphInstantiate(CUgraphExec* exec, CUgraph graph,
                                 unsigned long long flags) {  // NOLINT
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(gpu::GraphInstantiate(HandleCast<gpu::GraphExecHandle*>(exec),
                                    Gpu(graph)));
}

CUresult Fake_cuGraphDestroy(CUgraph graph) {
  return ToCu(gpu::GraphDestroy(Gpu(graph)));
}

CUresult Fake_cuGraphExecDestroy(CUgraphExec exec) {
  return ToCu(gpu::GraphExecDestroy(Gpu(exec)));
}

CUresult Fake_cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return ToCu(gpu::GraphLaunch(Gpu(exec), Gpu(stream)));
}

}  // namespace fakecuda
