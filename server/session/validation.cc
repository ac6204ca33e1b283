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

// LaunchKernelRequest.cluster into `config`: none when unset or all zero.
absl::Status CheckCluster(const v1::LaunchKernelRequest& req,
                          const backend::DeviceInfo& device,
                          backend::LaunchConfig& config) {
  const v1::Dim3& c = req.cluster();
  if (c.x() == 0 && c.y() == 0 && c.z() == 0) return absl::OkStatus();
  if (device.max_cluster_size == 0) {
    return absl::UnimplementedError(
        absl::StrCat("cluster: device '", device.name, "' (", device.backend,
                     ") has no thread block clusters"));
  }
  if (c.x() == 0) {
    return absl::InvalidArgumentError(
        "cluster.x is 0 while cluster.y or cluster.z is set");
  }
  const backend::Dim3 cluster{c.x(), c.y() == 0 ? 1 : c.y(),
                              c.z() == 0 ? 1 : c.z()};
  const backend::Dim3& grid = config.grid;
  if (grid.x % cluster.x != 0 || grid.y % cluster.y != 0 ||
      grid.z % cluster.z != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid (", grid.x, ", ", grid.y, ", ", grid.z,
                     ") is not a multiple of cluster (", cluster.x, ", ",
                     cluster.y, ", ", cluster.z, ") in every dimension"));
  }
  if (cluster.Volume() > device.max_cluster_size) {
    return absl::OutOfRangeError(absl::StrCat(
        "cluster (", cluster.x, ", ", cluster.y, ", ", cluster.z, ") has ",
        cluster.Volume(), " blocks; device '", device.name,
        "' allows max_cluster_size ", device.max_cluster_size));
  }
  config.clustered = true;
  config.cluster = cluster;
  return absl::OkStatus();
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
  if (absl::Status s = CheckCluster(req, device, config); !s.ok()) return s;
  if (req.cooperative() && !device.supports_cooperative_launch) {
    return absl::UnimplementedError(
        absl::StrCat("cooperative: device '", device.name, "' (",
                     device.backend, ") has no cooperative launches"));
  }
  config.cooperative = req.cooperative();
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

namespace {

// The value of a count argument; false if it is negative.
bool CountValue(const v1::KernelArg& arg, uint64_t* count) {
  switch (arg.value_case()) {
    case v1::KernelArg::kI32:
      *count = static_cast<uint64_t>(arg.i32());
      return arg.i32() >= 0;
    case v1::KernelArg::kU32:
      *count = arg.u32();
      return true;
    case v1::KernelArg::kI64:
      *count = static_cast<uint64_t>(arg.i64());
      return arg.i64() >= 0;
    case v1::KernelArg::kU64:
      *count = arg.u64();
      return true;
    default:  // The module loader admits only integer counts.
      *count = 0;
      return false;
  }
}

}  // namespace

absl::Status CheckBufferExtent(const v1::LaunchKernelRequest& req,
                               const backend::KernelSignature& kernel,
                               const backend::LaunchConfig& config, int i,
                               uint64_t buffer_size) {
  if (static_cast<size_t>(i) >= kernel.extents.size() ||
      !kernel.extents[i].has_value()) {
    return absl::OkStatus();
  }
  const backend::BufferExtent& e = *kernel.extents[i];
  // extent = bytes + bytes_per_element * count + bytes_per_thread * threads,
  // every step overflow-checked: an overflow is an extent past any buffer.
  uint64_t extent = e.bytes;
  bool too_big = false;
  bool negative = false;
  uint64_t count = 0;
  if (e.count_param >= 0) {
    negative = !CountValue(req.args(e.count_param), &count);
    uint64_t bytes = 0;
    too_big = negative ||
              __builtin_mul_overflow(e.bytes_per_element, count, &bytes) ||
              __builtin_add_overflow(extent, bytes, &extent);
  }
  if (e.bytes_per_thread != 0) {
    uint64_t threads = 0, bytes = 0;
    too_big = too_big ||
              __builtin_mul_overflow(config.grid.Volume(),
                                     config.block.Volume(), &threads) ||
              __builtin_mul_overflow(e.bytes_per_thread, threads, &bytes) ||
              __builtin_add_overflow(extent, bytes, &extent);
  }
  const v1::BufferArg& arg = req.args(i).buffer();
  if (!too_big && extent <= buffer_size &&
      arg.offset() <= buffer_size - extent) {
    return absl::OkStatus();
  }
  const std::string where = absl::StrCat(
      "args[", i, "]: kernel ", req.module(), ".", req.kernel(), " param ", i,
      static_cast<size_t>(i) < kernel.param_names.size() &&
              !kernel.param_names[i].empty()
          ? absl::StrCat(" (", kernel.param_names[i], ")")
          : "");
  const std::string count_arg = absl::StrCat("args[", e.count_param, "]");
  if (negative) {
    return absl::OutOfRangeError(absl::StrCat(
        where, " is counted by ", count_arg, ", which is negative (",
        static_cast<int64_t>(count), ")"));
  }
  const std::string counted =
      e.count_param >= 0
          ? absl::StrCat(" for a count of ", count, " (", count_arg, ")")
          : "";
  return absl::OutOfRangeError(absl::StrCat(
      where, " reaches ",
      too_big ? std::string("more than 2^64 - 1 bytes")
              : absl::StrCat(extent, " bytes"),
      counted, " from offset ", arg.offset(), ", past the end of buffer_id ",
      arg.buffer_id(), " (", buffer_size, " bytes)"));
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
