// Host memory standing in for device memory on the CPU backend.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_BUFFER_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_BUFFER_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "server/backend/buffer.h"

namespace gpustream::backend {

// Accounts the bytes allocated on one CPU device against its limit.
// Thread-safe (lock-free).
class CpuMemoryPool {
 public:
  explicit CpuMemoryPool(uint64_t limit_bytes) : limit_(limit_bytes) {}
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  // Reserves `size` bytes; false when the limit would be passed.
  bool TryReserve(uint64_t size);
  void Release(uint64_t size);

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// Zero-filled memory (tenants never see each other's old data): calloc'd,
// or a SharedRegion for kHostShared. The buffer returns its bytes to the
// pool when the last reference goes away.
class CpuBuffer : public Buffer {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBuffer>> Create(
      std::shared_ptr<CpuMemoryPool> pool, uint64_t size, MemoryKind kind);
  ~CpuBuffer() override;
  CpuBuffer(const CpuBuffer&) = delete;
  CpuBuffer& operator=(const CpuBuffer&) = delete;

  uint64_t size() const override { return size_; }
  MemoryKind kind() const override { return kind_; }
  std::shared_ptr<const SharedRegion> shared_region() const override {
    return region_;
  }
  std::byte* data() { return data_; }

 private:
  CpuBuffer(std::shared_ptr<CpuMemoryPool> pool, std::byte* data, uint64_t size,
            MemoryKind kind, std::shared_ptr<SharedRegion> region)
      : pool_(std::move(pool)),
        region_(std::move(region)),
        data_(data),
        size_(size),
        kind_(kind) {}

  std::shared_ptr<CpuMemoryPool> pool_;
  const std::shared_ptr<SharedRegion> region_;  // kHostShared only.
  std::byte* data_;  // Owned (from calloc) unless region_ holds it.
  const uint64_t size_;
  const MemoryKind kind_;
};

// The memory operations of a CPU queue, on buffers of the CPU device (the
// session layer only pairs objects of one device, so the downcasts are
// exact). Ranges were validated by the caller.
inline std::byte* CpuData(const std::shared_ptr<Buffer>& buffer,
                          uint64_t offset) {
  return static_cast<CpuBuffer&>(*buffer).data() + offset;
}
inline void CpuCopy(const std::shared_ptr<Buffer>& src, uint64_t src_offset,
                    const std::shared_ptr<Buffer>& dst, uint64_t dst_offset,
                    uint64_t size) {
  // memmove: source and destination may overlap in one buffer.
  std::memmove(CpuData(dst, dst_offset), CpuData(src, src_offset), size);
}
// Repeats the 32-bit `value` over `size` bytes (a multiple of 4).
inline void CpuFill(const std::shared_ptr<Buffer>& dst, uint64_t offset,
                    uint64_t size, uint32_t value) {
  std::byte* p = CpuData(dst, offset);
  for (uint64_t i = 0; i < size; i += 4) std::memcpy(p + i, &value, 4);
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_BUFFER_H_
