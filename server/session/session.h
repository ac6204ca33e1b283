// One client session: its objects, their ids, and every operation on them.
#ifndef GPUSTREAM_SERVER_SESSION_SESSION_H_
#define GPUSTREAM_SERVER_SESSION_SESSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "server/backend/device.h"
#include "server/modules/module_registry.h"
#include "server/session/call_cancel.h"
#include "server/session/graph_recorder.h"
#include "server/session/notification_hub.h"
#include "server/session/object_table.h"
#include "server/session/parked_calls.h"
#include "server/session/result_budget.h"
#include "server/share/share_tickets.h"
#include "server/tenants/tenant.h"
#include "server/util/timer_thread.h"

namespace gpustream::session {

// How long a teardown waits for a session's queues to drain before it lets
// go of them (their enqueued work keeps what it uses alive until it ends).
inline constexpr absl::Duration kTeardownDrainLimit = absl::Seconds(10);

struct SessionLimits {
  uint32_t max_queues = 64;
  uint32_t max_objects = 65536;
};

// Who opened a session, and on which device.
struct SessionOwner {
  std::string tenant;
  std::string client_name;
  uint32_t device_id = 0;
  // Names the session to admins (ListSessions, KillSession); unlike the
  // secret session id it grants nothing.
  std::string public_id;
};

// What a session uses but does not own; all outlive every session but the
// tenant, which the session shares.
struct SessionContext {
  backend::Device* device;
  const modules::ModuleRegistry* modules;
  util::TimerThread* timer;
  SessionLimits limits;
  // Charged for the session's queues and memory; its account (for this
  // device) is charged for the session's work. Never null.
  std::shared_ptr<tenants::Tenant> tenant;
  // Tells the session's queues apart from its tenant's other sessions' in
  // the device's scheduler.
  uint64_t session_key = 0;
  // The tenant's SM partition (GPU_SHARING_SM_PARTITIONS), for every queue.
  std::shared_ptr<backend::SmPartition> partition;
  // Keeps `device` alive when it is a tenant's context (Placement::hold);
  // let go after the session's objects.
  std::shared_ptr<const void> hold;
  // Issues HOST_SHARED buffers' tickets; null, or without a socket path:
  // sharing is off.
  share::ShareTickets* share_tickets = nullptr;
};

// Every operation validates its request completely (ids of this session,
// ranges, kinds) before anything reaches the device, and reports errors with
// the codes of the error table (proto/gpustream/v1/gpustream.proto) naming the
// offending field. Operations that wait take a `done` callback, which may run
// on any thread (at once if nothing needs waiting for); `response` must stay
// valid until `done` runs. They also take the call's `cancel`: once it fires
// they finish (CANCELLED) and release what the wait held, at once. Operations
// never block on device work. Thread-safe.
class Session {
 public:
  using Done = absl::AnyInvocable<void(absl::Status)>;
  // Fired when the caller of a waiting operation goes away; may be null.
  using Cancel = std::shared_ptr<CallCancel>;

  // Creates the session and its default queue.
  static absl::StatusOr<std::shared_ptr<Session>> Create(std::string id,
                                                         SessionOwner owner,
                                                         SessionContext ctx);
  ~Session();

  const std::string& id() const { return id_; }
  const SessionOwner& owner() const { return owner_; }
  absl::Time opened_at() const { return opened_at_; }
  const std::shared_ptr<tenants::Tenant>& tenant() const { return ctx_.tenant; }
  // QueueOptions::session_key of its queues (DeviceFailure names these).
  uint64_t session_key() const { return ctx_.session_key; }
  // The device (or tenant context) the session's objects live on.
  const backend::Device* device() const { return ctx_.device; }
  // An admin's summary: object counts, memory, streams, age and idle time.
  void Describe(v1::SessionInfo* info);
  uint64_t default_queue_id() const { return default_queue_id_; }
  // How messages name a queue: "the default queue", else "queue_id N".
  std::string QueueName(uint64_t queue_id) const {
    return queue_id == default_queue_id_ ? "the default queue"
                                         : absl::StrCat("queue_id ", queue_id);
  }
  NotificationHub& notifications() { return *notifications_; }
  // Read-result bytes in flight over all of the session's calls and
  // streams; the transport (rpc/) takes and gives them. A read whose caller
  // went away keeps its bytes here until the device has done it
  // (ReadBuffer).
  ResultBudget& pending_results() { return *pending_results_; }

  absl::Status CreateQueue(const v1::CreateQueueRequest& req,
                           v1::CreateQueueResponse* resp);
  void DestroyQueue(const v1::DestroyQueueRequest& req,
                    v1::DestroyQueueResponse* resp, Done done,
                    const Cancel& cancel = nullptr);
  void SynchronizeQueue(const v1::SynchronizeQueueRequest& req,
                        v1::SynchronizeQueueResponse* resp, Done done,
                        const Cancel& cancel = nullptr);
  absl::Status QueryQueue(const v1::QueryQueueRequest& req,
                          v1::QueryQueueResponse* resp);
  absl::Status WaitQueue(const v1::WaitQueueRequest& req,
                         v1::WaitQueueResponse* resp);

  absl::Status CreateEvent(const v1::CreateEventRequest& req,
                           v1::CreateEventResponse* resp);
  absl::Status DestroyEvent(const v1::DestroyEventRequest& req,
                            v1::DestroyEventResponse* resp);
  absl::Status RecordEvent(const v1::RecordEventRequest& req,
                           v1::RecordEventResponse* resp);
  absl::Status WaitEvent(const v1::WaitEventRequest& req,
                         v1::WaitEventResponse* resp);
  void SynchronizeEvent(const v1::SynchronizeEventRequest& req,
                        v1::SynchronizeEventResponse* resp, Done done,
                        const Cancel& cancel = nullptr);
  absl::Status QueryEvent(const v1::QueryEventRequest& req,
                          v1::QueryEventResponse* resp);
  absl::Status EventElapsedTime(const v1::EventElapsedTimeRequest& req,
                                v1::EventElapsedTimeResponse* resp);

  absl::Status CreateFlag(const v1::CreateFlagRequest& req,
                          v1::CreateFlagResponse* resp);
  absl::Status DestroyFlag(const v1::DestroyFlagRequest& req,
                           v1::DestroyFlagResponse* resp);
  absl::Status SignalFlag(const v1::SignalFlagRequest& req,
                          v1::SignalFlagResponse* resp);
  absl::Status ReadFlag(const v1::ReadFlagRequest& req,
                        v1::ReadFlagResponse* resp);
  void WaitFlag(const v1::WaitFlagRequest& req, v1::WaitFlagResponse* resp,
                Done done, const Cancel& cancel = nullptr);
  absl::Status WaitHostValue(const v1::WaitHostValueRequest& req,
                             v1::WaitHostValueResponse* resp);
  absl::Status WriteFlag(const v1::WriteFlagRequest& req,
                         v1::WriteFlagResponse* resp);

  absl::Status EnqueueHostFunc(const v1::EnqueueHostFuncRequest& req,
                               v1::EnqueueHostFuncResponse* resp);

  absl::Status AllocateBuffer(const v1::AllocateBufferRequest& req,
                              v1::AllocateBufferResponse* resp);
  absl::Status FreeBuffer(const v1::FreeBufferRequest& req,
                          v1::FreeBufferResponse* resp);
  absl::Status WriteBuffer(const v1::WriteBufferRequest& req,
                           v1::WriteBufferResponse* resp);
  void ReadBuffer(const v1::ReadBufferRequest& req,
                  v1::ReadBufferResponse* resp, Done done,
                  const Cancel& cancel = nullptr);
  absl::Status CopyBuffer(const v1::CopyBufferRequest& req,
                          v1::CopyBufferResponse* resp);
  absl::Status FillBuffer(const v1::FillBufferRequest& req,
                          v1::FillBufferResponse* resp);

  absl::Status LaunchKernel(const v1::LaunchKernelRequest& req,
                            v1::LaunchKernelResponse* resp);

  // Graphs (session_graphs.cc). While a queue captures, every enqueue on it
  // is recorded (GraphRecorder) instead of run.
  absl::Status BeginCapture(const v1::BeginCaptureRequest& req,
                            v1::BeginCaptureResponse* resp);
  absl::Status EndCapture(const v1::EndCaptureRequest& req,
                          v1::EndCaptureResponse* resp);
  absl::Status LaunchGraph(const v1::LaunchGraphRequest& req,
                           v1::LaunchGraphResponse* resp);
  absl::Status DestroyGraph(const v1::DestroyGraphRequest& req,
                            v1::DestroyGraphResponse* resp);

  // Lease bookkeeping: any request or open stream keeps the session alive.
  void Touch() {
    last_used_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  }
  absl::Time last_used() const {
    return absl::FromUnixNanos(last_used_ns_.load(std::memory_order_relaxed));
  }
  void StreamOpened() { open_streams_.fetch_add(1); }
  void StreamClosed() {
    Touch();
    open_streams_.fetch_sub(1);
  }
  int open_streams() const { return open_streams_.load(); }

  // Tears everything down, in order: refuse new operations; cancel the
  // queues (work held in the daemon is dropped); release every wait the
  // queues are stalled on (its flags) and every host wait; wait, at most
  // kTeardownDrainLimit, for the queues to drain; drop queues, events,
  // flags and buffers; close notification streams. Blocks, so call it off
  // the RPC threads. Calls parked on the session get `reason`. Idempotent.
  void Teardown(const absl::Status& reason);
  // The first step of Teardown alone, on the caller's thread: from now on
  // every operation is refused as on a closed session (so commands behind a
  // close_session in a Submit stream fail NOT_FOUND rather than run while
  // Teardown is on its way). Idempotent.
  void Refuse(const absl::Status& reason);

 private:
  Session(std::string id, SessionOwner owner, SessionContext ctx)
      : id_(std::move(id)), owner_(std::move(owner)), ctx_(ctx) {}

  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Find(uint64_t id, absl::string_view field);
  // Why a closed session refuses work: its abnormal end (ABORTED,
  // UNAVAILABLE), else NOT_FOUND.
  absl::Status ClosedError() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The status a call parked on a closed session ends with.
  absl::Status ClosedReason() ABSL_LOCKS_EXCLUDED(mu_);
  // A queue that accepts work: NOT_FOUND if unknown, FAILED_PRECONDITION if
  // it holds a sticky error (ABORTED if its device failed),
  // RESOURCE_EXHAUSTED if the tenant's in-flight or staging quota has no
  // room for `commands` more commands staging `staged` bytes. While the queue
  // captures, its GraphRecorder (no quota check: nothing goes in flight),
  // and `*capturing` (if given) says so.
  absl::StatusOr<std::shared_ptr<backend::Queue>> FindLiveQueue(
      uint64_t id, uint64_t staged = 0, bool* capturing = nullptr,
      uint64_t commands = 1);
  // The recorder of the capture on `queue_id`, null if it captures nothing.
  std::shared_ptr<GraphRecorder> CaptureOf(uint64_t queue_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (captures_.empty()) return nullptr;  // The hot path's usual case.
    auto it = captures_.find(queue_id);
    return it == captures_.end() ? nullptr : it->second;
  }
  // FAILED_PRECONDITION naming the capture when `queue_id` captures: `what`
  // (e.g. "SynchronizeQueue") would wait on the queue or read it.
  absl::Status CheckNotCapturing(uint64_t queue_id, absl::string_view what)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The error CheckNotCapturing returns.
  absl::Status CaptureError(uint64_t queue_id, absl::string_view what);
  // Checks room for one more object (and one more queue if `queue`).
  absl::Status CheckQuota(bool queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new buffer of the device, charged to the tenant until its memory is
  // back (ChargedBuffer).
  absl::StatusOr<std::shared_ptr<backend::Buffer>> AllocateCharged(
      uint64_t size, backend::MemoryKind kind) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<backend::Buffer>> FindRange(
      uint64_t buffer_id, absl::string_view id_field, uint64_t offset,
      uint64_t size, absl::string_view what);
  // Creates a queue (`requested` id, 0: the server picks) and returns its
  // id.
  absl::StatusOr<uint64_t> NewQueue(int32_t priority, uint64_t requested)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Objects are made off the session's lock: a device allocation zeroes its
  // memory (seconds for gigabytes) and creating a stream or a pinned flag
  // calls the driver, while every enqueue of the session takes the lock to
  // look its queue up. ClaimId checks the quota (and the queue quota, which
  // it charges, if `queue`) and claims the id (ObjectTable::Claim).
  absl::StatusOr<uint64_t> ClaimId(uint64_t requested, bool queue)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Puts `object` under `id` from ClaimId(.., queue), adding
  // `memory_bytes` to the session's. Otherwise gives the claim back (with
  // its queue charge, unless a teardown took that) and returns why:
  // `object`'s error, or the session's end meanwhile; `object` is then
  // dropped off the lock.
  template <typename T>
  absl::Status FillClaim(uint64_t id, bool queue,
                         absl::StatusOr<std::shared_ptr<T>> object,
                         uint64_t memory_bytes = 0) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string id_;
  const SessionOwner owner_;
  const SessionContext ctx_;
  const absl::Time opened_at_ = absl::Now();
  uint64_t default_queue_id_ = 0;
  // Shared with queue callbacks, which may outlive the session.
  const std::shared_ptr<NotificationHub> notifications_ =
      std::make_shared<NotificationHub>();
  const std::shared_ptr<ParkedCalls> parked_ = std::make_shared<ParkedCalls>();
  std::atomic<int64_t> last_used_ns_{absl::GetCurrentTimeNanos()};
  std::atomic<int> open_streams_{0};
  // Shared with read callbacks, which may outlive the session.
  const std::shared_ptr<ResultBudget> pending_results_ =
      std::make_shared<ResultBudget>();

  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;  // Refuse() ran; closing.
  absl::Status ended_reason_ ABSL_GUARDED_BY(mu_);
  ObjectTable objects_ ABSL_GUARDED_BY(mu_);
  uint32_t queue_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Queues capturing now, by queue id.
  absl::flat_hash_map<uint64_t, std::shared_ptr<GraphRecorder>> captures_
      ABSL_GUARDED_BY(mu_);
  // Queues destroyed but not yet drained; shared with their OnIdle
  // callbacks, which may run after the session is gone.
  const std::shared_ptr<std::atomic<uint32_t>> draining_queues_ =
      std::make_shared<std::atomic<uint32_t>>(0);
  // Bytes of the buffers in objects_, charged to the tenant.
  uint64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

template <typename T>
absl::StatusOr<std::shared_ptr<T>> Session::Find(uint64_t id,
                                                 absl::string_view field) {
  absl::MutexLock lock(&mu_);
  if (closed_ || refused_) return ClosedError();
  return objects_.Find<T>(id, field);
}

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_SESSION_H_
