// Event, staging and flag-slot pools.
#include "server/backend/gpu/gpu_pools.h"

#include <atomic>
#include <bit>

#include "server/backend/gpu/gpu_device.h"

namespace gpustream::backend {

// --- Events -----------------------------------------------------------------

absl::StatusOr<GpuEventPool::Pooled> GpuEventPool::Get(bool timing) {
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
  GpuDevice::Pass pass(*device_, epoch);
  if (!pass) return device_->PassRefused();
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  absl::StatusOr<GpuEventHandle> event = device_->driver().EventCreate(timing);
  if (!event.ok()) return device_->Check(event.status());
  return Pooled{*event, epoch};
}

void GpuEventPool::Put(GpuEventHandle event, bool timing, uint64_t epoch) {
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
    device->Warn(device->driver().EventDestroy(event));
  });
}

void GpuEventPool::FreeAll() {
  absl::MutexLock lock(&mu_);
  for (auto& free : free_) {
    for (const Pooled& e : free) {
      device_->driver().EventDestroy(e.event).IgnoreError();
    }
    free.clear();
  }
}

void GpuEventPool::Forget() {
  absl::MutexLock lock(&mu_);
  free_[0].clear();
  free_[1].clear();
}

// --- Staging ----------------------------------------------------------------

absl::StatusOr<Staging> GpuStagingPool::Get(uint64_t size) {
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
  GpuDevice::Pass pass(*device_, epoch);
  if (!pass) return device_->PassRefused();
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  absl::StatusOr<void*> host =
      device_->driver().HostAlloc(capacity, /*mapped=*/false);
  if (!host.ok()) return device_->Check(host.status());
  return Staging{*host, capacity, epoch};
}

void GpuStagingPool::Put(Staging staging) {
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
    absl::WriterMutexLock no_capture(&device->capture_mu());  // Synchronizes.
    device->Warn(device->driver().HostFree(host));
  });
}

void GpuStagingPool::FreeAll() {
  absl::MutexLock lock(&mu_);
  absl::WriterMutexLock no_capture(&device_->capture_mu());  // Synchronizes.
  for (auto& [capacity, blocks] : free_) {
    for (Staging& b : blocks) device_->driver().HostFree(b.host).IgnoreError();
  }
  free_.clear();
  cached_bytes_ = 0;
}

void GpuStagingPool::Forget() {
  absl::MutexLock lock(&mu_);
  free_.clear();
  cached_bytes_ = 0;
}

// --- Flag slots -------------------------------------------------------------

absl::StatusOr<GpuSlotAllocator::Slot> GpuSlotAllocator::Get() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) {
    GpuDevice::Pass pass(*device_);
    if (!pass) return device_->PassRefused();
    if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
    const GpuDriver& driver = device_->driver();
    absl::StatusOr<void*> mapped =
        driver.HostAlloc(kSlabBytes, /*mapped=*/true);
    if (!mapped.ok()) return device_->Check(mapped.status());
    void* slab = *mapped;
    absl::StatusOr<GpuDeviceptr> device_base = driver.HostDevicePointer(slab);
    if (!device_base.ok()) {
      absl::WriterMutexLock no_capture(&device_->capture_mu());
      driver.HostFree(slab).IgnoreError();
      return device_->Check(device_base.status());
    }
    const GpuDeviceptr base = *device_base;
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

void GpuSlotAllocator::Put(Slot slot) {
  // Checked under the lock: a slot checked before Recover moves the epoch
  // must be in free_ before Forget clears it, never pushed after.
  absl::MutexLock lock(&mu_);
  if (slot.epoch != device_->epoch()) return;
  free_.push_back(slot);
}

void GpuSlotAllocator::Forget() {
  absl::MutexLock lock(&mu_);
  free_.clear();
  slabs_.clear();
}

}  // namespace gpustream::backend

namespace gpustream::backend {

void GpuSlotAllocator::FreeAll() {
  absl::MutexLock lock(&mu_);
  absl::WriterMutexLock no_capture(&device_->capture_mu());  // Synchronizes.
  for (void* slab : slabs_) device_->driver().HostFree(slab).IgnoreError();
  slabs_.clear();
  free_.clear();
}

}  // namespace gpustream::backend
