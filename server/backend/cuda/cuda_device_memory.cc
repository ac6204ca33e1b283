// Memory of a CUDA device: DEVICE buffers from the device's memory pool
// (stream-ordered, so that freeing never synchronizes the context) or
// cuMemAlloc, HOST_PINNED buffers from cuMemHostAlloc, and the memory
// stream that zeroes and frees them.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/backend/cuda/cuda_device.h"

namespace gpustream::backend {

absl::StatusOr<std::shared_ptr<Buffer>> CudaDevice::Allocate(uint64_t size,
                                                             MemoryKind kind) {
  absl::ReaderMutexLock reset_lock(&reset_mu_);
  if (failed()) return failure();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // CUDA refuses zero-byte allocations; a 0-byte buffer still gets a
  // distinct address.
  // Rounded to whole words for the zeroing memset.
  const uint64_t bytes = std::max<uint64_t>((size + 3) / 4 * 4, 4);
  CUdeviceptr ptr = 0;
  void* host = nullptr;
  absl::Status s;
  bool pooled = false;
  if (kind == MemoryKind::kDevice) {
    s = AllocateDevice(bytes, &ptr, &pooled);
  } else {
    s = Check(
        driver_->cuMemHostAlloc(
            &host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
        "cuMemHostAlloc");
    if (s.ok()) {
      std::memset(host, 0, bytes);
      s = Check(driver_->cuMemHostGetDevicePointer(&ptr, host, 0),
                "cuMemHostGetDevicePointer");
      if (!s.ok()) driver_->cuMemFreeHost(host);
    }
  }
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      const MemoryInfo m = memory();
      return absl::ResourceExhaustedError(absl::StrCat(
          "size_bytes ", size, " exceeds the free memory of CUDA device ",
          ordinal_, " (", m.free_bytes, " of ", m.total_bytes, " bytes free)"));
    }
    return s;
  }
  return std::shared_ptr<Buffer>(
      new CudaBuffer(this, ptr, host, size, kind, pooled, epoch()),
      [this](Buffer* b) {
        cleanup_->Post([this, b] {
          absl::ReaderMutexLock lock(&reset_mu_);
          delete b;
        });
      });
}

absl::Status CudaDevice::MemoryStream() {
  if (memory_stream_ != nullptr && memory_epoch_ == epoch()) {
    return absl::OkStatus();
  }
  memory_epoch_ = epoch();
  absl::Status s = Check(driver_->cuStreamCreateWithPriority(
                             &memory_stream_, CU_STREAM_NON_BLOCKING, 0),
                         "cuStreamCreateWithPriority");
  if (!s.ok()) memory_stream_ = nullptr;
  return s;
}

absl::Status CudaDevice::AllocateDevice(uint64_t bytes, CUdeviceptr* ptr,
                                        bool* pooled) {
  CUstream stream = nullptr;
  absl::Status s;
  {
    absl::MutexLock lock(&memory_mu_);
    if (s = MemoryStream(); !s.ok()) return s;
    stream = memory_stream_;
    *pooled = pools_;
    s = pools_ ? Check(driver_->cuMemAllocAsync(ptr, bytes, stream),
                       "cuMemAllocAsync")
               : Check(driver_->cuMemAlloc(ptr, bytes), "cuMemAlloc");
    if (!s.ok()) return s;
    s = Check(driver_->cuMemsetD32Async(*ptr, 0, bytes / 4, stream),
              "cuMemsetD32Async");
  }
  // Synchronized (outside memory_mu_: other allocations and frees go on):
  // queues use the memory from other streams, ordered after the allocation
  // and the zeroing only by this. The stream shares a hardware queue with
  // others, so this waits for work issued there before; that work always
  // ends (no stream ever parks on a wait nobody satisfies).
  if (s.ok()) {
    s = Check(driver_->cuStreamSynchronize(stream), "cuStreamSynchronize");
  }
  if (!s.ok()) FreeDevice(*ptr, *pooled);
  return s;
}

void CudaDevice::FlushCleanup() {
  cleanup_->Drain();
  absl::ReaderMutexLock reset_lock(&reset_mu_);
  if (failed() || !MakeCurrent().ok()) return;
  absl::MutexLock lock(&memory_mu_);
  if (memory_stream_ != nullptr && memory_epoch_ == epoch()) {
    Warn(driver_->cuStreamSynchronize(memory_stream_), "cuStreamSynchronize");
  }
}

void CudaDevice::FreeDevice(CUdeviceptr ptr, bool pooled) {
  if (!pooled) {
    Warn(driver_->cuMemFree(ptr), "cuMemFree");
    return;
  }
  absl::MutexLock lock(&memory_mu_);
  if (!MemoryStream().ok()) return;  // The device failed: it reports why.
  Warn(driver_->cuMemFreeAsync(ptr, memory_stream_), "cuMemFreeAsync");
}

}  // namespace gpustream::backend
