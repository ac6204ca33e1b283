// What a tenant's work costs on the devices: the counters the backends
// update and the session layer checks quotas and fair shares against.
#ifndef GPUSTREAM_SERVER_BACKEND_WORK_ACCOUNT_H_
#define GPUSTREAM_SERVER_BACKEND_WORK_ACCOUNT_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace gpustream::backend {

// One per tenant, shared by every queue of its sessions on every device
// (std::shared_ptr: queues may outlive a tenant removed by a reload).
// Lock-free; every field is updated with relaxed atomics, as readers (quota
// checks, stats) need no ordering with the work itself.
//
// Backends keep these contracts for every queue created with the account:
// - inflight_commands: +1 when an operation is enqueued, -1 when it has
//   completed on the device or been dropped (Cancel); commands_completed
//   +1 at the same time for work that ran.
// - staged_bytes: + the size of a Write's data while the daemon holds it
//   (before the device has consumed it), - once released.
// - busy_ns: execution time of the tenant's work, as the backend measures
//   it (CPU: time on an execution thread; GPU: time a queue of the tenant
//   had work running on the device).
// `weight` is read at scheduling time: a reload applies to later work.
struct WorkAccount {
  explicit WorkAccount(std::string tenant_name, uint32_t initial_weight = 1)
      : tenant(std::move(tenant_name)),
        weight(std::max<uint32_t>(initial_weight, 1)) {}

  const std::string tenant;
  std::atomic<uint32_t> weight;  // Fair-share weight, at least 1.
  std::atomic<int64_t> inflight_commands{0};
  std::atomic<int64_t> staged_bytes{0};
  std::atomic<uint64_t> commands_completed{0};
  std::atomic<uint64_t> busy_ns{0};
};

// One queue's in-flight commands, kept beside its account's total (the
// session's own figure sums its queues'). Lock-free.
class InflightCount {
 public:
  // Adds `n` (negative: completed or dropped) here and to `account`.
  void Charge(WorkAccount& account, int64_t n) {
    account.inflight_commands.fetch_add(n, std::memory_order_relaxed);
    count_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t value() const {
    return static_cast<uint64_t>(
        std::max<int64_t>(count_.load(std::memory_order_relaxed), 0));
  }

 private:
  std::atomic<int64_t> count_{0};
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_WORK_ACCOUNT_H_
