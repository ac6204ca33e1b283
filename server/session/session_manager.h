// Opens, finds, keeps alive and tears down sessions; owns their leases.
#ifndef GPUSTREAM_SERVER_SESSION_SESSION_MANAGER_H_
#define GPUSTREAM_SERVER_SESSION_SESSION_MANAGER_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "proto/gpustream/v1/server_config.pb.h"
#include "server/session/device_sharing.h"
#include "server/session/session.h"
#include "server/share/share_tickets.h"
#include "server/tenants/tenant_registry.h"
#include "server/util/heap_trimmer.h"

namespace gpustream::session {

struct ManagerOptions {
  // Daemon-wide. Each configured tenant is guaranteed its weighted share of
  // it (a tenant past its share may open more only while that leaves room
  // for every other tenant's share).
  uint32_t max_sessions = 256;
  uint32_t default_lease_seconds = 60;
  uint32_t max_lease_seconds = 3600;
  SessionLimits session_limits;
  // How often leases are checked.
  absl::Duration lease_check_period = absl::Milliseconds(200);
  // How tenants share a GPU (ServerCore makes each device's DeviceSharing).
  v1::GpuSharing gpu_sharing = v1::GPU_SHARING_SHARED_CONTEXT;
  // Where HOST_SHARED buffers' tickets go (ServerCore sets its own); null:
  // such buffers are refused. Outlives the manager.
  share::ShareTickets* share_tickets = nullptr;
};

// One device the manager can open sessions on: where each tenant's
// sessions run on it.
struct DeviceSlot {
  DeviceSharing* sharing;
};

// Each teardown (close, lease expiry, shutdown) runs on a thread of its own,
// never the caller's: a session whose queues take long to drain delays no
// other. Lease checks run on the manager's housekeeping thread.
// Thread-safe.
class SessionManager {
 public:
  // `tenants` outlives the manager.
  SessionManager(std::vector<DeviceSlot> devices, util::TimerThread* timer,
                 const tenants::TenantRegistry* tenants,
                 ManagerOptions options);
  // Tears down every session that is left.
  ~SessionManager();
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  // Every call names the caller's tenant: another tenant's session is
  // NOT_FOUND, exactly as one that does not exist.
  // RESOURCE_EXHAUSTED past the tenant's max_sessions quota or its share of
  // the daemon's max_sessions.
  absl::Status Open(const tenants::Principal& who,
                    const v1::OpenSessionRequest& req,
                    v1::OpenSessionResponse* resp);
  // Removes the session at once (later lookups fail) and tears it down in
  // the background; `done` runs when teardown has finished.
  void Close(const std::string& tenant, const std::string& session_id,
             absl::AnyInvocable<void(absl::Status)> done);
  absl::Status KeepAlive(const std::string& tenant,
                         const v1::KeepAliveRequest& req,
                         v1::KeepAliveResponse* resp);

  // The live session, its lease renewed; NOT_FOUND naming session_id.
  absl::StatusOr<std::shared_ptr<Session>> Find(const std::string& tenant,
                                                const std::string& session_id);

  // Every live session, for admins (never a session id).
  void List(v1::ListSessionsResponse* resp);
  // Admin: ends the session named by `public_id` like a device failure
  // does: its owner's later calls get ABORTED saying an administrator ended
  // it. NOT_FOUND naming public_id if no live session has it.
  absl::Status Kill(const std::string& public_id, const std::string& by);
  // A reload removed `tenant`: ends its sessions with ABORTED.
  void EndTenant(const std::string& tenant);

  size_t session_count();

  // Tears down every session and returns once all teardowns have finished
  // (daemon shutdown: releases the waits that RPCs may still be parked on).
  void CloseAll();

  // A device failed (`reason` is ABORTED and names the cause): ends every
  // session on it, or with `context` (a tenant's context failed) only the
  // sessions placed on that context. Calls parked on them, and their
  // owners' later calls on those session ids, get `reason`. `done` runs, on
  // a teardown thread or the housekeeper, once every one of those
  // teardowns has finished.
  void AbortDevice(uint32_t device_id, const backend::Device* context,
                   const absl::Status& reason, absl::AnyInvocable<void()> done);
  // "session <public_id> (tenant '<name>')" for each live session on
  // `device_id` whose session_key is in `keys`, sorted. Keys of sessions
  // that have ended already find nothing.
  std::vector<std::string> DescribeSessions(uint32_t device_id,
                                            absl::Span<const uint64_t> keys);

 private:
  struct Entry {
    std::shared_ptr<Session> session;
    absl::Duration lease;
    bool warned = false;  // LeaseExpiring sent for the current idle spell.
  };

  // Tears `session` down on a new thread, then calls `done` (if set).
  // `cause` names why in the log ("closed", "lease_expired", ...).
  void StartTeardown(std::shared_ptr<Session> session, absl::Status reason,
                     absl::string_view cause,
                     absl::AnyInvocable<void(absl::Status)> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the entry (and its public id); returns its session.
  std::shared_ptr<Session> Take(
      absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the entry, remembers `reason` for its owner and tears it down.
  void Abort(absl::flat_hash_map<std::string, Entry>::iterator it,
             const absl::Status& reason, absl::string_view cause,
             absl::AnyInvocable<void(absl::Status)> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK if `tenant` may open one more session under max_sessions.
  absl::Status CheckFairShare(const tenants::Tenant& tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The caller's session entry, or NOT_FOUND.
  absl::StatusOr<Entry*> Lookup(const std::string& tenant,
                                const std::string& session_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Housekeep();
  void CheckLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Remembers why a session ended abnormally, so its owner's next call says
  // so instead of "unknown session_id". Bounded: the oldest are forgotten.
  void RememberEnded(const std::string& session_id, const std::string& tenant,
                     const absl::Status& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kMaxRemembered = 4096;

  const std::vector<DeviceSlot> devices_;
  util::TimerThread* const timer_;
  const tenants::TenantRegistry* const tenants_;
  const ManagerOptions options_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  // Public id to session id.
  absl::flat_hash_map<std::string, std::string> public_ids_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_session_key_ ABSL_GUARDED_BY(mu_) = 1;
  // Opens between their quota check and their insert (Open places the
  // session outside mu_): counted against max_sessions.
  size_t opening_ ABSL_GUARDED_BY(mu_) = 0;
  // Quick work for the housekeeper, run outside the lock.
  std::deque<absl::AnyInvocable<void()>> chores_ ABSL_GUARDED_BY(mu_);
  struct Ended {
    std::string tenant;
    absl::Status reason;
  };
  absl::flat_hash_map<std::string, Ended> ended_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ended_order_ ABSL_GUARDED_BY(mu_);
  int teardowns_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Gives back heap that crowds of teardowns and storms of abandoned calls
  // freed (10,000 sessions of 4 queues left the daemon at 6 times its RSS).
  // The housekeeper's alone.
  util::HeapTrimmer heap_trimmer_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread housekeeper_;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_SESSION_MANAGER_H_
