// A tenant: who may call, what they may use, and what they use now.
#ifndef GPUSTREAM_SERVER_TENANTS_TENANT_H_
#define GPUSTREAM_SERVER_TENANTS_TENANT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "server/backend/work_account.h"

namespace gpustream::tenants {

// What a request presents: "authorization: Bearer <token>" metadata and/or
// the subject of a verified mTLS client certificate ("CN=alice").
struct Credentials {
  std::optional<std::string> bearer_token;
  std::optional<std::string> tls_subject;
};

class Tenant;

// The authenticated caller.
struct Principal {
  std::shared_ptr<Tenant> tenant;
  const std::string& name() const;
  bool admin() const;
};

// One tenant's limits and live usage. Usage counters are charged when an
// object is created (or work enqueued) and released when it goes, always
// on the Tenant object charged: a reload that changes the quota updates
// this object in place, so releases balance. Thread-safe.
class Tenant {
 public:
  Tenant(std::string name, bool admin, uint32_t weight, v1::Quota quota);

  const std::string& name() const { return name_; }
  bool admin() const { return admin_.load(std::memory_order_relaxed); }
  v1::Quota quota() const;
  uint32_t weight() const;
  // Reload: new limits apply to new work.
  void Update(bool admin, uint32_t weight, const v1::Quota& quota);
  // May launch kernels without declared extents (Kernel.checked false):
  // configured per tenant; the tenant of a daemon without tenants (and the
  // operator there) may.
  bool allow_unchecked_kernels() const {
    return allow_unchecked_kernels_.load(std::memory_order_relaxed);
  }
  void set_allow_unchecked_kernels(bool allow) {
    allow_unchecked_kernels_.store(allow, std::memory_order_relaxed);
  }

  // The account the backends charge the tenant's work on `device_id` to
  // (one per device, as each device schedules and admits on its own).
  std::shared_ptr<backend::WorkAccount> account(uint32_t device_id);
  // The tenant's work on `device_id` so far, as measured (GetStats).
  uint64_t busy_ns(uint32_t device_id) const;

  // Each Reserve* returns RESOURCE_EXHAUSTED naming the quota, its limit and
  // the current use, and charges nothing then; each successful Reserve*
  // must be balanced by the matching Release*.
  absl::Status ReserveSession();
  void ReleaseSession();
  absl::Status ReserveQueue();
  void ReleaseQueue(uint32_t count = 1);
  absl::Status ReserveMemory(uint64_t bytes);
  void ReleaseMemory(uint64_t bytes);
  // Captured graphs (quota.max_graphs), until the last launch using one has
  // run.
  absl::Status ReserveGraph();
  void ReleaseGraph();
  // Host-side waits the daemon holds for the tenant's calls (synchronize,
  // WaitFlag) until they are answered (their work completed, or they timed
  // out: a timeout drops the watch). A call whose client went away keeps
  // its watch until then, so their number is bounded (kMaxPendingWaits).
  absl::Status ReserveWait();
  void ReleaseWait();
  static constexpr uint32_t kMaxPendingWaits = 8192;
  // Enqueue-time checks against the backend's live counters (no charge:
  // the backend counts the work itself). `staged` is the bytes the new
  // work would stage, `commands` the commands it would add (a graph's
  // launch: up to one per command). Work larger than a whole quota (a
  // graph's many commands or bytes) needs nothing else in flight or staged.
  absl::Status CheckEnqueue(uint64_t staged, uint64_t commands = 1) const;
  // The priority a queue actually gets: `requested` clamped to
  // quota.max_priority when the quota has one (0 included: least only).
  // Priorities use the device's numbering, where numerically lower is greater
  // (CUDA's), so a request below max_priority gets max_priority.
  int32_t ClampPriority(int32_t requested) const;

  uint32_t sessions() const { return sessions_.load(); }
  uint32_t queues() const { return queues_.load(); }
  uint64_t memory_bytes() const { return memory_bytes_.load(); }
  uint32_t graphs() const { return graphs_.load(); }
  uint32_t waits() const { return waits_.load(); }
  // Fills `stats` (GetStats).
  void Describe(v1::TenantStats* stats) const;

 private:
  // Totals over the per-device accounts.
  struct Totals {
    int64_t inflight_commands = 0;
    int64_t staged_bytes = 0;
    uint64_t commands_completed = 0;
    uint64_t busy_ns = 0;
  };
  Totals Sum() const;

  const std::string name_;
  std::atomic<bool> admin_;
  std::atomic<bool> allow_unchecked_kernels_{false};
  mutable absl::Mutex mu_;
  v1::Quota quota_ ABSL_GUARDED_BY(mu_);
  uint32_t weight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::shared_ptr<backend::WorkAccount>> accounts_
      ABSL_GUARDED_BY(mu_);
  // Copies of the enqueue-time limits, so that the hot path takes no lock
  // when they are off.
  std::atomic<uint64_t> max_inflight_{0};
  std::atomic<uint64_t> max_staged_{0};
  std::atomic<uint32_t> sessions_{0};
  std::atomic<uint32_t> queues_{0};
  std::atomic<uint32_t> waits_{0};
  std::atomic<uint32_t> graphs_{0};
  std::atomic<uint64_t> memory_bytes_{0};
};

}  // namespace gpustream::tenants

#endif  // GPUSTREAM_SERVER_TENANTS_TENANT_H_
