// Request checks that need no session state: the shapes, kinds and limits
// of the error table's INVALID_ARGUMENT and OUT_OF_RANGE rows.
#ifndef GPUSTREAM_SERVER_SESSION_VALIDATION_H_
#define GPUSTREAM_SERVER_SESSION_VALIDATION_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "server/backend/queue.h"
#include "server/backend/types.h"

namespace gpustream::session {

// INVALID_ARGUMENT unless `c` is a WaitCondition (UNSPECIFIED means EQUAL).
absl::Status CheckCondition(v1::WaitCondition c);
backend::WaitCondition ToCondition(v1::WaitCondition c);

// The kind a KernelArg carries; 0 when none is set.
backend::ParamKind ArgKind(const v1::KernelArg& arg);

// A launch's grid, block and shared memory against the device's and the
// kernel's own limits (max threads per block, shared memory): x must be set
// (INVALID_ARGUMENT), y and z of 0 mean 1; anything beyond a limit is
// OUT_OF_RANGE naming the field and the limit.
absl::StatusOr<backend::LaunchConfig> CheckLaunchShape(
    const v1::LaunchKernelRequest& req, const backend::DeviceInfo& device,
    const backend::KernelSignature& kernel);

// Arguments against the kernel's params, before any id is resolved: count,
// kind (INVALID_ARGUMENT naming args[i]) and the byte size of BYTES params
// whose size the module declares.
absl::Status CheckArgShapes(const v1::LaunchKernelRequest& req,
                            const backend::KernelSignature& kernel);

// BUFFER argument args[i] of a launch against its buffer (`buffer_size`
// bytes) and the kernel's declared extent for it: OUT_OF_RANGE naming the
// kernel, the param, the extent and the buffer's size when offset + extent
// passes the buffer's end (an extent too large to count, or a negative
// count, passes it). OK when the param declares no extent. The args'
// kinds were checked (CheckArgShapes).
absl::Status CheckBufferExtent(const v1::LaunchKernelRequest& req,
                               const backend::KernelSignature& kernel,
                               const backend::LaunchConfig& config, int i,
                               uint64_t buffer_size);

// FillBuffer: offset and size multiples of 4 (INVALID_ARGUMENT).
absl::Status CheckFillAlignment(const v1::FillBufferRequest& req);

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_VALIDATION_H_
