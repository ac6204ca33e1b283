// This build has no nvcc: no CUDA module is compiled into the daemon, and
// CUDA kernels come only from --modules folders.
#include "server/backend/cuda/cuda_module.h"

namespace gpustream::backend {

EmbeddedModule EmbeddedSamplesModule() { return {}; }

}  // namespace gpustream::backend
