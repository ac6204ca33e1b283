// CPU kernel modules: tables of the C ABI in
// kernels/cpu/gpustream_cpu_module.h.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_MODULE_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_MODULE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/gpustream_cpu_module.h"
#include "server/backend/module.h"
#include "server/backend/queue.h"

namespace gpustream::backend {

// The CPU device mirrors a CUDA device's launch limits, so a launch that
// runs on one backend runs on the other.
inline constexpr uint32_t kCpuMaxThreadsPerBlock = 1024;
inline constexpr uint32_t kCpuMaxSharedMemoryBytes = 48 * 1024;
// Clusters as on a Hopper GPU (its portable size).
inline constexpr uint32_t kCpuMaxClusterSize = 8;
// A cooperative launch runs each block on a thread of its own: the most
// blocks the CPU device holds "resident" at once.
inline constexpr uint64_t kCpuMaxCooperativeBlocks = 256;

class CpuKernel : public Kernel {
 public:
  CpuKernel(KernelSignature signature, GsKernelFn fn, uint32_t abi_version)
      : signature_(std::move(signature)), fn_(fn), abi_version_(abi_version) {}
  const KernelSignature& signature() const override { return signature_; }

  // Runs the whole grid, on the calling thread; a cooperative launch of an
  // ABI 4 kernel runs each block on a thread of its own at once (the caller
  // checked kCpuMaxCooperativeBlocks) and returns when all have. `args`
  // match the signature. The kernel polls `stop_requested`
  // (GsLaunch::stop_requested; modules of ABI 1 never look at it).
  // INTERNAL ("kernel fault") with the kernel's message if it fails (the
  // first failing block's, in block order).
  absl::Status Run(const LaunchConfig& config,
                   const std::vector<KernelArg>& args,
                   const volatile int* stop_requested) const;

 private:
  // OK for result 0, else INTERNAL with the kernel's message.
  absl::Status Finish(int result, char* error) const;

  KernelSignature signature_;
  GsKernelFn fn_;
  uint32_t abi_version_;
};

class CpuModule : public Module {
 public:
  // Validates the table; `origin` names where it came from in errors.
  static absl::StatusOr<std::unique_ptr<CpuModule>> Create(
      const GsModuleDef* def, const std::string& origin);

  const ModuleInfo& info() const override { return info_; }
  absl::StatusOr<const Kernel*> FindKernel(
      absl::string_view name) const override;

 private:
  CpuModule() = default;

  ModuleInfo info_;
  absl::flat_hash_map<std::string, std::unique_ptr<CpuKernel>> kernels_;
};

// dlopens a CPU module file and reads its table. The library stays loaded
// for the daemon's lifetime, as kernels point into it.
absl::StatusOr<std::unique_ptr<CpuModule>> LoadCpuModule(
    const std::string& path);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_MODULE_H_
