// The CPU device: the embedded default backend, and the test backend.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_

#include <memory>

#include "server/backend/cpu/cpu_buffer.h"
#include "server/backend/device.h"

namespace gpustream::backend {

struct CpuDeviceOptions {
  // Bytes of "device" memory buffers may use, DEVICE and HOST_PINNED alike.
  uint64_t memory_limit_bytes = uint64_t{1} << 30;
};

class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options);

  const DeviceInfo& info() const override { return info_; }
  MemoryInfo memory() override;
  absl::StatusOr<std::unique_ptr<Queue>> CreateQueue(
      QueueOptions options) override;
  absl::StatusOr<std::shared_ptr<Event>> CreateEvent(
      bool enable_timing) override;
  absl::StatusOr<std::shared_ptr<Flag>> CreateFlag() override;
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(uint64_t size,
                                                   MemoryKind kind) override;
  std::vector<std::unique_ptr<Module>> BuiltinModules() override;
  bool IsModuleFile(const std::string& path) const override;
  absl::StatusOr<std::unique_ptr<Module>> LoadModule(
      const std::string& path) override;

 private:
  DeviceInfo info_;
  std::shared_ptr<CpuMemoryPool> pool_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_
