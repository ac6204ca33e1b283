// HOST_SHARED buffers: memory of a session that this process maps too.
#ifndef GPUSTREAM_CLIENT_SHARED_BUFFER_H_
#define GPUSTREAM_CLIENT_SHARED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/buffer.h"

namespace gpustream::client {

// This process's mapping of a shared buffer's memory (a memfd received
// from the daemon's share socket). Unmapped when the last holder lets go;
// it stays valid after the buffer is freed (the daemon then lets go of
// its own mapping once queued work is done with it). Thread-safe.
class SharedMapping {
 public:
  // Trades `ticket` (from AllocateBuffer) for the memory on the daemon's
  // share socket `socket_path`, as session `session_id`, and maps it.
  // PERMISSION_DENIED when the daemon closes the connection without an
  // answer (a wrong, used or expired ticket); UNAVAILABLE when the socket
  // cannot be reached.
  static absl::StatusOr<std::shared_ptr<SharedMapping>> Fetch(
      const std::string& socket_path, const std::string& session_id,
      const std::string& ticket);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  SharedMapping(std::byte* data, uint64_t size, uint64_t mapped)
      : data_(data), size_(size), mapped_(mapped) {}
  std::byte* const data_;
  const uint64_t size_;
  const uint64_t mapped_;
};

// A Buffer whose bytes this process reads and writes directly: what it
// writes is what a CopyBuffer from the buffer (or a kernel taking it)
// sees, and what device work writes into it is visible here once that work
// is known complete (synchronize, an event, a flag). Move-only; destroying
// it frees the buffer and drops this mapping (keep mapping() to hold the
// bytes longer).
class SharedBuffer : public Buffer {
 public:
  SharedBuffer() = default;
  SharedBuffer(Buffer buffer, std::shared_ptr<SharedMapping> mapping)
      : Buffer(std::move(buffer)), mapping_(std::move(mapping)) {}

  std::byte* data() const { return mapping_ ? mapping_->data() : nullptr; }
  absl::Span<std::byte> span() const { return {data(), size()}; }
  const std::shared_ptr<SharedMapping>& mapping() const { return mapping_; }

 private:
  std::shared_ptr<SharedMapping> mapping_;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_SHARED_BUFFER_H_
