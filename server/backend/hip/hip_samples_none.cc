// This build had no AMDGPU clang: no HIP module is compiled into the daemon,
// and HIP kernels come only from --modules folders.
#include "server/backend/hip/hip_backend.h"

namespace gpustream::backend {

EmbeddedModule HipEmbeddedSamples() { return {}; }

}  // namespace gpustream::backend
