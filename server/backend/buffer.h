// A block of device or pinned host memory owned by one session.
#ifndef GPUSTREAM_SERVER_BACKEND_BUFFER_H_
#define GPUSTREAM_SERVER_BACKEND_BUFFER_H_

#include <cstdint>
#include <memory>

#include "server/backend/shared_region.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// Buffers are shared (std::shared_ptr): every enqueued operation that uses a
// buffer holds a reference, so freeing it from the session's table reclaims
// the memory only once that work has finished. Thread-safe.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual uint64_t size() const = 0;
  virtual MemoryKind kind() const = 0;
  // The memory a client may map (kHostShared buffers); null otherwise.
  virtual std::shared_ptr<const SharedRegion> shared_region() const {
    return nullptr;
  }
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_BUFFER_H_
