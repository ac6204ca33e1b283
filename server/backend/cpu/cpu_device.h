// The CPU device: the embedded default backend, and the test backend.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/cpu/cpu_buffer.h"
#include "server/backend/device.h"
#include "server/util/serial_executor.h"

namespace gpustream::backend {

class CpuQueueCore;
class CpuScheduler;

struct CpuDeviceOptions {
  // Bytes of "device" memory buffers may use, DEVICE and HOST_PINNED alike.
  uint64_t memory_limit_bytes = uint64_t{1} << 30;
  // Execution threads, shared by every queue (CpuScheduler); 0:
  // std::thread::hardware_concurrency().
  uint32_t threads = 0;
  // The longest one launch may run: past it the kernel is asked to stop and
  // its queue fails with DEADLINE_EXCEEDED. <= 0 or infinite: no limit.
  absl::Duration kernel_time_limit = absl::Seconds(60);
  // The greatest queue priority offered (DeviceInfo::priority_greatest),
  // <= 0: queues may ask for [priority_greatest, 0], numerically lower
  // running first within a session, as CUDA's stream priorities. 0: one
  // level.
  int32_t priority_greatest = 0;
};

// A CPU device cannot fail as a whole: a faulting kernel fails its queue
// only (INTERNAL), so the fatal-error handler is never called.
class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options);
  // Cancels the queues still holding work (UNAVAILABLE; running kernels
  // are asked to stop), runs the cleanup, stops the execution threads once
  // their turns have returned, then runs what cleanup is left. Call it
  // from no backend thread.
  ~CpuDevice() override;

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
  // Runs every queue's work; outlives the queues' cores, which leave it as
  // they go (on the cleanup thread, say).
  std::unique_ptr<CpuScheduler> scheduler_;
  // Drops the expired entries of queues_ (and its spare capacity).
  void PruneQueuesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queues_mu_);
  // A queue was deleted (on the cleanup thread): prunes now and then, so a
  // crowd that leaves does not leave its entries behind.
  void QueueDestroyed() ABSL_LOCKS_EXCLUDED(queues_mu_);

  // Every queue's core, for shutdown; expired ones are pruned as it grows
  // and as queues go.
  absl::Mutex queues_mu_;
  std::vector<std::weak_ptr<CpuQueueCore>> queues_ ABSL_GUARDED_BY(queues_mu_);
  size_t prune_at_ ABSL_GUARDED_BY(queues_mu_) = 64;
  size_t destroyed_since_prune_ ABSL_GUARDED_BY(queues_mu_) = 0;
  // Frees buffers and queues off the threads that drop them, and delivers
  // the callbacks of work that Cancel drops. Declared last: destroyed first.
  util::SerialExecutor cleanup_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_DEVICE_H_
