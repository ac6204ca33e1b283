// The HIP runtime behind the GPU layer's interface (GpuDriver): each
// operation one runtime call through the resolved table, its hipError_t
// mapped by ToStatus.
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_ADAPTER_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_ADAPTER_H_

#include <memory>
#include <string>
#include <vector>

#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/hip/hip_driver.h"

namespace gpustream::backend {

// Immutable: thread-safe.
class HipAdapter : public GpuDriver {
 public:
  explicit HipAdapter(std::unique_ptr<HipDriver> driver);

  const HipDriver& table() const { return *driver_; }

  const GpuTraits& traits() const override { return traits_; }
  std::string Describe() const override;
  absl::StatusOr<int> DeviceCount() const override;
  absl::StatusOr<GpuDeviceProperties> DeviceProperties(
      int ordinal) const override;
  absl::StatusOr<uint64_t> DeviceTotalMemory(int ordinal) const override;
  absl::StatusOr<GpuContextHandle> PrimaryContextRetain(
      int ordinal) const override;
  absl::Status PrimaryContextRelease(int ordinal) const override;
  absl::Status PrimaryContextReset(int ordinal) const override;
  absl::Status SetCurrent(GpuContextHandle context) const override;
  absl::Status MemGetInfo(size_t* free, size_t* total) const override;
  absl::StatusOr<GpuContextHandle> ContextCreate(int ordinal) const override;
  absl::Status ContextDestroy(GpuContextHandle context) const override;
  absl::StatusOr<GpuSmLayout> SmLayout(int ordinal) const override;
  absl::StatusOr<std::vector<GpuGreenContext>> GreenContextsCreate(
      int ordinal, uint32_t group_sms,
      const std::vector<uint32_t>& groups) const override;
  absl::Status GreenContextDestroy(GpuGreenHandle green) const override;
  absl::StatusOr<GpuStreamHandle> GreenStreamCreate(
      GpuGreenHandle green, int priority) const override;
  absl::StatusOr<GpuStreamHandle> StreamCreate(int priority) const override;
  absl::Status StreamDestroy(GpuStreamHandle stream) const override;
  absl::StatusOr<bool> StreamQuery(GpuStreamHandle stream) const override;
  absl::Status StreamSynchronize(GpuStreamHandle stream) const override;
  absl::Status StreamWaitEvent(GpuStreamHandle stream,
                               GpuEventHandle event) const override;
  absl::Status StreamWriteValue64(GpuStreamHandle stream, GpuDeviceptr address,
                                  uint64_t value) const override;
  absl::StatusOr<GpuEventHandle> EventCreate(bool timing) const override;
  absl::Status EventDestroy(GpuEventHandle event) const override;
  absl::Status EventRecord(GpuEventHandle event,
                           GpuStreamHandle stream) const override;
  absl::StatusOr<bool> EventQuery(GpuEventHandle event) const override;
  absl::StatusOr<float> EventElapsedMillis(GpuEventHandle start,
                                           GpuEventHandle end) const override;
  absl::StatusOr<GpuDeviceptr> MemAlloc(size_t bytes) const override;
  absl::Status MemFree(GpuDeviceptr ptr) const override;
  absl::StatusOr<GpuDeviceptr> MemAllocAsync(
      size_t bytes, GpuStreamHandle stream) const override;
  absl::Status MemFreeAsync(GpuDeviceptr ptr,
                            GpuStreamHandle stream) const override;
  absl::StatusOr<void*> HostAlloc(size_t bytes, bool mapped) const override;
  absl::Status HostFree(void* host) const override;
  absl::StatusOr<GpuDeviceptr> HostDevicePointer(void* host) const override;
  absl::Status HostRegister(void* host, size_t bytes) const override;
  absl::Status HostUnregister(void* host) const override;
  absl::Status MemcpyHtoDAsync(GpuDeviceptr dst, const void* src, size_t bytes,
                               GpuStreamHandle stream) const override;
  absl::Status MemcpyDtoHAsync(void* dst, GpuDeviceptr src, size_t bytes,
                               GpuStreamHandle stream) const override;
  absl::Status MemcpyDtoDAsync(GpuDeviceptr dst, GpuDeviceptr src, size_t bytes,
                               GpuStreamHandle stream) const override;
  absl::Status MemsetD32Async(GpuDeviceptr dst, uint32_t value, size_t count,
                              GpuStreamHandle stream) const override;
  absl::StatusOr<GpuModuleHandle> ModuleLoad(
      const std::string& image, absl::string_view target) const override;
  absl::Status ModuleUnload(GpuModuleHandle module) const override;
  absl::StatusOr<GpuFunctionHandle> ModuleFunction(
      GpuModuleHandle module, const std::string& name) const override;
  absl::StatusOr<std::vector<GpuParamInfo>> KernelParams(
      GpuFunctionHandle function, const std::string& image,
      const std::string& name, absl::string_view target) const override;
  GpuFunctionLimits FunctionLimits(GpuFunctionHandle function) const override;
  absl::Status SetMaxDynamicShared(GpuFunctionHandle function,
                                   uint32_t bytes) const override;
  absl::Status AllowNonPortableClusters(
      GpuFunctionHandle function) const override;
  absl::StatusOr<uint32_t> MaxClusterSize(
      GpuFunctionHandle function, const LaunchConfig& config) const override;
  absl::StatusOr<uint32_t> ResidentBlocksPerSm(
      GpuFunctionHandle function, uint32_t block_threads,
      uint32_t shared_bytes) const override;
  absl::Status LaunchKernel(GpuFunctionHandle function,
                            const LaunchConfig& config, GpuStreamHandle stream,
                            void** params) const override;
  absl::Status StreamBeginCapture(GpuStreamHandle stream) const override;
  absl::StatusOr<GpuGraphExecHandle> StreamEndCapture(
      GpuStreamHandle stream) const override;
  absl::Status GraphLaunch(GpuGraphExecHandle exec,
                           GpuStreamHandle stream) const override;
  absl::Status GraphExecDestroy(GpuGraphExecHandle exec) const override;

 private:
  const std::unique_ptr<HipDriver> driver_;
  const GpuTraits traits_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_ADAPTER_H_
