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
#include "server/backend/work_account.h"

namespace gpustream::backend {

// A share of a device's SMs (a CUDA green context) that queues run on:
// made by Device::PartitionSms, released (on the device's cleanup thread)
// when the last queue and owner let go. Thread-safe.
class SmPartition {
 public:
  virtual ~SmPartition() = default;
  virtual uint32_t sm_count() const = 0;
  // False once its device failed or was reset since it was made: queues
  // can no longer be made on it (partition the device again).
  virtual bool valid() const = 0;
};

struct QueueOptions {
  int32_t priority = 0;  // Within [priority_greatest, priority_least].
  // The tenant the queue's work is charged to and scheduled for (fair
  // shares by account weight); null: an account of the queue's own.
  std::shared_ptr<WorkAccount> account;
  // Identifies the queue's session among the account's sessions: the
  // scheduler shares a tenant's time equally between its sessions, then by
  // queue priority within a session.
  uint64_t session_key = 0;
  // Called once, on a backend thread, when the queue's work first fails.
  absl::AnyInvocable<void(const absl::Status&)> on_error;
  // The SMs the queue's kernels run on (PartitionSms of this device, since
  // its last Recover); null: all of the device's.
  std::shared_ptr<SmPartition> partition;
};

// A device or its context failed for good (a GPU kernel fault poisons the
// whole CUDA context).
struct DeviceFailure {
  absl::Status cause;  // ABORTED, naming the driver's error.
  // QueueOptions::session_key of every queue that had a kernel issued and
  // not completed when the failure was seen, each once. The faulting kernel
  // is one of theirs; with one entry, that session's kernel caused it. The
  // device cannot say more: a sticky error is reported on every stream of
  // the context, not on the faulting one.
  std::vector<uint64_t> sessions_with_kernels;
};

// Called once per failure, on a backend thread.
using FatalErrorHandler = absl::AnyInvocable<void(const DeviceFailure&)>;

// Devices live as long as the daemon and outlive every object they create.
// Objects are shared; each one's native resources are released on the
// device's cleanup thread when its last reference goes, never on the
// thread that drops it (a gRPC thread, a completion callback, a holder of
// the session lock). Thread-safe.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;
  virtual MemoryInfo memory() = 0;

  // Set before any object is created; a null handler (the owner going
  // away) stops later calls.
  virtual void SetFatalErrorHandler(FatalErrorHandler handler) = 0;
  // Whether a fatal error failed the device (until Recover succeeds); set
  // before its queues report the failure.
  virtual bool failed() const { return false; }
  // After a fatal error, once every session on the device has been torn
  // down: resets the device (CUDA: the primary context) so that new objects
  // work. Objects of the failed context must all be gone. OK when healthy.
  virtual absl::Status Recover() = 0;

  // Blocks until every release handed to the cleanup thread so far has run
  // (session teardown, so that memory reported free is free). Never call it
  // from a backend thread.
  virtual void FlushCleanup() = 0;

  virtual absl::StatusOr<std::shared_ptr<Queue>> CreateQueue(
      QueueOptions options) = 0;
  virtual absl::StatusOr<std::shared_ptr<Event>> CreateEvent(
      bool enable_timing) = 0;
  virtual absl::StatusOr<std::shared_ptr<Flag>> CreateFlag() = 0;
  // RESOURCE_EXHAUSTED when the device lacks the memory.
  virtual absl::StatusOr<std::shared_ptr<Buffer>> Allocate(uint64_t size,
                                                           MemoryKind kind) = 0;

  // --- Sharing the device between tenants (ServerConfig.gpu_sharing) -------
  // A context of its own on the same device: its own address space,
  // objects and modules (load them again), and failures (a fault there
  // fails only it; its fatal-error handler is its own). Released when
  // destroyed, after every object it made. UNIMPLEMENTED (with the reason)
  // where the backend's contexts would isolate nothing.
  virtual absl::StatusOr<std::unique_ptr<Device>> CreateContext() {
    return absl::UnimplementedError(
        "this backend has no contexts to give each tenant");
  }
  // Disjoint partitions of the device's SMs, one per weight, sized by
  // weight at the device's partition granularity (at least one granule
  // each). FAILED_PRECONDITION saying why where the device has too few
  // granules; UNIMPLEMENTED where it cannot partition.
  virtual absl::StatusOr<std::vector<std::shared_ptr<SmPartition>>>
  PartitionSms(const std::vector<uint32_t>& weights) {
    return absl::UnimplementedError(
        "this backend cannot partition its device's SMs");
  }

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
