// Memory of a GPU device: DEVICE buffers from the device's memory pool
// (stream-ordered, so that freeing never synchronizes the context) or
// MemAlloc, HOST_PINNED buffers from mapped HostAlloc, HOST_SHARED ones
// from a registered SharedRegion, and the memory stream that zeroes and
// frees them.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_device.h"

namespace gpustream::backend {

absl::StatusOr<std::shared_ptr<Buffer>> GpuDevice::Allocate(uint64_t size,
                                                            MemoryKind kind) {
  absl::ReaderMutexLock reset_lock(&reset_mu_);
  if (failed()) return failure();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // Drivers refuse zero-byte allocations; a 0-byte buffer still gets a
  // distinct address.
  // Rounded to whole words for the zeroing memset.
  const uint64_t bytes = std::max<uint64_t>((size + 3) / 4 * 4, 4);
  GpuDeviceptr ptr = 0;
  void* host = nullptr;
  absl::Status s;
  bool pooled = false;
  std::shared_ptr<SharedRegion> region;
  if (kind == MemoryKind::kDevice) {
    s = AllocateDevice(bytes, &ptr, &pooled);
  } else if (kind == MemoryKind::kHostShared) {
    s = AllocateShared(size, &ptr, &region);
    if (s.ok()) host = region->data();
  } else {
    absl::StatusOr<void*> mapped = driver_->HostAlloc(bytes, /*mapped=*/true);
    s = Check(mapped.status());
    if (s.ok()) {
      host = *mapped;
      std::memset(host, 0, bytes);
      absl::StatusOr<GpuDeviceptr> device_ptr =
          driver_->HostDevicePointer(host);
      s = Check(device_ptr.status());
      if (s.ok()) {
        ptr = *device_ptr;
      } else {
        absl::WriterMutexLock no_capture(&capture_mu_);  // It synchronizes.
        driver_->HostFree(host).IgnoreError();
      }
    }
  }
  if (!s.ok()) {
    // (A shared region's own refusal already says what ran out.)
    if (s.code() == absl::StatusCode::kResourceExhausted &&
        kind != MemoryKind::kHostShared) {
      const MemoryInfo m = memory();
      return absl::ResourceExhaustedError(
          absl::StrCat("size_bytes ", size, " exceeds the free memory of ",
                       traits().display_name, " device ", ordinal_, " (",
                       m.free_bytes, " of ", m.total_bytes, " bytes free)"));
    }
    return s;
  }
  return std::shared_ptr<Buffer>(
      new GpuBuffer(this, ptr, host, size, kind, pooled, epoch(),
                    std::move(region)),
      [this](Buffer* b) {
        cleanup_->Post([this, b] {
          absl::ReaderMutexLock lock(&reset_mu_);
          delete b;
        });
      });
}

absl::Status GpuDevice::MemoryStream() {
  if (memory_stream_ != nullptr && memory_epoch_ == epoch()) {
    return absl::OkStatus();
  }
  memory_epoch_ = epoch();
  absl::StatusOr<GpuStreamHandle> stream = driver_->StreamCreate(0);
  memory_stream_ = stream.ok() ? *stream : nullptr;
  return Check(stream.status());
}

absl::Status GpuDevice::AllocateDevice(uint64_t bytes, GpuDeviceptr* ptr,
                                       bool* pooled) {
  GpuStreamHandle stream = nullptr;
  absl::Status s;
  {
    absl::MutexLock lock(&memory_mu_);
    if (s = MemoryStream(); !s.ok()) return s;
    stream = memory_stream_;
    *pooled = pools_;
    absl::StatusOr<GpuDeviceptr> allocated =
        pools_ ? driver_->MemAllocAsync(bytes, stream)
               : driver_->MemAlloc(bytes);
    if (s = Check(allocated.status()); !s.ok()) return s;
    *ptr = *allocated;
    s = Check(driver_->MemsetD32Async(*ptr, 0, bytes / 4, stream));
  }
  // Synchronized (outside memory_mu_: other allocations and frees go on):
  // queues use the memory from other streams, ordered after the allocation
  // and the zeroing only by this. The stream shares a hardware queue with
  // others, so this waits for work issued there before; that work always
  // ends (no stream ever parks on a wait nobody satisfies).
  if (s.ok()) {
    s = Check(driver_->StreamSynchronize(stream));
  }
  if (!s.ok()) FreeDevice(*ptr, *pooled);
  return s;
}

absl::Status GpuDevice::AllocateShared(uint64_t bytes, GpuDeviceptr* ptr,
                                       std::shared_ptr<SharedRegion>* region) {
  absl::StatusOr<std::shared_ptr<SharedRegion>> created =
      SharedRegion::Create(bytes);
  if (!created.ok()) return created.status();
  // Whole pages: the driver pins pages, and the client maps whole ones.
  void* host = (*created)->data();
  absl::Status s =
      Check(driver_->HostRegister(host, (*created)->mapped_bytes()));
  if (!s.ok()) return s;
  absl::StatusOr<GpuDeviceptr> device_ptr = driver_->HostDevicePointer(host);
  if (s = Check(device_ptr.status()); !s.ok()) {
    absl::WriterMutexLock no_capture(&capture_mu_);  // It synchronizes.
    driver_->HostUnregister(host).IgnoreError();
    return s;
  }
  *ptr = *device_ptr;
  *region = *std::move(created);
  return absl::OkStatus();
}

void GpuDevice::FlushCleanup() {
  cleanup_->Drain();
  absl::ReaderMutexLock reset_lock(&reset_mu_);
  if (failed() || !MakeCurrent().ok()) return;
  absl::MutexLock lock(&memory_mu_);
  if (memory_stream_ != nullptr && memory_epoch_ == epoch()) {
    Warn(driver_->StreamSynchronize(memory_stream_));
  }
}

void GpuDevice::FreeDevice(GpuDeviceptr ptr, bool pooled) {
  if (!pooled) {
    absl::WriterMutexLock no_capture(&capture_mu_);  // It synchronizes.
    Warn(driver_->MemFree(ptr));
    return;
  }
  absl::MutexLock lock(&memory_mu_);
  if (!MemoryStream().ok()) return;  // The device failed: it reports why.
  Warn(driver_->MemFreeAsync(ptr, memory_stream_));
}

}  // namespace gpustream::backend
