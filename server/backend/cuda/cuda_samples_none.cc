// This build has no nvcc: no CUDA module is compiled into the daemon, and
// CUDA kernels come only from --modules folders.
#include "server/backend/cuda/cuda_backend.h"

namespace gpustream::backend {

EmbeddedModule CudaEmbeddedSamples() { return {}; }

}  // namespace gpustream::backend
