// One GPU device, driven through its primary context or (a tenant's,
// CreateContext) a context of its own, for any vendor behind a GpuDriver.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_DEVICE_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_DEVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_admission.h"
#include "server/backend/gpu/gpu_dispatcher.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/backend/gpu/gpu_objects.h"
#include "server/backend/gpu/gpu_pools.h"
#include "server/util/serial_executor.h"

namespace gpustream::backend {

class GpuQueueCore;
class GpuModule;

// Threads: callers (gRPC threads) enqueue straight into native streams
// while a queue is within its budget and its tenant within its admitted
// share (GpuAdmission); the dispatcher thread completes work (it polls the
// queues' progress words), hands held work to streams (giving waiting
// queues their admission turns), polls events and stream errors; the
// cleanup thread destroys native objects. Every thread makes the primary
// context current before its first driver call (MakeCurrent).
//
// The context's handles reach the driver only while it is alive: the
// cleanup thread's releases, allocations and elapsed-time queries hold the
// reset lock shared; every other driver call (issuing, polling, creating,
// stats) runs inside a Pass, which never blocks and which Recover waits
// out.
//
// Failure: a fatal driver error (a kernel fault poisons the context) marks
// the device failed: every queue fails with ABORTED, held and pending work
// completes with that error, and the fatal-error handler runs once. Recover
// resets the primary context and reloads the modules. Objects remember the
// context epoch they were made in; one from an earlier epoch skips its
// driver calls when destroyed (its context is gone).
class GpuDevice : public Device {
 public:
  // Every device of an opened (initialized) driver, each with `samples`.
  // UNAVAILABLE when the driver has none ("no CUDA device").
  static absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateAll(
      std::shared_ptr<const GpuDriver> driver, const EmbeddedModule& samples);

  // Retains the primary context of `ordinal` (or, with `own_context`,
  // creates a context of its own there) and reads its properties.
  // `samples`: the vendor's built-in samples module (an empty image: none).
  static absl::StatusOr<std::unique_ptr<GpuDevice>> Create(
      std::shared_ptr<const GpuDriver> driver, int ordinal,
      EmbeddedModule samples, bool own_context = false);
  ~GpuDevice() override;

  const DeviceInfo& info() const override { return info_; }
  MemoryInfo memory() override;
  void SetFatalErrorHandler(FatalErrorHandler handler) override;
  absl::Status Recover() override;
  // Also waits for the pooled frees handed to the memory stream, so that
  // memory() counts them free.
  void FlushCleanup() override;
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
  // A GpuDevice of the same device with a context of its own.
  absl::StatusOr<std::unique_ptr<Device>> CreateContext() override;
  // Green contexts from one split (GpuSmPartition); they belong to this
  // context's epoch: after a Recover, partition again.
  absl::StatusOr<std::vector<std::shared_ptr<SmPartition>>> PartitionSms(
      const std::vector<uint32_t>& weights) override;

  // --- For the backend's own objects ---------------------------------------
  // A hold on the context of `epoch` for driver calls outside the reset
  // lock. Granted only while the device is healthy and `epoch` is current;
  // while any pass is held, Recover does not reset the context. Never
  // blocks: a refused pass means the context failed or is gone, and the
  // caller reports PassRefused() (or skips a poll) instead of handing the
  // driver a handle that may name another object by now. Hold one only
  // around driver calls, never across callbacks into other layers (Recover
  // may run in one). Nests. Thread-safe.
  //
  // A *memory* pass (kMemory) is for touching the context's pinned host
  // memory (flag slots, progress words), which lives until the reset: it is
  // granted while the device is failed too, until Recover starts.
  class Pass {
   public:
    enum Kind { kDriver, kMemory };
    Pass(GpuDevice& device, uint64_t epoch, Kind kind = kDriver);
    explicit Pass(GpuDevice& device) : Pass(device, device.epoch()) {}
    ~Pass();
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    explicit operator bool() const { return granted_; }

   private:
    GpuDevice& device_;
    bool granted_;
  };
  // Why a pass was refused: the device's failure, or its reset.
  absl::Status PassRefused();
  const GpuDriver& driver() const { return *driver_; }
  const GpuTraits& traits() const { return driver_->traits(); }
  // GpuDeviceProperties::target_id: what modules' code is matched against.
  const std::string& target_id() const { return target_id_; }
  // Makes the primary context current on the calling thread (cached per
  // thread and context epoch).
  absl::Status MakeCurrent();
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  bool failed() const override {
    return failed_.load(std::memory_order_acquire);
  }
  // The ABORTED status the device last failed with (OK if it never did).
  // Kept after a recovery, so that a caller that saw failed() race with
  // Recover() still gets the reason, never OK.
  absl::Status failure();
  // A driver call's status: OK passes through; a fatal error (ABORTED: the
  // context is lost) fails the device, and the caller gets the device's
  // failure. Returns the status.
  absl::Status Check(absl::Status status) {
    if (status.ok()) [[likely]] {
      return status;
    }
    return CheckFailed(std::move(status));
  }
  // Check() for calls nobody can act on (releases, polls): also logs.
  void Warn(absl::Status status);

  util::SerialExecutor& cleanup() { return *cleanup_; }
  GpuDispatcher& dispatcher() { return *dispatcher_; }
  GpuEventPool& events() { return events_; }
  GpuStagingPool& staging() { return staging_; }
  GpuSlotAllocator& slots() { return slots_; }
  // Fair shares of the device's operations in flight; the dispatcher's
  // tick pumps it.
  GpuAdmission& admission() { return admission_; }
  // A module is reloaded by every Recover from now on (GpuModule::Load
  // calls it with its pass still held, so no reset falls in between), until
  // it is destroyed (ForgetModule).
  void RememberModule(GpuModule* module);
  void ForgetModule(GpuModule* module);
  // Keeps a retired queue's state until its stream is idle.
  void HoldUntilIdle(std::shared_ptr<GpuQueueCore> core);
  // The queue is idle and destroyed: let go of it (off the caller's stack:
  // this may drop the last reference).
  void LetGo(GpuQueueCore* core);
  // Frees DEVICE memory from AllocateDevice: a pooled block stream-ordered
  // on the memory stream (the buffer's work has completed: nothing else
  // orders it), a MemAlloc one with MemFree. On the cleanup thread,
  // with the context of the buffer's epoch current.
  void FreeDevice(GpuDeviceptr ptr, bool pooled);
  // Held shared by whatever checks an object's epoch and then calls the
  // driver with that epoch's handles off the issuing path (the cleanup
  // thread's releases, allocation, elapsed times); Recover holds it
  // exclusively while it moves the epoch on and resets the context. A
  // handle of a reset context must never reach the driver (undefined: it
  // may name a new object).
  absl::Mutex& reset_mu() { return reset_mu_; }
  // Runs `fn` on the cleanup thread with the context current, unless the
  // object's context (`epoch`) is gone.
  void Release(uint64_t epoch, absl::AnyInvocable<void()> fn);
  // Stream captures against calls that synchronize the context: a
  // capturing stream cannot be synchronized, so such a call (a free:
  // MemFree, HostFree) made while any stream of the context captures fails
  // and breaks the capture, whatever the capture's mode or thread. Captures
  // (GpuGraphSegment) hold it shared, the synchronizing frees exclusively.
  absl::Mutex& capture_mu() { return capture_mu_; }
  // Graph captures the driver refused (GpuGraphSegment::Prepare), for
  // tests and logs: each is a run of commands enqueued one by one.
  void CountCaptureFailure() {
    capture_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t capture_failures() const {
    return capture_failures_.load(std::memory_order_relaxed);
  }

  // Queues with work in flight or held, polled by the dispatcher; on a
  // failed device, failed (on the dispatcher) instead.
  void Track(std::shared_ptr<GpuQueueCore> core);
  // Host-side waits for an event record, polled by the dispatcher.
  // Null when `done` ran at once (the device failed).
  std::shared_ptr<Watch> WatchEvent(std::shared_ptr<GpuEventPoint> point,
                                    absl::AnyInvocable<void()> done);

 private:
  GpuDevice(std::shared_ptr<const GpuDriver> driver, int ordinal,
            EmbeddedModule samples, bool own_context)
      : driver_(std::move(driver)),
        ordinal_(ordinal),
        own_context_(own_context),
        instance_(NextInstance()),
        samples_(std::move(samples)),
        admission_(GpuAdmission::kDefaultBudget,
                   [this] {
                     // Null only before Create finishes, when no queue
                     // exists yet.
                     if (dispatcher_ != nullptr) dispatcher_->Wake();
                   }),
        events_(this),
        staging_(this),
        slots_(this) {}
  static uint64_t NextInstance();
  // The device's context: the primary one retained, or (own_context_) a new
  // one; and its release (the last retain's, or destroying it).
  absl::StatusOr<GpuContextHandle> AcquireContext();
  void ReleaseContext();
  absl::Status ReadInfo();
  // Check()'s slow path.
  absl::Status CheckFailed(absl::Status status);
  void Fail(absl::Status status);
  // Fails `queues` with the device's failure, noting the sessions of those
  // that had a kernel running (failed_sessions_).
  void FailQueues(std::vector<std::shared_ptr<GpuQueueCore>>& queues,
                  const absl::Status& status);
  // One dispatcher tick: completions, stream errors, held work, event
  // waiters. Returns how long until the next tick is due
  // (absl::InfiniteDuration(): nothing to poll).
  absl::Duration Tick();

  const std::shared_ptr<const GpuDriver> driver_;
  const int ordinal_;
  const bool own_context_;   // CreateContext's: not the primary context.
  const uint64_t instance_;  // Unique in the process (MakeCurrent's cache).
  const EmbeddedModule samples_;
  // Replaced by Recover() while other threads (stats, queues) make it
  // current.
  std::atomic<GpuContextHandle> context_{nullptr};
  std::atomic<uint64_t> epoch_{1};
  std::atomic<bool> failed_{false};
  // Passes held now (Pass), and whether Recover has started to wait them
  // out (no memory pass is granted then).
  std::atomic<int> passes_{0};
  std::atomic<bool> resetting_{false};
  DeviceInfo info_;
  std::string target_id_;

  // DEVICE memory, zeroed (tenants never see each other's data). From the
  // device's memory pool, stream-ordered on memory_stream_, where the
  // device has pools (*pooled set): then freeing it never synchronizes the
  // context, as a plain free does (CUDA's cuMemFree waits for every stream,
  // other tenants' included). MemAlloc otherwise.
  absl::Status AllocateDevice(uint64_t bytes, GpuDeviceptr* ptr, bool* pooled);
  // HOST_SHARED memory: a SharedRegion (zero-filled by the kernel),
  // registered with the driver so that copies are DMA from its pages and
  // kernels reach it at *ptr.
  absl::Status AllocateShared(uint64_t bytes, GpuDeviceptr* ptr,
                              std::shared_ptr<SharedRegion>* region);
  // The memory stream of this epoch, created on first use.
  absl::Status MemoryStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(memory_mu_);
  absl::Mutex memory_mu_;
  GpuStreamHandle memory_stream_ ABSL_GUARDED_BY(memory_mu_) = nullptr;
  uint64_t memory_epoch_ ABSL_GUARDED_BY(memory_mu_) = 0;
  bool pools_ = false;  // GpuDeviceProperties::memory_pools

  absl::Mutex reset_mu_;
  absl::Mutex capture_mu_;
  std::atomic<uint64_t> capture_failures_{0};
  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // DeviceFailure::sessions_with_kernels of the current failure, gathered
  // on the dispatcher (by Fail's posted work, and by a tick that held
  // queues out of tracked_ when the failure came) before the handler runs.
  std::vector<uint64_t> failed_sessions_ ABSL_GUARDED_BY(mu_);
  // Held while the handler runs, so that replacing it (the owner going
  // away) waits for a call in progress and stops later ones.
  absl::Mutex handler_mu_;
  FatalErrorHandler on_fatal_ ABSL_GUARDED_BY(handler_mu_);
  std::vector<std::weak_ptr<GpuQueueCore>> tracked_ ABSL_GUARDED_BY(mu_);
  std::vector<GpuModule*> modules_ ABSL_GUARDED_BY(mu_);  // For Recover.
  absl::flat_hash_map<GpuQueueCore*, std::shared_ptr<GpuQueueCore>> retired_
      ABSL_GUARDED_BY(mu_);
  struct EventWatch {
    std::shared_ptr<GpuEventPoint> point;
    std::shared_ptr<WatchFor<>> watch;
  };
  std::vector<EventWatch> event_watches_ ABSL_GUARDED_BY(mu_);

  // Before the queues' state goes (their members leave it) and after the
  // dispatcher, which pumps it.
  GpuAdmission admission_;
  GpuEventPool events_;
  GpuStagingPool staging_;
  GpuSlotAllocator slots_;
  // Last: destroyed first, while everything they use is alive.
  std::unique_ptr<util::SerialExecutor> cleanup_;
  std::unique_ptr<GpuDispatcher> dispatcher_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_DEVICE_H_
