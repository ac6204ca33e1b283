// Packing launch arguments into the parameter array a kernel launch reads
// (cuLaunchKernel's and hipModuleLaunchKernel's kernelParams).
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_ARGS_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_ARGS_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "server/backend/queue.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// Every argument at the offset the driver reported for it, in a buffer
// aligned for any parameter type; `pointers[i]` points at argument i, as
// kernelParams wants. Move-only in effect: the pointers
// point into `bytes` (std::vector keeps its storage when moved).
struct GpuArgBlock {
  std::vector<uint64_t> bytes;  // uint64_t: 8-byte alignment.
  std::vector<void*> pointers;
};

// `args` were checked against `signature` (count, kinds, BYTES sizes);
// `device_pointer` gives a buffer argument's device address. Scalars are
// copied with their own size, BYTES with the declared size.
GpuArgBlock PackArgs(
    const KernelSignature& signature, const std::vector<KernelArg>& args,
    absl::FunctionRef<uint64_t(const BufferArg&)> device_pointer);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_ARGS_H_
