// GPU buffers, events and completion flags.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_OBJECTS_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_OBJECTS_H_

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/buffer.h"
#include "server/backend/event.h"
#include "server/backend/flag.h"
#include "server/backend/flag_waiters.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/gpu/gpu_pools.h"

namespace gpustream::backend {

class GpuDevice;
class GpuQueueCore;

// Pool or MemAlloc memory (DEVICE, GpuDevice::AllocateDevice), mapped
// HostAlloc memory (HOST_PINNED) or a registered SharedRegion
// (HOST_SHARED); kernels reach host memory through `ptr`. Freed (or
// unregistered) on the device's cleanup thread.
class GpuBuffer : public Buffer {
 public:
  GpuBuffer(GpuDevice* device, GpuDeviceptr ptr, void* host, uint64_t size,
            MemoryKind kind, bool pooled, uint64_t epoch,
            std::shared_ptr<SharedRegion> region = nullptr)
      : device_(device),
        ptr_(ptr),
        host_(host),
        size_(size),
        kind_(kind),
        pooled_(pooled),
        epoch_(epoch),
        region_(std::move(region)) {}
  ~GpuBuffer() override;
  uint64_t size() const override { return size_; }
  MemoryKind kind() const override { return kind_; }
  std::shared_ptr<const SharedRegion> shared_region() const override {
    return region_;
  }
  GpuDeviceptr ptr() const { return ptr_; }

 private:
  GpuDevice* const device_;
  const GpuDeviceptr ptr_;
  void* const host_;  // HOST_PINNED and HOST_SHARED only.
  const uint64_t size_;
  const MemoryKind kind_;
  const bool pooled_;  // From the device's memory pool.
  const uint64_t epoch_;
  // HOST_SHARED: unmapped only after the destructor unregistered it.
  const std::shared_ptr<SharedRegion> region_;
};

// One RecordEvent (or WaitQueue marker) on a pooled native event. Waits hold
// the point that was latest when they were enqueued; a wait is handed to its
// stream only once the record has been (the record may be held in the
// daemon behind its own queue's work). The event returns to the pool when
// the last holder lets go, which is after the record has completed.
struct GpuEventPoint {
  GpuEventPoint(GpuDevice* device, GpuEventHandle event, bool timing,
                uint64_t epoch)
      : device(device), event(event), timing(timing), epoch(epoch) {}
  ~GpuEventPoint();
  GpuDevice* const device;
  const GpuEventHandle event;
  const bool timing;
  const uint64_t epoch;
  std::atomic<bool> issued{false};  // EventRecord has been called.
  // Dropped before reaching its stream: complete, and nothing to wait for.
  std::atomic<bool> skipped{false};
};

class GpuEvent : public Event {
 public:
  GpuEvent(GpuDevice* device, bool timing) : device_(device), timing_(timing) {}
  bool timing_enabled() const override { return timing_; }
  bool IsComplete() override;
  std::shared_ptr<Watch> OnComplete(absl::AnyInvocable<void()> done) override;
  absl::StatusOr<float> ElapsedMillisSince(Event& start) override;

  absl::StatusOr<std::shared_ptr<GpuEventPoint>> NewRecord();
  std::shared_ptr<GpuEventPoint> Latest();

 private:
  GpuDevice* const device_;
  const bool timing_;
  absl::Mutex mu_;
  std::shared_ptr<GpuEventPoint> latest_ ABSL_GUARDED_BY(mu_);
};

// Whether a point's record has completed; errors count as complete (a
// failed context never completes anything, and nothing may wait forever).
bool PointComplete(GpuDevice& device, GpuEventPoint& point);

// An 8-byte slot of pinned, device-mapped host memory. The host stores and
// loads it with release/acquire atomics; streams store into it with
// StreamWriteValue64 (WriteFlag).
//
// A queue's wait for a value never goes to its stream as a
// cuStreamWaitValue64: on a GPU such a wait parks at the head of a hardware
// queue that other streams share until somebody writes the value, which may
// be never. Instead (GpuQueue::WaitFlag) the daemon holds the queue's later
// work until the flag satisfies the wait, or until a write that satisfies it
// has been handed to a stream: then the queue's stream waits on the event
// recorded right after that write, which completes once work already issued
// has run, whatever is written later. Thread-safe.
class GpuFlag : public Flag, public std::enable_shared_from_this<GpuFlag> {
 public:
  // A held queue wait's view of the flag: set once a value stored after the
  // wait was enqueued (by the host, or by a stream as far as the daemon
  // knows) satisfied it, whatever the flag holds by the time the queue
  // looks.
  struct Watch {
    uint64_t value;
    WaitCondition condition;
    std::atomic<bool> seen{false};
  };

  GpuFlag(GpuDevice* device, GpuSlotAllocator::Slot slot);
  ~GpuFlag() override;

  uint64_t Load() override;
  void Store(uint64_t value) override;
  WaitId AsyncWait(uint64_t value, WaitCondition condition,
                   WaitDone done) override;
  void CancelWait(WaitId id) override { waiters_.Cancel(id); }
  void Release(const absl::Status& reason) override;

  GpuDeviceptr device_ptr() const { return slot_.device; }
  bool released() { return waiters_.released(); }

  // A write of `value` was handed to a stream, and `point` recorded right
  // after it. Until it has landed, waits it satisfies may wait on `point`.
  void WriteIssued(uint64_t value, std::shared_ptr<GpuEventPoint> point);
  // The write's operation completed or was dropped (its queue cancelled or
  // failed). Whether it ran is the event's to say, not the operation's
  // status: a cancelled queue's issued work still runs. Host waiters see
  // every value that landed (even if overwritten).
  void WriteDone(const GpuEventPoint* point);
  // A write of `value` ran without a point to track it (the event after it
  // was refused): its waits and watches hear of it now.
  void UntrackedWriteRan(uint64_t value);
  // The point after the oldest write in flight (not yet landed) that
  // satisfies the wait (it lands first, as far as anyone knows), or null.
  std::shared_ptr<GpuEventPoint> InFlightSatisfying(uint64_t value,
                                                    WaitCondition condition);
  // Watches the flag for a held queue wait from now on (writes that have
  // landed already are not "from now on"); Unwatch when the wait is done.
  std::shared_ptr<Watch> WatchFor(uint64_t value, WaitCondition condition);
  void Unwatch(const Watch* watch);

 private:
  // A value was stored: the watches it satisfies have seen it.
  void Remember(uint64_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the write before `point` has run on the device (its event
  // completed in the current context). Never blocks.
  bool Landed(const GpuEventPoint& point);
  // Retires writes that have landed from in_flight_, in issue order
  // (Remember), and tells host waiters (outside mu_): a write the device
  // has done is no longer one a wait may count on, and the watches must
  // see it before any later store.
  void Sweep();

  struct InFlight {
    uint64_t value;
    std::shared_ptr<GpuEventPoint> point;
  };

  GpuDevice* const device_;
  const GpuSlotAllocator::Slot slot_;
  FlagWaiters waiters_;
  absl::Mutex mu_;
  std::deque<InFlight> in_flight_ ABSL_GUARDED_BY(mu_);  // Oldest first.
  // What the host stored last (the slot starts at 0): a value the host
  // replaces that it stored itself says nothing about device writes.
  uint64_t host_stored_ ABSL_GUARDED_BY(mu_) = 0;
  // The held queue waits on this flag (bounded by the queues' held work).
  std::vector<std::shared_ptr<Watch>> watches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_OBJECTS_H_
