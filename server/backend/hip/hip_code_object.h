// AMD code objects: finding the one for a device in a clang offload bundle,
// and reading its kernels' argument layout from the AMDGPU metadata note
// (msgpack, NT_AMDGPU_METADATA). A module's manifest is checked against
// this, which says more than CUDA's parameter sizes: whether each argument
// is a global buffer or a value.
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_CODE_OBJECT_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_CODE_OBJECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpustream::backend {

// One explicit kernel argument (hidden_* arguments the compiler adds are
// left out: the runtime fills them).
struct AmdKernelArg {
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string value_kind;  // "global_buffer", "by_value", ...
};

struct AmdKernel {
  std::string name;
  std::vector<AmdKernelArg> args;
  uint32_t max_flat_workgroup_size = 0;
  uint32_t group_segment_fixed_size = 0;  // Static LDS bytes.
};

// The code object in `image` for a device of target ID `target`
// ("gfx90a:sramecc+:xnack-", gcnArchName): `image` itself when it is an
// AMDGPU ELF for its processor, else the bundle entry ROCm would choose
// (the same processor, every feature it states stated alike by the device;
// the most specific such). Every bundle entry and the chosen ELF's tables,
// sections and segments are checked to lie within `image` (the runtime is
// given no size). INVALID_ARGUMENT when `image` is neither or is
// malformed; NOT_FOUND naming the targets the bundle has when none fits.
// The view points into `image`.
absl::StatusOr<absl::string_view> AmdCodeObjectFor(absl::string_view image,
                                                   absl::string_view target);

// Every kernel the code object's metadata describes. INVALID_ARGUMENT for a
// malformed ELF, note or metadata (never reads outside `code_object`).
absl::StatusOr<std::vector<AmdKernel>> ReadAmdKernels(
    absl::string_view code_object);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_CODE_OBJECT_H_
