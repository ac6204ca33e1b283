// One device of a backend: the factory of its queues, events, flags,
// buffers and modules.
#ifndef GPUSTREAM_SERVER_BACKEND_DEVICE_H_
#define GPUSTREAM_SERVER_BACKEND_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "server/backend/buffer.h"
#include "server/backend/event.h"
#include "server/backend/flag.h"
#include "server/backend/module.h"
#include "server/backend/queue.h"
#include "server/backend/types.h"

namespace gpustream::backend {

struct QueueOptions {
  int32_t priority = 0;  // Within [priority_greatest, priority_least].
  // Called once, on a backend thread, when the queue's work first fails.
  absl::AnyInvocable<void(const absl::Status&)> on_error;
};

// Devices live as long as the daemon. Thread-safe.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;
  virtual MemoryInfo memory() = 0;

  virtual absl::StatusOr<std::unique_ptr<Queue>> CreateQueue(
      QueueOptions options) = 0;
  virtual absl::StatusOr<std::shared_ptr<Event>> CreateEvent(
      bool enable_timing) = 0;
  virtual absl::StatusOr<std::shared_ptr<Flag>> CreateFlag() = 0;
  // RESOURCE_EXHAUSTED when the device lacks the memory.
  virtual absl::StatusOr<std::shared_ptr<Buffer>> Allocate(uint64_t size,
                                                           MemoryKind kind) = 0;

  // Modules compiled into the daemon for this backend.
  virtual std::vector<std::unique_ptr<Module>> BuiltinModules() = 0;
  // Whether `path` looks like a module file of this backend (by extension).
  virtual bool IsModuleFile(const std::string& path) const = 0;
  // Loads a module file; INVALID_ARGUMENT naming the path if malformed.
  virtual absl::StatusOr<std::unique_ptr<Module>> LoadModule(
      const std::string& path) = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_DEVICE_H_
