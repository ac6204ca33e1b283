// CUDA modules: a fatbin, cubin or PTX image plus its text manifest.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_MODULE_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_MODULE_H_

#include <cuda.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/gpustream/v1/module_manifest.pb.h"
#include "server/backend/cuda/cuda_driver.h"
#include "server/backend/module.h"

namespace gpustream::backend {

class CudaDevice;

class CudaKernel : public Kernel {
 public:
  explicit CudaKernel(KernelSignature signature)
      : signature_(std::move(signature)) {}
  const KernelSignature& signature() const override { return signature_; }
  // Replaced when the module is reloaded after a context reset.
  CUfunction function() const {
    return function_.load(std::memory_order_acquire);
  }
  // Before a launch with `bytes` of dynamic shared memory (at most
  // signature().limits.max_dynamic_shared_memory_bytes, which validation
  // checks): a kernel gets 48 KiB unless it opts in to more
  // (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES), once per function,
  // to its whole limit. The context must be current. Thread-safe.
  absl::Status AllowDynamicShared(const CudaDriver& driver,
                                  uint32_t bytes) const;

 private:
  friend class CudaModule;
  KernelSignature signature_;
  std::atomic<CUfunction> function_{nullptr};
  // Dynamic shared memory `function_` may use now; reset with it.
  mutable std::atomic<uint32_t> allowed_dynamic_{0};
};

// Only the kernels the manifest declares are served, each checked against
// the binary: its parameter count and sizes (cuFuncGetParamInfo) must match
// the manifest, and its own limits (max threads per block, static shared
// memory) come from cuFuncGetAttribute. Lives as long as the device.
class CudaModule : public Module {
 public:
  // `origin` names the image in errors (its path). INVALID_ARGUMENT for a
  // manifest that disagrees with the binary or an image the driver refuses;
  // NOT_FOUND for a declared kernel the image lacks.
  static absl::StatusOr<std::unique_ptr<CudaModule>> Load(
      CudaDevice* device, std::string image, const v1::ModuleManifest& manifest,
      const std::string& origin);
  ~CudaModule() override;

  const ModuleInfo& info() const override { return info_; }
  absl::StatusOr<const Kernel*> FindKernel(
      absl::string_view name) const override;

  // Loads the image into the current (fresh) context and refreshes every
  // kernel's function: after a context reset.
  absl::Status Reload();

 private:
  CudaModule(CudaDevice* device, std::string image, std::string origin)
      : device_(device), image_(std::move(image)), origin_(std::move(origin)) {}

  CudaDevice* const device_;
  const std::string image_;
  const std::string origin_;
  CUmodule module_ = nullptr;
  uint64_t epoch_ = 0;
  ModuleInfo info_;
  absl::flat_hash_map<std::string, std::unique_ptr<CudaKernel>> kernels_;
};

// The samples module compiled into the daemon (kernels/cuda), when this
// build has it: its fatbin and manifest text. Empty image otherwise.
struct EmbeddedModule {
  std::string image;
  std::string manifest;
};
EmbeddedModule EmbeddedSamplesModule();

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_MODULE_H_
