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

class CpuKernel : public Kernel {
 public:
  CpuKernel(KernelSignature signature, GsKernelFn fn)
      : signature_(std::move(signature)), fn_(fn) {}
  const KernelSignature& signature() const override { return signature_; }

  // Runs the whole grid on the calling thread. `args` match the signature.
  // The kernel polls `stop_requested` (GsLaunch::stop_requested; modules of
  // ABI 1 never look at it). INTERNAL ("kernel fault") with the kernel's
  // message if it fails.
  absl::Status Run(const LaunchConfig& config, std::vector<KernelArg>& args,
                   const volatile int* stop_requested) const;

 private:
  KernelSignature signature_;
  GsKernelFn fn_;
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
