// Stateless request checks.
#include "server/session/validation.h"

#include "absl/strings/str_cat.h"

namespace gpustream::session {
namespace {

// Grid or block dimensions: x must be set; y and z default to 1.
absl::StatusOr<backend::Dim3> ToDim3(const v1::Dim3& d, const char* field,
                                     const backend::Dim3& max) {
  if (d.x() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".x is 0"));
  }
  backend::Dim3 out{d.x(), d.y() == 0 ? 1 : d.y(), d.z() == 0 ? 1 : d.z()};
  if (out.x > max.x || out.y > max.y || out.z > max.z) {
    return absl::OutOfRangeError(absl::StrCat(
        field, " (", out.x, ", ", out.y, ", ", out.z,
        ") exceeds the device limit (", max.x, ", ", max.y, ", ", max.z, ")"));
  }
  return out;
}

}  // namespace

backend::WaitCondition ToCondition(v1::WaitCondition c) {
  return c == v1::WAIT_CONDITION_GREATER_EQUAL
             ? backend::WaitCondition::kGreaterEqual
             : backend::WaitCondition::kEqual;
}

absl::Status CheckCondition(v1::WaitCondition c) {
  if (c == v1::WAIT_CONDITION_UNSPECIFIED || c == v1::WAIT_CONDITION_EQUAL ||
      c == v1::WAIT_CONDITION_GREATER_EQUAL) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "condition ", static_cast<int>(c), " is not a WaitCondition"));
}

backend::ParamKind ArgKind(const v1::KernelArg& arg) {
  switch (arg.value_case()) {
    case v1::KernelArg::kBuffer:
      return backend::ParamKind::kBuffer;
    case v1::KernelArg::kI32:
      return backend::ParamKind::kI32;
    case v1::KernelArg::kU32:
      return backend::ParamKind::kU32;
    case v1::KernelArg::kI64:
      return backend::ParamKind::kI64;
    case v1::KernelArg::kU64:
      return backend::ParamKind::kU64;
    case v1::KernelArg::kF32:
      return backend::ParamKind::kF32;
    case v1::KernelArg::kF64:
      return backend::ParamKind::kF64;
    case v1::KernelArg::kBytes:
      return backend::ParamKind::kBytes;
    case v1::KernelArg::VALUE_NOT_SET:
      break;
  }
  return static_cast<backend::ParamKind>(0);
}

absl::StatusOr<backend::LaunchConfig> CheckLaunchShape(
    const v1::LaunchKernelRequest& req, const backend::DeviceInfo& device,
    const backend::KernelSignature& kernel) {
  backend::LaunchConfig config;
  auto grid = ToDim3(req.grid(), "grid", device.max_grid);
  if (!grid.ok()) return grid.status();
  auto block = ToDim3(req.block(), "block", device.max_block);
  if (!block.ok()) return block.status();
  config.grid = *grid;
  config.block = *block;
  if (block->Volume() > device.max_threads_per_block) {
    return absl::OutOfRangeError(absl::StrCat("block has ", block->Volume(),
                                              " threads; the device allows ",
                                              device.max_threads_per_block));
  }
  const backend::KernelLimits& limits = kernel.limits;
  if (limits.max_threads_per_block != 0 &&
      block->Volume() > limits.max_threads_per_block) {
    return absl::OutOfRangeError(
        absl::StrCat("block has ", block->Volume(), " threads; kernel ",
                     kernel.name, " allows ", limits.max_threads_per_block));
  }
  if (req.shared_memory_bytes() > device.max_shared_memory_bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "shared_memory_bytes ", req.shared_memory_bytes(),
        " exceeds the device limit of ", device.max_shared_memory_bytes));
  }
  if (req.shared_memory_bytes() > limits.max_dynamic_shared_memory_bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "shared_memory_bytes ", req.shared_memory_bytes(), " exceeds kernel ",
        kernel.name, "'s limit of ", limits.max_dynamic_shared_memory_bytes,
        " (it uses ", limits.static_shared_memory_bytes, " bytes statically)"));
  }
  config.shared_memory_bytes = req.shared_memory_bytes();
  return config;
}

absl::Status CheckArgShapes(const v1::LaunchKernelRequest& req,
                            const backend::KernelSignature& kernel) {
  if (req.args_size() != static_cast<int>(kernel.params.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel ", req.module(), ".", req.kernel(), " takes ",
                     kernel.params.size(), " args, got ", req.args_size()));
  }
  for (int i = 0; i < req.args_size(); ++i) {
    const v1::KernelArg& arg = req.args(i);
    const backend::ParamKind want = kernel.params[i];
    if (ArgKind(arg) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("args[", i, "]: kernel ", req.kernel(), " expects ",
                       backend::ParamKindName(want), ", got ",
                       arg.value_case() == v1::KernelArg::VALUE_NOT_SET
                           ? "nothing"
                           : backend::ParamKindName(ArgKind(arg))));
    }
    if (want == backend::ParamKind::kBytes && i < kernel.layout.size() &&
        kernel.layout[i].size != 0 &&
        arg.bytes().size() != kernel.layout[i].size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "args[", i, "]: kernel ", req.kernel(), " expects BYTES of ",
          kernel.layout[i].size, " bytes, got ", arg.bytes().size()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFillAlignment(const v1::FillBufferRequest& req) {
  if (req.size() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("size ", req.size(), " is not a multiple of 4"));
  }
  if (req.offset() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", req.offset(), " is not a multiple of 4"));
  }
  return absl::OkStatus();
}

}  // namespace gpustream::session
