// Device or pinned host memory of a session.
#ifndef GPUSTREAM_CLIENT_BUFFER_H_
#define GPUSTREAM_CLIENT_BUFFER_H_

#include "client/handle.h"

namespace gpustream::client {

enum class MemoryKind { kDevice, kHostPinned };

// Freed when the handle is destroyed; the server reclaims the memory once
// work enqueued before has finished with it. Data moves through a Queue
// (write, read, copy, fill) so that it is ordered with kernels.
class Buffer : public Handle {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<SessionCore> core, uint64_t id, uint64_t size)
      : Handle(std::move(core), id,
               [](v1::Command& c, uint64_t id) {
                 c.mutable_free_buffer()->set_buffer_id(id);
               }),
        size_(size) {}

  uint64_t size() const { return size_; }

 private:
  uint64_t size_ = 0;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_BUFFER_H_
