// Host memory that the daemon and a client both map: an anonymous memfd
// (no file-system name), sealed at its size, mapped shared.
#ifndef GPUSTREAM_SERVER_BACKEND_SHARED_REGION_H_
#define GPUSTREAM_SERVER_BACKEND_SHARED_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace gpustream::backend {

// Owns the memfd and the daemon's mapping of it; both go when the last
// holder lets go (the buffer that uses it, or a share socket answer in
// flight). A client that received the descriptor keeps its own mapping
// and pages after that. The size is sealed (F_SEAL_SHRINK | F_SEAL_GROW):
// a client cannot truncate the file under the daemon's mapping, which
// would turn every later access into SIGBUS. Immutable, thread-safe.
class SharedRegion {
 public:
  // Zero-filled. `size` 0 still maps one page (a distinct address).
  // RESOURCE_EXHAUSTED when the kernel refuses the memory.
  static absl::StatusOr<std::shared_ptr<SharedRegion>> Create(uint64_t size);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The bytes mapped: size() rounded up to whole pages (at least one).
  uint64_t mapped_bytes() const { return mapped_; }
  // The memfd, owned by the region: dup it (SCM_RIGHTS does) to keep it.
  int fd() const { return fd_; }

 private:
  SharedRegion(int fd, std::byte* data, uint64_t size, uint64_t mapped)
      : fd_(fd), data_(data), size_(size), mapped_(mapped) {}

  const int fd_;
  std::byte* const data_;
  const uint64_t size_;
  const uint64_t mapped_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_SHARED_REGION_H_
