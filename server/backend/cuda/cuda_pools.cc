// Event, staging and flag-slot pools.
#include "server/backend/cuda/cuda_pools.h"

#include <atomic>
#include <bit>

#include "server/backend/cuda/cuda_device.h"

namespace gpustream::backend {

// --- Events -----------------------------------------------------------------

absl::StatusOr<CudaEventPool::Pooled> CudaEventPool::Get(bool timing) {
  {
    absl::MutexLock lock(&mu_);
    auto& free = free_[timing];
    if (!free.empty()) {
      Pooled pooled = free.back();
      free.pop_back();
      return pooled;
    }
  }
  const uint64_t epoch = device_->epoch();
  CudaDevice::Pass pass(*device_, epoch);
  if (!pass) return device_->PassRefused();
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  CUevent event = nullptr;
  absl::Status s = device_->Check(
      device_->driver().cuEventCreate(
          &event, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
      "cuEventCreate");
  if (!s.ok()) return s;
  return Pooled{event, epoch};
}

void CudaEventPool::Put(CUevent event, bool timing, uint64_t epoch) {
  {
    // Under mu_: Recover moves the epoch on, then Forget()s under mu_.
    absl::MutexLock lock(&mu_);
    if (epoch != device_->epoch()) return;  // Died with its context.
    if (free_[timing].size() < kMaxPooled) {
      free_[timing].push_back({event, epoch});
      return;
    }
  }
  device_->Release(epoch, [device = device_, event] {
    device->Warn(device->driver().cuEventDestroy(event), "cuEventDestroy");
  });
}

void CudaEventPool::FreeAll() {
  absl::MutexLock lock(&mu_);
  for (auto& free : free_) {
    for (const Pooled& e : free) device_->driver().cuEventDestroy(e.event);
    free.clear();
  }
}

void CudaEventPool::Forget() {
  absl::MutexLock lock(&mu_);
  free_[0].clear();
  free_[1].clear();
}

// --- Staging ----------------------------------------------------------------

absl::StatusOr<Staging> CudaStagingPool::Get(uint64_t size) {
  const uint64_t capacity = std::bit_ceil(std::max<uint64_t>(size, 4096));
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      Staging staging = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= capacity;
      return staging;
    }
  }
  const uint64_t epoch = device_->epoch();
  CudaDevice::Pass pass(*device_, epoch);
  if (!pass) return device_->PassRefused();
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  Staging staging{nullptr, capacity, epoch};
  absl::Status s = device_->Check(
      device_->driver().cuMemHostAlloc(&staging.host, capacity, 0),
      "cuMemHostAlloc (staging)");
  if (!s.ok()) return s;
  return staging;
}

void CudaStagingPool::Put(Staging staging) {
  {
    // Under mu_: Recover moves the epoch on, then Forget()s under mu_.
    absl::MutexLock lock(&mu_);
    if (staging.epoch != device_->epoch()) return;
    if (cached_bytes_ + staging.capacity <= kMaxCachedBytes) {
      cached_bytes_ += staging.capacity;
      free_[staging.capacity].push_back(staging);
      return;
    }
  }
  device_->Release(staging.epoch, [device = device_, host = staging.host] {
    device->Warn(device->driver().cuMemFreeHost(host), "cuMemFreeHost");
  });
}

void CudaStagingPool::FreeAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [capacity, blocks] : free_) {
    for (Staging& b : blocks) device_->driver().cuMemFreeHost(b.host);
  }
  free_.clear();
  cached_bytes_ = 0;
}

void CudaStagingPool::Forget() {
  absl::MutexLock lock(&mu_);
  free_.clear();
  cached_bytes_ = 0;
}

// --- Flag slots -------------------------------------------------------------

absl::StatusOr<CudaSlotAllocator::Slot> CudaSlotAllocator::Get() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) {
    CudaDevice::Pass pass(*device_);
    if (!pass) return device_->PassRefused();
    if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
    const CudaDriver& driver = device_->driver();
    void* slab = nullptr;
    absl::Status s =
        device_->Check(driver.cuMemHostAlloc(&slab, kSlabBytes,
                                             CU_MEMHOSTALLOC_DEVICEMAP |
                                                 CU_MEMHOSTALLOC_PORTABLE),
                       "cuMemHostAlloc (flag slab)");
    if (!s.ok()) return s;
    CUdeviceptr base = 0;
    s = device_->Check(driver.cuMemHostGetDevicePointer(&base, slab, 0),
                       "cuMemHostGetDevicePointer");
    if (!s.ok()) {
      driver.cuMemFreeHost(slab);
      return s;
    }
    slabs_.push_back(slab);
    const uint64_t epoch = device_->epoch();
    for (uint64_t i = kSlabBytes / 8; i-- > 0;) {
      free_.push_back({static_cast<uint64_t*>(slab) + i, base + 8 * i, epoch});
    }
  }
  Slot slot = free_.back();
  free_.pop_back();
  std::atomic_ref<uint64_t>(*slot.host).store(0, std::memory_order_release);
  return slot;
}

void CudaSlotAllocator::Put(Slot slot) {
  // Checked under the lock: a slot checked before Recover moves the epoch
  // must be in free_ before Forget clears it, never pushed after.
  absl::MutexLock lock(&mu_);
  if (slot.epoch != device_->epoch()) return;
  free_.push_back(slot);
}

void CudaSlotAllocator::Forget() {
  absl::MutexLock lock(&mu_);
  free_.clear();
  slabs_.clear();
}

}  // namespace gpustream::backend

namespace gpustream::backend {

void CudaSlotAllocator::FreeAll() {
  absl::MutexLock lock(&mu_);
  for (void* slab : slabs_) device_->driver().cuMemFreeHost(slab);
  slabs_.clear();
  free_.clear();
}

}  // namespace gpustream::backend
