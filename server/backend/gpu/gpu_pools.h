// Pooled native resources of one GPU device: internal events, and pinned
// host memory for staging copies and for completion-flag slots.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_POOLS_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_POOLS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/gpu/gpu_driver.h"

namespace gpustream::backend {

class GpuDevice;

// Native events reused across records (RecordEvent, WaitQueue): creating one
// per call would cost a driver call each. Thread-safe.
class GpuEventPool {
 public:
  explicit GpuEventPool(GpuDevice* device) : device_(device) {}
  // An event and the context epoch it belongs to: label what records it
  // with that epoch, not the device's epoch read later (a reset may fall
  // in between).
  struct Pooled {
    GpuEventHandle event = nullptr;
    uint64_t epoch = 0;
  };
  absl::StatusOr<Pooled> Get(bool timing);
  // Back to the pool once no enqueued record or wait uses it.
  void Put(GpuEventHandle event, bool timing, uint64_t epoch);
  // After a context reset: the pooled handles died with the context.
  void Forget();
  // Device shutdown: destroys what is pooled (context current).
  void FreeAll();

 private:
  static constexpr size_t kMaxPooled = 1024;
  GpuDevice* const device_;
  absl::Mutex mu_;
  std::vector<Pooled> free_[2] ABSL_GUARDED_BY(mu_);  // [timing]
};

// A block of pinned host memory for one staged copy.
struct Staging {
  void* host = nullptr;
  uint64_t capacity = 0;
  uint64_t epoch = 0;
};

// Pinned staging blocks in power-of-two size classes (4 KiB and up), so a
// WriteBuffer can return before its copy runs, and a ReadBuffer has a
// destination the copy engine can write asynchronously. Keeps at most
// kMaxCachedBytes of free blocks. Thread-safe.
class GpuStagingPool {
 public:
  explicit GpuStagingPool(GpuDevice* device) : device_(device) {}
  absl::StatusOr<Staging> Get(uint64_t size);
  void Put(Staging staging);
  void Forget();
  void FreeAll();

 private:
  static constexpr uint64_t kMaxCachedBytes = uint64_t{64} << 20;
  GpuDevice* const device_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::vector<Staging>> free_
      ABSL_GUARDED_BY(mu_);
  uint64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// 8-byte slots carved from slabs of pinned, device-mapped host memory
// (mapped HostAlloc): a completion flag costs 8 bytes, not a page.
// Slabs live until the device resets or goes. Thread-safe.
class GpuSlotAllocator {
 public:
  struct Slot {
    uint64_t* host = nullptr;
    GpuDeviceptr device = 0;
    uint64_t epoch = 0;
  };
  explicit GpuSlotAllocator(GpuDevice* device) : device_(device) {}
  absl::StatusOr<Slot> Get();
  void Put(Slot slot);
  void Forget();
  // Device shutdown, once no flag or queue is left.
  void FreeAll();

 private:
  static constexpr uint64_t kSlabBytes = 64 * 1024;
  GpuDevice* const device_;
  absl::Mutex mu_;
  std::vector<Slot> free_ ABSL_GUARDED_BY(mu_);
  std::vector<void*> slabs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_POOLS_H_
