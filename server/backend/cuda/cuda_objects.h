// CUDA buffers, events and completion flags.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_OBJECTS_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_OBJECTS_H_

#include <cuda.h>

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/buffer.h"
#include "server/backend/cuda/cuda_pools.h"
#include "server/backend/event.h"
#include "server/backend/flag.h"
#include "server/backend/flag_waiters.h"

namespace gpustream::backend {

class CudaDevice;
class CudaQueueCore;

// Pool or cuMemAlloc memory (DEVICE, CudaDevice::AllocateDevice) or
// cuMemHostAlloc DEVICEMAP memory (HOST_PINNED, which kernels reach through
// `ptr`). Freed on the device's cleanup thread.
class CudaBuffer : public Buffer {
 public:
  CudaBuffer(CudaDevice* device, CUdeviceptr ptr, void* host, uint64_t size,
             MemoryKind kind, bool pooled, uint64_t epoch)
      : device_(device),
        ptr_(ptr),
        host_(host),
        size_(size),
        kind_(kind),
        pooled_(pooled),
        epoch_(epoch) {}
  ~CudaBuffer() override;
  uint64_t size() const override { return size_; }
  MemoryKind kind() const override { return kind_; }
  CUdeviceptr ptr() const { return ptr_; }

 private:
  CudaDevice* const device_;
  const CUdeviceptr ptr_;
  void* const host_;  // HOST_PINNED only.
  const uint64_t size_;
  const MemoryKind kind_;
  const bool pooled_;  // From the device's memory pool.
  const uint64_t epoch_;
};

// One RecordEvent (or WaitQueue marker) on a pooled CUevent. Waits hold the
// point that was latest when they were enqueued; a wait is handed to its
// stream only once the record has been (the record may be held in the
// daemon behind its own queue's work). The CUevent returns to the pool when
// the last holder lets go, which is after the record has completed.
struct CudaEventPoint {
  CudaEventPoint(CudaDevice* device, CUevent event, bool timing, uint64_t epoch)
      : device(device), event(event), timing(timing), epoch(epoch) {}
  ~CudaEventPoint();
  CudaDevice* const device;
  const CUevent event;
  const bool timing;
  const uint64_t epoch;
  std::atomic<bool> issued{false};  // cuEventRecord has been called.
  // Dropped before reaching its stream: complete, and nothing to wait for.
  std::atomic<bool> skipped{false};
};

class CudaEvent : public Event {
 public:
  CudaEvent(CudaDevice* device, bool timing)
      : device_(device), timing_(timing) {}
  bool timing_enabled() const override { return timing_; }
  bool IsComplete() override;
  void OnComplete(absl::AnyInvocable<void()> done) override;
  absl::StatusOr<float> ElapsedMillisSince(Event& start) override;

  absl::StatusOr<std::shared_ptr<CudaEventPoint>> NewRecord();
  std::shared_ptr<CudaEventPoint> Latest();

 private:
  CudaDevice* const device_;
  const bool timing_;
  absl::Mutex mu_;
  std::shared_ptr<CudaEventPoint> latest_ ABSL_GUARDED_BY(mu_);
};

// Whether a point's record has completed; errors count as complete (a
// failed context never completes anything, and nothing may wait forever).
bool PointComplete(CudaDevice& device, CudaEventPoint& point);

// An 8-byte slot of pinned, device-mapped host memory. The host stores and
// loads it with release/acquire atomics; streams wait on it with
// cuStreamWaitValue64 and store into it with cuStreamWriteValue64.
class CudaFlag : public Flag, public std::enable_shared_from_this<CudaFlag> {
 public:
  CudaFlag(CudaDevice* device, CudaSlotAllocator::Slot slot);
  ~CudaFlag() override;

  uint64_t Load() override;
  void Store(uint64_t value) override;
  WaitId AsyncWait(uint64_t value, WaitCondition condition,
                   WaitDone done) override;
  void CancelWait(WaitId id) override { waiters_.Cancel(id); }
  void Release(const absl::Status& reason) override;

  CUdeviceptr device_ptr() const { return slot_.device; }
  bool released() { return waiters_.released(); }
  // A stream stored `value` into the flag: wake the host waiters it
  // satisfies (each value a queue writes is seen, even if overwritten).
  void Changed(uint64_t value);
  // A write of `value` was handed to a stream (cuStreamWriteValue64
  // issued): it will land once work issued before it has run.
  void WriteIssued(uint64_t value);
  // Whether the value of the last write handed to a stream satisfies the
  // wait. Then a device-side wait for it parks only until work already
  // issued reaches that write: never indefinitely at the head of a hardware
  // queue that other streams share.
  bool IssuedWriteSatisfies(uint64_t value, WaitCondition condition);

  // A wait handed to a stream: after it, the stream writes `index` into the
  // queue's progress word, so the releaser knows when it has passed.
  struct NativeWait {
    // Weak: the queue's pending work holds this flag; a queue gone has
    // passed all its waits.
    std::weak_ptr<CudaQueueCore> queue;
    uint64_t index;
    uint64_t value;
  };
  void AddNativeWait(NativeWait wait);
  // Teardown's releaser, one dispatcher tick: stores the value of the first
  // wait not yet passed (in enqueue order) and moves on once its queue has
  // passed it (or after a while, to come back later). False when done.
  bool StepRelease();

 private:
  CudaDevice* const device_;
  const CudaSlotAllocator::Slot slot_;
  FlagWaiters waiters_;
  absl::Mutex mu_;  // The device-side waits, writes and their release.
  std::optional<uint64_t> last_issued_write_ ABSL_GUARDED_BY(mu_);
  std::vector<NativeWait> native_waits_ ABSL_GUARDED_BY(mu_);
  size_t releasing_ ABSL_GUARDED_BY(mu_) = 0;  // Index into native_waits_.
  absl::Time releasing_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_OBJECTS_H_
