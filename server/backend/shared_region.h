// Host memory that the daemon and a client both map: an anonymous memfd
// (no file-system name), sealed at its size, mapped shared.
#ifndef GPUSTREAM_SERVER_BACKEND_SHARED_REGION_H_
#define GPUSTREAM_SERVER_BACKEND_SHARED_REGION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace gpustream::backend {

// Owns the daemon's mapping of a memfd, and the memfd itself until it is
// taken (TakeFd: handed to the client, or dropped when its share ticket
// expires), so that a buffer holds a descriptor only while a ticket for it
// is outstanding. The mapping goes when the last holder lets go (the
// buffer that uses it, or a share socket answer in flight); a client that
// received the descriptor keeps its own mapping and pages after that. The
// size is sealed (F_SEAL_SHRINK | F_SEAL_GROW): a client cannot truncate
// the file under the daemon's mapping, which would turn every later access
// into SIGBUS. The file is not executable (MFD_NOEXEC_SEAL where the
// kernel has it). Thread-safe.
//
// It derives from enable_shared_from_this only for the weak reference that
// brings: with it the last release never takes libstdc++ 12's fast path
// (one 8-byte atomic load of both counts), which ThreadSanitizer cannot
// pair with a share ticket's 4-byte weak release on another thread, and
// reports as a race.
class SharedRegion : public std::enable_shared_from_this<SharedRegion> {
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
  // The memfd, now the caller's to close; -1 once taken. Taken once.
  int TakeFd() const { return fd_.exchange(-1); }

 private:
  SharedRegion(int fd, std::byte* data, uint64_t size, uint64_t mapped)
      : fd_(fd), data_(data), size_(size), mapped_(mapped) {}

  mutable std::atomic<int> fd_;
  std::byte* const data_;
  const uint64_t size_;
  const uint64_t mapped_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_SHARED_REGION_H_
