// The CPU device: the embedded default backend, and the test backend.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_

#include <memory>

#include "server/backend/cpu/cpu_buffer.h"
#include "server/backend/device.h"
#include "server/util/serial_executor.h"

namespace gpustream::backend {

struct CpuDeviceOptions {
  // Bytes of "device" memory buffers may use, DEVICE and HOST_PINNED alike.
  uint64_t memory_limit_bytes = uint64_t{1} << 30;
};

// A CPU device cannot fail as a whole: a faulting kernel fails its queue
// only (INTERNAL), so the fatal-error handler is never called.
class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options);

  const DeviceInfo& info() const override { return info_; }
  MemoryInfo memory() override;
  void SetFatalErrorHandler(FatalErrorHandler) override {}
  absl::Status Recover() override { return absl::OkStatus(); }
  void FlushCleanup() override { cleanup_.Drain(); }
  absl::StatusOr<std::shared_ptr<Queue>> CreateQueue(
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
  // Joins queue workers and frees buffers, off the threads that drop them.
  // Declared last: destroyed first, so it drains while the rest is alive.
  util::SerialExecutor cleanup_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_
