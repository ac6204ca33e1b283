// Argument packing.
#include "server/backend/gpu/gpu_args.h"

#include <algorithm>
#include <cstring>
#include <variant>

namespace gpustream::backend {

GpuArgBlock PackArgs(
    const KernelSignature& signature, const std::vector<KernelArg>& args,
    absl::FunctionRef<uint64_t(const BufferArg&)> device_pointer) {
  uint64_t end = 0;
  for (const ParamLayout& l : signature.layout) {
    end = std::max<uint64_t>(end, uint64_t{l.offset} + l.size);
  }
  GpuArgBlock block;
  block.bytes.assign((end + 7) / 8, 0);
  auto* base = reinterpret_cast<std::byte*>(block.bytes.data());
  block.pointers.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamLayout& l = signature.layout[i];
    std::byte* at = base + l.offset;
    block.pointers.push_back(at);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, BufferArg>) {
            const uint64_t ptr = device_pointer(v);
            std::memcpy(at, &ptr, std::min<size_t>(sizeof(ptr), l.size));
          } else if constexpr (std::is_same_v<T, std::string>) {
            std::memcpy(at, v.data(), std::min<size_t>(v.size(), l.size));
          } else {
            std::memcpy(at, &v, std::min<size_t>(sizeof(v), l.size));
          }
        },
        args[i]);
  }
  return block;
}

}  // namespace gpustream::backend
