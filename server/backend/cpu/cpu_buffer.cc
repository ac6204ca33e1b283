// CPU buffers and their memory accounting.
#include "server/backend/cpu/cpu_buffer.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::backend {

bool CpuMemoryPool::TryReserve(uint64_t size) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (size > limit_ - used) return false;
  } while (!used_.compare_exchange_weak(used, used + size,
                                        std::memory_order_relaxed));
  return true;
}

void CpuMemoryPool::Release(uint64_t size) {
  used_.fetch_sub(size, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<CpuBuffer>> CpuBuffer::Create(
    std::shared_ptr<CpuMemoryPool> pool, uint64_t size, MemoryKind kind) {
  if (!pool->TryReserve(size)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "size_bytes ", size, " exceeds the device's free memory (",
        pool->limit() - pool->used(), " of ", pool->limit(), " bytes free)"));
  }
  if (kind == MemoryKind::kHostShared) {
    absl::StatusOr<std::shared_ptr<SharedRegion>> region =
        SharedRegion::Create(size);
    if (!region.ok()) {
      pool->Release(size);
      return region.status();
    }
    std::byte* data = (*region)->data();
    return std::unique_ptr<CpuBuffer>(
        new CpuBuffer(std::move(pool), data, size, kind, *std::move(region)));
  }
  // calloc of 0 bytes may return nullptr; a 1-byte block keeps data() valid.
  void* data = std::calloc(size == 0 ? 1 : size, 1);
  if (data == nullptr) {
    pool->Release(size);
    return absl::ResourceExhaustedError(
        absl::StrCat("host allocation of ", size, " bytes failed"));
  }
  return std::unique_ptr<CpuBuffer>(new CpuBuffer(
      std::move(pool), static_cast<std::byte*>(data), size, kind, nullptr));
}

CpuBuffer::~CpuBuffer() {
  if (region_ == nullptr) std::free(data_);
  pool_->Release(size_);
}

}  // namespace gpustream::backend
