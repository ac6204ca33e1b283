// Launch arguments checked and converted against a kernel's declared
// parameter kinds, before anything is sent (as the Python client does).
#ifndef GPUSTREAM_CLIENT_KERNEL_ARGS_H_
#define GPUSTREAM_CLIENT_KERNEL_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/kernel_arg.h"
#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::client {

// `args` converted to `params` (the declared kinds of `module`.`kernel`): see
// Arg for what converts to what. INVALID_ARGUMENT for a wrong count or kind,
// OUT_OF_RANGE for a value outside its kind, naming the kernel, the argument's
// index and the kind. Pure.
absl::StatusOr<std::vector<v1::KernelArg>> ConvertArgs(
    absl::string_view module, absl::string_view kernel,
    const std::vector<v1::ParamKind>& params, absl::Span<const Arg> args);

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_KERNEL_ARGS_H_
