// GPU modules: a vendor image (CUDA fatbin, cubin or PTX; AMD code object
// or offload bundle) plus its text manifest.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_MODULE_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_MODULE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/gpustream/v1/module_manifest.pb.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/module.h"

namespace gpustream::backend {

class GpuDevice;

class GpuKernel : public Kernel {
 public:
  explicit GpuKernel(KernelSignature signature)
      : signature_(std::move(signature)) {}
  const KernelSignature& signature() const override { return signature_; }
  // Replaced when the module is reloaded after a context reset.
  GpuFunctionHandle function() const {
    return function_.load(std::memory_order_acquire);
  }
  // Before a launch with `bytes` of dynamic shared memory (at most
  // signature().limits.max_dynamic_shared_memory_bytes, which validation
  // checks): a kernel gets 48 KiB unless it opts in to more
  // (GpuDriver::SetMaxDynamicShared), once per function,
  // to its whole limit. The context must be current. Thread-safe.
  absl::Status AllowDynamicShared(const GpuDriver& driver,
                                  uint32_t bytes) const;
  // Before enqueueing a cooperative or clustered launch on `sms` SMs (the
  // queue's partition, or the whole device): OUT_OF_RANGE naming the limit
  // for a cooperative grid larger than the kernel can hold resident
  // (blocks per SM from the driver's occupancy × `sms`), or a cluster
  // larger than the kernel allows with this block and shared memory. Makes
  // the device's context current; ABORTED-like statuses when the device
  // failed. Thread-safe.
  absl::Status CheckLaunchFits(GpuDevice& device, uint32_t sms,
                               const LaunchConfig& config) const;

 private:
  friend class GpuModule;
  KernelSignature signature_;
  std::atomic<GpuFunctionHandle> function_{nullptr};
  // Dynamic shared memory `function_` may use now; reset with it.
  mutable std::atomic<uint32_t> allowed_dynamic_{0};
};

// Only the kernels the manifest declares are served, each checked against
// the binary: its parameter count and sizes (GpuDriver::KernelParams) must
// match the manifest, and its own limits (max threads per block, static
// shared memory) come from the driver. Lives as long as the device.
class GpuModule : public Module {
 public:
  // `origin` names the image in errors (its path). INVALID_ARGUMENT for a
  // manifest that disagrees with the binary or an image the driver refuses;
  // NOT_FOUND for a declared kernel the image lacks.
  static absl::StatusOr<std::unique_ptr<GpuModule>> Load(
      GpuDevice* device, std::string image, const v1::ModuleManifest& manifest,
      const std::string& origin);
  ~GpuModule() override;

  const ModuleInfo& info() const override { return info_; }
  absl::StatusOr<const Kernel*> FindKernel(
      absl::string_view name) const override;

  // Loads the image into the current (fresh) context and refreshes every
  // kernel's function: after a context reset.
  absl::Status Reload();

 private:
  GpuModule(GpuDevice* device, std::string image, std::string origin)
      : device_(device), image_(std::move(image)), origin_(std::move(origin)) {}

  GpuDevice* const device_;
  const std::string image_;
  const std::string origin_;
  GpuModuleHandle module_ = nullptr;
  uint64_t epoch_ = 0;
  ModuleInfo info_;
  absl::flat_hash_map<std::string, std::unique_ptr<GpuKernel>> kernels_;
};

// A vendor's samples module compiled into the daemon (kernels/<vendor>,
// embedded by embed_module.py), when the build has it: its image, manifest
// text and file name. An empty image otherwise.
struct EmbeddedModule {
  std::string image;
  std::string manifest;
  std::string file_name;  // "samples.fatbin": names it in errors.
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_MODULE_H_
