// Session operations: validation, id resolution, and the hand-off to the
// backend.
#include "server/session/session.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/session/timed_done.h"
#include "server/session/validation.h"

namespace gpustream::session {
namespace {

using backend::Buffer;
using backend::Event;
using backend::Flag;
using backend::Queue;

// One host-side wait charged to its tenant while the backend holds its
// callback: captured by that callback, released when the callback goes
// (fired, or cancelled with its wait).
class WaitCharge {
 public:
  explicit WaitCharge(std::shared_ptr<tenants::Tenant> tenant)
      : tenant_(std::move(tenant)) {}
  ~WaitCharge() { tenant_->ReleaseWait(); }
  WaitCharge(const WaitCharge&) = delete;
  WaitCharge& operator=(const WaitCharge&) = delete;

 private:
  const std::shared_ptr<tenants::Tenant> tenant_;
};

absl::StatusOr<std::shared_ptr<WaitCharge>> ChargeWait(
    const std::shared_ptr<tenants::Tenant>& tenant) {
  if (absl::Status s = tenant->ReserveWait(); !s.ok()) return s;
  return std::make_shared<WaitCharge>(tenant);
}

// A buffer as the session hands it out: an alias of the device's buffer
// that also holds the tenant's memory charge, so the quota is credited when
// the memory really goes (the last enqueued work that uses it done), not
// when FreeBuffer drops the id.
// `bytes` is what was reserved.
std::shared_ptr<Buffer> ChargedBuffer(std::shared_ptr<Buffer> buffer,
                                      std::shared_ptr<tenants::Tenant> tenant,
                                      uint64_t bytes) {
  class Holder {
   public:
    Holder(std::shared_ptr<Buffer> buffer,
           std::shared_ptr<tenants::Tenant> tenant, uint64_t bytes)
        : buffer_(std::move(buffer)),
          tenant_(std::move(tenant)),
          bytes_(bytes) {}
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
    ~Holder() {
      buffer_.reset();
      tenant_->ReleaseMemory(bytes_);
    }

   private:
    std::shared_ptr<Buffer> buffer_;
    const std::shared_ptr<tenants::Tenant> tenant_;
    const uint64_t bytes_;
  };
  Buffer* raw = buffer.get();
  auto holder =
      std::make_shared<Holder>(std::move(buffer), std::move(tenant), bytes);
  return std::shared_ptr<Buffer>(std::move(holder), raw);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Session>> Session::Create(std::string id,
                                                         SessionOwner owner,
                                                         SessionContext ctx) {
  auto session = std::shared_ptr<Session>(
      new Session(std::move(id), std::move(owner), ctx));
  // Before anyone else knows the session.
  auto queue = session->NewQueue(0, 0);
  if (!queue.ok()) return queue.status();
  session->default_queue_id_ = *queue;
  return session;
}

void Session::Describe(v1::SessionInfo* info) {
  info->set_public_id(owner_.public_id);
  info->set_tenant(owner_.tenant);
  info->set_client_name(owner_.client_name);
  info->set_device_id(owner_.device_id);
  info->set_open_streams(open_streams());
  const absl::Time now = absl::Now();
  info->set_age_ms(absl::ToInt64Milliseconds(now - opened_at_));
  info->set_idle_ms(absl::ToInt64Milliseconds(now - last_used()));
  absl::MutexLock lock(&mu_);
  info->set_memory_bytes(memory_bytes_);
  uint64_t inflight = 0;
  objects_.ForEach<Queue>(
      [&](Queue& queue) { inflight += queue.inflight_commands(); });
  info->set_inflight_commands(inflight);
  info->set_queues(objects_.Count<Queue>());
  info->set_events(objects_.Count<Event>());
  info->set_flags(objects_.Count<Flag>());
  info->set_buffers(objects_.Count<Buffer>());
  info->set_graphs(objects_.Count<CapturedGraph>());
}

Session::~Session() {
  Teardown(absl::CancelledError(
      absl::StrCat("session ", owner_.public_id, " closed")));
}

absl::Status Session::ClosedError() {
  // An abnormal end (the device failed, an administrator ended it) says so;
  // a session its owner closed is simply gone.
  if (ended_reason_.code() == absl::StatusCode::kAborted ||
      ended_reason_.code() == absl::StatusCode::kUnavailable) {
    return ended_reason_;
  }
  return absl::NotFoundError(
      absl::StrCat("session ", owner_.public_id, " is closed"));
}

// FAILED_PRECONDITION once the queue holds a sticky error; ABORTED as it is
// when the device failed (the session must be reopened, not the call fixed).
// `session` names the queue (QueueName) only when it failed: this runs for
// every enqueue.
absl::Status CheckLive(const Session& session, uint64_t id, Queue& queue) {
  if (absl::Status error = queue.error(); !error.ok()) {
    if (error.code() == absl::StatusCode::kAborted) return error;
    return absl::FailedPreconditionError(
        absl::StrCat(session.QueueName(id),
                     " failed earlier and takes no more "
                     "work (",
                     error.ToString(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Queue>> Session::FindLiveQueue(
    uint64_t id, uint64_t staged, bool* capturing_out, uint64_t commands) {
  std::shared_ptr<Queue> queue;
  bool capturing = false;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || refused_) return ClosedError();
    auto found = objects_.Find<Queue>(id, "queue_id");
    if (!found.ok()) return found.status();
    queue = *std::move(found);
    if (std::shared_ptr<GraphRecorder> recorder = CaptureOf(id)) {
      queue = std::move(recorder);
      capturing = true;
    }
  }
  if (absl::Status s = CheckLive(*this, id, *queue); !s.ok()) return s;
  if (capturing_out != nullptr) *capturing_out = capturing;
  // A captured command goes in flight only when the graph is launched.
  if (!capturing) {
    if (absl::Status s = ctx_.tenant->CheckEnqueue(staged, commands); !s.ok()) {
      return s;
    }
  }
  return queue;
}

absl::Status Session::CheckNotCapturing(uint64_t queue_id,
                                        absl::string_view what) {
  absl::MutexLock lock(&mu_);
  if (CaptureOf(queue_id) == nullptr) return absl::OkStatus();
  return CaptureError(queue_id, what);
}

absl::Status Session::CaptureError(uint64_t queue_id, absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " would wait on ", QueueName(queue_id),
                   ", which is recording the capture on it: EndCapture first"));
}

absl::Status Session::CheckQuota(bool queue) {
  if (closed_ || refused_) return ClosedError();
  if (objects_.size() >= ctx_.limits.max_objects) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session holds the maximum of ", ctx_.limits.max_objects, " objects"));
  }
  // Destroyed queues still draining count: each holds its work (and, parked
  // on a flag nobody signals, holds it until teardown).
  const uint32_t draining = draining_queues_->load();
  if (queue && queue_count_ + draining >= ctx_.limits.max_queues) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session holds the maximum of ", ctx_.limits.max_queues,
                     " queues (max_queues_per_session; ", draining,
                     " of them destroyed and still draining)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Buffer>> Session::FindRange(
    uint64_t buffer_id, absl::string_view id_field, uint64_t offset,
    uint64_t size, absl::string_view what) {
  auto buffer = Find<Buffer>(buffer_id, id_field);
  if (!buffer.ok()) return buffer;
  const uint64_t capacity = (*buffer)->size();
  if (offset > capacity || size > capacity - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        what, " [", offset, ", ", offset, " + ", size, ") is outside ",
        id_field, " ", buffer_id, " of ", capacity, " bytes"));
  }
  return buffer;
}

absl::StatusOr<uint64_t> Session::ClaimId(uint64_t requested, bool queue) {
  absl::MutexLock lock(&mu_);
  if (auto s = CheckQuota(queue); !s.ok()) return s;
  absl::StatusOr<uint64_t> id = objects_.Claim(requested, "id");
  if (!id.ok() || !queue) return id;
  if (auto s = ctx_.tenant->ReserveQueue(); !s.ok()) {
    objects_.Unclaim(*id);
    return s;
  }
  ++queue_count_;
  return id;
}

template <typename T>
absl::Status Session::FillClaim(uint64_t id, bool queue,
                                absl::StatusOr<std::shared_ptr<T>> object,
                                uint64_t memory_bytes) {
  absl::MutexLock lock(&mu_);
  if (object.ok() && !closed_ && !refused_) {
    objects_.Fill(id, *std::move(object));
    memory_bytes_ += memory_bytes;
    return absl::OkStatus();
  }
  objects_.Unclaim(id);
  if (queue && !closed_) {  // A teardown released every queue's charge.
    --queue_count_;
    ctx_.tenant->ReleaseQueue();
  }
  return object.ok() ? ClosedError() : object.status();
}

absl::StatusOr<uint64_t> Session::NewQueue(int32_t priority,
                                           uint64_t requested) {
  const auto& info = ctx_.device->info();
  if (priority > info.priority_least || priority < info.priority_greatest) {
    return absl::OutOfRangeError(
        absl::StrCat("priority ", priority, " is outside the device's range [",
                     info.priority_greatest, ", ", info.priority_least, "]"));
  }
  absl::StatusOr<uint64_t> id = ClaimId(requested, /*queue=*/true);
  if (!id.ok()) return id;
  backend::QueueOptions options;
  options.priority = ctx_.tenant->ClampPriority(priority);
  options.account = ctx_.tenant->account(owner_.device_id);
  options.session_key = ctx_.session_key;
  options.partition = ctx_.partition;
  options.on_error = [hub = notifications_,
                      queue_id = *id](const absl::Status& error) {
    v1::Notification n;
    auto* e = n.mutable_queue_error();
    e->set_queue_id(queue_id);
    e->mutable_error()->set_code(static_cast<int>(error.code()));
    e->mutable_error()->set_message(std::string(error.message()));
    hub->Publish(n);
  };
  if (absl::Status s = FillClaim(*id, /*queue=*/true,
                                 ctx_.device->CreateQueue(std::move(options)));
      !s.ok()) {
    return s;
  }
  return id;
}

// --- Queues ---------------------------------------------------------------

absl::Status Session::CreateQueue(const v1::CreateQueueRequest& req,
                                  v1::CreateQueueResponse* resp) {
  auto id = NewQueue(req.priority(), req.id());
  if (!id.ok()) return id.status();
  resp->set_queue_id(*id);
  return absl::OkStatus();
}

void Session::DestroyQueue(const v1::DestroyQueueRequest& req,
                           v1::DestroyQueueResponse*, Done done,
                           const Cancel& cancel) {
  if (req.queue_id() == default_queue_id_) {
    done(absl::FailedPreconditionError(
        "queue_id names the default queue; it lives as long as the "
        "session"));
    return;
  }
  absl::StatusOr<std::shared_ptr<Queue>> queue;
  {
    absl::MutexLock lock(&mu_);
    // Under the lock that removes it: a BeginCapture cannot slip between.
    if (CaptureOf(req.queue_id()) != nullptr) {
      queue = CaptureError(req.queue_id(), "DestroyQueue");
    } else {
      queue = objects_.Remove<Queue>(req.queue_id(), "queue_id");
    }
    if (queue.ok()) {
      --queue_count_;
      draining_queues_->fetch_add(1);
    }
  }
  if (!queue.ok()) {
    done(queue.status());
    return;
  }
  // Out of the table, but teardown must still reach it while it drains.
  const ParkedCalls::Id parked = parked_->ParkDestroy(*queue);
  if (parked == 0) (*queue)->Cancel(ClosedReason());
  // The callback holds the last reference: once the queue's pending work
  // has run, the caller hears of it and the device's cleanup thread
  // releases the native queue (never this callback's thread).
  // A caller that goes away hears nothing more; the queue still drains and
  // goes.
  auto timed = std::make_shared<TimedDone>(std::move(done), ctx_.timer);
  TimedDone::EndOnCancel(timed, cancel, QueueName(req.queue_id()));
  Queue* raw = queue->get();
  raw->OnIdle([queue = *std::move(queue), timed, parked_calls = parked_, parked,
               tenant = ctx_.tenant,
               draining = draining_queues_](absl::Status s) mutable {
    parked_calls->Unpark(parked);
    queue.reset();
    // Charged to the session and the tenant until drained.
    draining->fetch_sub(1);
    tenant->ReleaseQueue();
    // A queue failed by its work is still destroyed (OK); one that a
    // teardown or a device loss ended reports why.
    const bool ended = s.code() == absl::StatusCode::kCancelled ||
                       s.code() == absl::StatusCode::kAborted ||
                       s.code() == absl::StatusCode::kUnavailable;
    timed->Finish(ended ? s : absl::OkStatus());
  });
}

absl::Status Session::ClosedReason() {
  absl::MutexLock lock(&mu_);
  return ended_reason_.ok() ? absl::CancelledError(absl::StrCat(
                                  "session ", owner_.public_id, " was closed"))
                            : ended_reason_;
}

void Session::SynchronizeQueue(const v1::SynchronizeQueueRequest& req,
                               v1::SynchronizeQueueResponse*, Done done,
                               const Cancel& cancel) {
  auto queue = Find<Queue>(req.queue_id(), "queue_id");
  if (!queue.ok()) {
    done(queue.status());
    return;
  }
  if (absl::Status s = CheckNotCapturing(req.queue_id(), "SynchronizeQueue");
      !s.ok()) {
    done(std::move(s));
    return;
  }
  if ((*queue)->IsIdle()) {  // Fast path: nothing to wait for.
    done((*queue)->error());
    return;
  }
  auto charge = ChargeWait(ctx_.tenant);
  if (!charge.ok()) {
    done(charge.status());
    return;
  }
  auto timed = std::make_shared<TimedDone>(std::move(done), ctx_.timer);
  std::shared_ptr<backend::Watch> watch =
      (*queue)->OnIdle([timed, charge = *std::move(charge)](absl::Status s) {
        timed->Finish(std::move(s));
      });
  // As SynchronizeEvent: a timeout or a cancellation leaves no watch (and
  // no charge) behind.
  if (watch != nullptr) timed->OnFinish([watch] { watch->Cancel(); });
  TimedDone::Arm(timed, req.timeout_ms(), QueueName(req.queue_id()));
  TimedDone::EndOnCancel(timed, cancel, QueueName(req.queue_id()));
}

absl::Status Session::QueryQueue(const v1::QueryQueueRequest& req,
                                 v1::QueryQueueResponse* resp) {
  auto queue = Find<Queue>(req.queue_id(), "queue_id");
  if (!queue.ok()) return queue.status();
  if (absl::Status s = CheckNotCapturing(req.queue_id(), "QueryQueue");
      !s.ok()) {
    return s;
  }
  resp->set_idle((*queue)->IsIdle());
  absl::Status error = (*queue)->error();
  resp->mutable_error()->set_code(static_cast<int>(error.code()));
  resp->mutable_error()->set_message(std::string(error.message()));
  return absl::OkStatus();
}

absl::Status Session::WaitQueue(const v1::WaitQueueRequest& req,
                                v1::WaitQueueResponse*) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto other = Find<Queue>(req.other_queue_id(), "other_queue_id");
  if (!other.ok()) return other.status();
  if (absl::Status s = CheckNotCapturing(req.other_queue_id(),
                                         "WaitQueue on other_queue_id");
      !s.ok()) {
    return s;
  }
  if (*other == *queue) {
    return absl::InvalidArgumentError(
        "other_queue_id is queue_id itself: a queue cannot wait for itself");
  }
  return (*queue)->WaitQueue(**other);
}

// --- Events ---------------------------------------------------------------

absl::Status Session::CreateEvent(const v1::CreateEventRequest& req,
                                  v1::CreateEventResponse* resp) {
  auto id = ClaimId(req.id(), /*queue=*/false);
  if (!id.ok()) return id.status();
  if (absl::Status s = FillClaim(*id, /*queue=*/false,
                                 ctx_.device->CreateEvent(req.enable_timing()));
      !s.ok()) {
    return s;
  }
  resp->set_event_id(*id);
  return absl::OkStatus();
}

absl::Status Session::DestroyEvent(const v1::DestroyEventRequest& req,
                                   v1::DestroyEventResponse*) {
  absl::MutexLock lock(&mu_);
  return objects_.Remove<Event>(req.event_id(), "event_id").status();
}

absl::Status Session::RecordEvent(const v1::RecordEventRequest& req,
                                  v1::RecordEventResponse*) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto event = Find<Event>(req.event_id(), "event_id");
  if (!event.ok()) return event.status();
  return (*queue)->RecordEvent(*std::move(event));
}

absl::Status Session::WaitEvent(const v1::WaitEventRequest& req,
                                v1::WaitEventResponse*) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto event = Find<Event>(req.event_id(), "event_id");
  if (!event.ok()) return event.status();
  return (*queue)->WaitEvent(*std::move(event));
}

void Session::SynchronizeEvent(const v1::SynchronizeEventRequest& req,
                               v1::SynchronizeEventResponse*, Done done,
                               const Cancel& cancel) {
  auto event = Find<Event>(req.event_id(), "event_id");
  if (!event.ok()) {
    done(event.status());
    return;
  }
  auto charge = ChargeWait(ctx_.tenant);
  if (!charge.ok()) {
    done(charge.status());
    return;
  }
  auto timed = std::make_shared<TimedDone>(std::move(done), ctx_.timer);
  // An event completes OK even when teardown drops its record: teardown
  // finishes this call with its reason first.
  const ParkedCalls::Id parked = parked_->Park(timed);
  if (parked == 0) {
    timed->Finish(ClosedReason());
    return;
  }
  std::shared_ptr<backend::Watch> watch = (*event)->OnComplete(
      [timed, parked_calls = parked_, parked, charge = *std::move(charge)] {
        parked_calls->Unpark(parked);
        timed->Finish(absl::OkStatus());
      });
  // However the call ends (timed out, cancelled, its session torn down), it
  // leaves
  // nothing behind: the watch and its host-wait charge go, and the backend
  // forgets the watch unrun. Armed once watched (a no-op if it finished
  // already).
  if (watch != nullptr) {
    timed->OnFinish([watch, parked_calls = parked_, parked] {
      parked_calls->Unpark(parked);
      watch->Cancel();
    });
  }
  TimedDone::Arm(timed, req.timeout_ms(),
                 absl::StrCat("event_id ", req.event_id()));
  TimedDone::EndOnCancel(timed, cancel,
                         absl::StrCat("event_id ", req.event_id()));
}

absl::Status Session::QueryEvent(const v1::QueryEventRequest& req,
                                 v1::QueryEventResponse* resp) {
  auto event = Find<Event>(req.event_id(), "event_id");
  if (!event.ok()) return event.status();
  resp->set_complete((*event)->IsComplete());
  return absl::OkStatus();
}

absl::Status Session::EventElapsedTime(const v1::EventElapsedTimeRequest& req,
                                       v1::EventElapsedTimeResponse* resp) {
  auto start = Find<Event>(req.start_event_id(), "start_event_id");
  if (!start.ok()) return start.status();
  auto end = Find<Event>(req.end_event_id(), "end_event_id");
  if (!end.ok()) return end.status();
  auto ms = (*end)->ElapsedMillisSince(**start);
  if (!ms.ok()) return ms.status();
  resp->set_milliseconds(*ms);
  return absl::OkStatus();
}

// --- Flags ----------------------------------------------------------------

absl::Status Session::CreateFlag(const v1::CreateFlagRequest& req,
                                 v1::CreateFlagResponse* resp) {
  auto id = ClaimId(req.id(), /*queue=*/false);
  if (!id.ok()) return id.status();
  if (absl::Status s =
          FillClaim(*id, /*queue=*/false, ctx_.device->CreateFlag());
      !s.ok()) {
    return s;
  }
  resp->set_flag_id(*id);
  return absl::OkStatus();
}

absl::Status Session::DestroyFlag(const v1::DestroyFlagRequest& req,
                                  v1::DestroyFlagResponse*) {
  absl::StatusOr<std::shared_ptr<Flag>> flag;
  {
    absl::MutexLock lock(&mu_);
    flag = objects_.Remove<Flag>(req.flag_id(), "flag_id");
  }
  if (!flag.ok()) return flag.status();
  // Nobody can signal it any more: release its waiters rather than strand
  // them.
  (*flag)->Release(absl::CancelledError(
      absl::StrCat("flag_id ", req.flag_id(), " was destroyed")));
  return absl::OkStatus();
}

absl::Status Session::SignalFlag(const v1::SignalFlagRequest& req,
                                 v1::SignalFlagResponse*) {
  auto flag = Find<Flag>(req.flag_id(), "flag_id");
  if (!flag.ok()) return flag.status();
  (*flag)->Store(req.value());
  return absl::OkStatus();
}

absl::Status Session::ReadFlag(const v1::ReadFlagRequest& req,
                               v1::ReadFlagResponse* resp) {
  auto flag = Find<Flag>(req.flag_id(), "flag_id");
  if (!flag.ok()) return flag.status();
  resp->set_value((*flag)->Load());
  return absl::OkStatus();
}

void Session::WaitFlag(const v1::WaitFlagRequest& req,
                       v1::WaitFlagResponse* resp, Done done,
                       const Cancel& cancel) {
  auto flag = Find<Flag>(req.flag_id(), "flag_id");
  if (!flag.ok()) {
    done(flag.status());
    return;
  }
  if (auto s = CheckCondition(req.condition()); !s.ok()) {
    done(s);
    return;
  }
  auto charge = ChargeWait(ctx_.tenant);
  if (!charge.ok()) {
    done(charge.status());
    return;
  }
  auto timed = std::make_shared<TimedDone>(std::move(done), ctx_.timer);
  const Flag::WaitId wait_id =
      (*flag)->AsyncWait(req.value(), ToCondition(req.condition()),
                         [timed, resp, charge = *std::move(charge)](
                             absl::StatusOr<uint64_t> value) {
                           // Claim first: once the timeout has finished the
                           // call, `resp` may be gone.
                           if (!timed->Claim()) return;
                           if (value.ok()) resp->set_value(*value);
                           timed->FinishClaimed(value.status());
                         });
  // However the call ends, the flag forgets the wait (and its charge).
  timed->OnFinish([flag = *flag, wait_id] { flag->CancelWait(wait_id); });
  const std::string what = absl::StrCat("wait on flag_id ", req.flag_id());
  TimedDone::Arm(timed, req.timeout_ms(), what);
  TimedDone::EndOnCancel(timed, cancel, what);
}

absl::Status Session::WaitHostValue(const v1::WaitHostValueRequest& req,
                                    v1::WaitHostValueResponse*) {
  if (auto s = CheckCondition(req.condition()); !s.ok()) return s;
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto flag = Find<Flag>(req.flag_id(), "flag_id");
  if (!flag.ok()) return flag.status();
  return (*queue)->WaitFlag(*std::move(flag), req.value(),
                            ToCondition(req.condition()));
}

absl::Status Session::WriteFlag(const v1::WriteFlagRequest& req,
                                v1::WriteFlagResponse*) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto flag = Find<Flag>(req.flag_id(), "flag_id");
  if (!flag.ok()) return flag.status();
  return (*queue)->WriteFlag(*std::move(flag), req.value());
}

// --- Host functions -------------------------------------------------------

absl::Status Session::EnqueueHostFunc(const v1::EnqueueHostFuncRequest& req,
                                      v1::EnqueueHostFuncResponse*) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  v1::Notification n;
  n.mutable_host_func_reached()->set_queue_id(req.queue_id());
  n.mutable_host_func_reached()->set_callback_id(req.callback_id());
  return (*queue)->HostFunc(
      [hub = notifications_, n = std::move(n)] { hub->Publish(n); });
}

// --- Memory ---------------------------------------------------------------

absl::Status Session::AllocateBuffer(const v1::AllocateBufferRequest& req,
                                     v1::AllocateBufferResponse* resp) {
  backend::MemoryKind kind;
  switch (req.kind()) {
    case v1::MEMORY_KIND_UNSPECIFIED:
    case v1::MEMORY_KIND_DEVICE:
      kind = backend::MemoryKind::kDevice;
      break;
    case v1::MEMORY_KIND_HOST_PINNED:
      kind = backend::MemoryKind::kHostPinned;
      break;
    case v1::MEMORY_KIND_HOST_SHARED:
      if (ctx_.share_tickets == nullptr ||
          ctx_.share_tickets->socket_path().empty()) {
        return absl::FailedPreconditionError(
            "kind MEMORY_KIND_HOST_SHARED: sharing is off (the daemon serves "
            "no share socket: it needs a unix: --listen address or "
            "--share_socket)");
      }
      kind = backend::MemoryKind::kHostShared;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "kind ", static_cast<int>(req.kind()), " is not a MemoryKind"));
  }
  auto id = ClaimId(req.id(), /*queue=*/false);
  if (!id.ok()) return id.status();
  absl::StatusOr<std::shared_ptr<Buffer>> buffer =
      AllocateCharged(req.size_bytes(), kind);
  std::shared_ptr<const backend::SharedRegion> region;
  if (buffer.ok() && kind == backend::MemoryKind::kHostShared) {
    region = (*buffer)->shared_region();
    absl::StatusOr<std::string> ticket = ctx_.share_tickets->Issue(id_, region);
    if (ticket.ok()) {
      resp->set_share_ticket(*std::move(ticket));
    } else {
      region.reset();
      buffer = ticket.status();  // Its memory goes, then its charge.
    }
  }
  if (absl::Status s =
          FillClaim(*id, /*queue=*/false, std::move(buffer), req.size_bytes());
      !s.ok()) {
    if (region != nullptr) ctx_.share_tickets->Revoke(region.get());
    return s;
  }
  resp->set_buffer_id(*id);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Buffer>> Session::AllocateCharged(
    uint64_t size, backend::MemoryKind kind) {
  if (auto s = ctx_.tenant->ReserveMemory(size); !s.ok()) return s;
  auto buffer = ctx_.device->Allocate(size, kind);
  if (!buffer.ok()) {
    ctx_.tenant->ReleaseMemory(size);
    return buffer.status();
  }
  return ChargedBuffer(*std::move(buffer), ctx_.tenant, size);
}

absl::Status Session::FreeBuffer(const v1::FreeBufferRequest& req,
                                 v1::FreeBufferResponse*) {
  absl::StatusOr<std::shared_ptr<Buffer>> buffer;
  {
    absl::MutexLock lock(&mu_);
    buffer = objects_.Remove<Buffer>(req.buffer_id(), "buffer_id");
    if (buffer.ok()) memory_bytes_ -= (*buffer)->size();  // As added.
  }
  // A share ticket not yet redeemed dies with the id.
  if (buffer.ok() && ctx_.share_tickets != nullptr) {
    if (auto region = (*buffer)->shared_region(); region != nullptr) {
      ctx_.share_tickets->Revoke(region.get());
    }
  }
  // Work enqueued earlier holds its own references: the memory goes back to
  // the device, on its cleanup thread, when that work has finished, and the
  // tenant's quota with it (ChargedBuffer).
  return buffer.status();
}

absl::Status Session::WriteBuffer(const v1::WriteBufferRequest& req,
                                  v1::WriteBufferResponse*) {
  auto queue = FindLiveQueue(req.queue_id(), req.data().size());
  if (!queue.ok()) return queue.status();
  auto buffer = FindRange(req.buffer_id(), "buffer_id", req.offset(),
                          req.data().size(), "write");
  if (!buffer.ok()) return buffer.status();
  return (*queue)->Write(*std::move(buffer), req.offset(), req.data());
}

void Session::ReadBuffer(const v1::ReadBufferRequest& req,
                         v1::ReadBufferResponse* resp, Done done,
                         const Cancel& cancel) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) {
    done(queue.status());
    return;
  }
  auto buffer =
      FindRange(req.buffer_id(), "buffer_id", req.offset(), req.size(), "read");
  if (!buffer.ok()) {
    done(buffer.status());
    return;
  }
  // The backend calls the callback only when the read was enqueued; if it
  // refuses the read at once, `done` comes back for the refusal. A caller
  // that goes away is answered at once; the read's data, when it comes, is
  // dropped.
  auto timed = std::make_shared<TimedDone>(std::move(done), ctx_.timer);
  auto orphan = std::make_shared<OrphanedRead>(pending_results_, req.size());
  absl::Status enqueued = (*queue)->Read(
      *std::move(buffer), req.offset(), req.size(),
      [resp, timed, orphan](absl::StatusOr<std::string> data) mutable {
        orphan->Done();
        // Claim first: once a cancellation has finished the call, `resp`
        // may be gone.
        if (!timed->Claim()) return;
        if (data.ok()) *resp->mutable_data() = *std::move(data);
        timed->FinishClaimed(data.status());
      });
  if (!enqueued.ok()) {
    timed->Finish(std::move(enqueued));
    return;
  }
  // Shared, not weak (libstdc++'s last-reference fast path then races a
  // weak count released on another thread, as ThreadSanitizer sees it): a
  // read dropped unrun with its queue gives its bytes back when this goes
  // too, at the call's end.
  if (cancel != nullptr) {
    const CallCancel::Id id = cancel->OnCancel([orphan] { orphan->Orphan(); });
    timed->OnFinish([cancel, id] { cancel->Forget(id); });
  }
  TimedDone::EndOnCancel(timed, cancel,
                         absl::StrCat("read of buffer_id ", req.buffer_id()));
}

absl::Status Session::CopyBuffer(const v1::CopyBufferRequest& req,
                                 v1::CopyBufferResponse*) {
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto src = FindRange(req.src_buffer_id(), "src_buffer_id", req.src_offset(),
                       req.size(), "copy source");
  if (!src.ok()) return src.status();
  auto dst = FindRange(req.dst_buffer_id(), "dst_buffer_id", req.dst_offset(),
                       req.size(), "copy destination");
  if (!dst.ok()) return dst.status();
  return (*queue)->Copy(*std::move(src), req.src_offset(), *std::move(dst),
                        req.dst_offset(), req.size());
}

absl::Status Session::FillBuffer(const v1::FillBufferRequest& req,
                                 v1::FillBufferResponse*) {
  if (absl::Status s = CheckFillAlignment(req); !s.ok()) return s;
  auto queue = FindLiveQueue(req.queue_id());
  if (!queue.ok()) return queue.status();
  auto buffer =
      FindRange(req.buffer_id(), "buffer_id", req.offset(), req.size(), "fill");
  if (!buffer.ok()) return buffer.status();
  return (*queue)->Fill(*std::move(buffer), req.offset(), req.size(),
                        req.value());
}

// --- Kernels --------------------------------------------------------------

absl::Status Session::LaunchKernel(const v1::LaunchKernelRequest& req,
                                   v1::LaunchKernelResponse*) {
  auto kernel = ctx_.modules->Find(req.module(), req.kernel());
  if (!kernel.ok()) return kernel.status();
  const backend::KernelSignature& sig = (*kernel)->signature();
  auto config = CheckLaunchShape(req, ctx_.device->info(), sig);
  if (!config.ok()) return config.status();
  if (absl::Status s = CheckArgShapes(req, sig); !s.ok()) return s;
  if (!sig.checked() && !ctx_.tenant->allow_unchecked_kernels()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "kernel ", req.module(), ".", req.kernel(),
        " is unchecked (a BUFFER param declares no extent, so a launch could "
        "reach past its buffers); tenant '",
        ctx_.tenant->name(),
        "' may not launch unchecked kernels (allow_unchecked_kernels)"));
  }
  std::vector<backend::KernelArg> args;
  args.reserve(req.args_size());
  std::shared_ptr<Queue> queue;
  bool capturing = false;
  {
    // One lock for the queue and every buffer argument: this is the hot path.
    absl::MutexLock lock(&mu_);
    if (closed_ || refused_) return ClosedError();
    auto found = objects_.Find<Queue>(req.queue_id(), "queue_id");
    if (!found.ok()) return found.status();
    queue = *std::move(found);
    if (std::shared_ptr<GraphRecorder> recorder = CaptureOf(req.queue_id())) {
      queue = std::move(recorder);
      capturing = true;
    }
    for (int i = 0; i < req.args_size(); ++i) {
      const v1::KernelArg& arg = req.args(i);
      switch (arg.value_case()) {
        case v1::KernelArg::kBuffer: {
          std::shared_ptr<Buffer> buffer =
              objects_.Get<Buffer>(arg.buffer().buffer_id());
          if (buffer == nullptr) {
            return ObjectTable::UnknownError<Buffer>(
                arg.buffer().buffer_id(),
                absl::StrCat("args[", i, "].buffer_id"));
          }
          if (arg.buffer().offset() > buffer->size()) {
            return absl::OutOfRangeError(absl::StrCat(
                "args[", i, "].offset ", arg.buffer().offset(),
                " is past the end of buffer_id ", arg.buffer().buffer_id(),
                " (", buffer->size(), " bytes)"));
          }
          if (absl::Status s =
                  CheckBufferExtent(req, sig, *config, i, buffer->size());
              !s.ok()) {
            return s;
          }
          args.push_back(
              backend::BufferArg{std::move(buffer), arg.buffer().offset()});
          break;
        }
        case v1::KernelArg::kI32:
          args.push_back(arg.i32());
          break;
        case v1::KernelArg::kU32:
          args.push_back(arg.u32());
          break;
        case v1::KernelArg::kI64:
          args.push_back(arg.i64());
          break;
        case v1::KernelArg::kU64:
          args.push_back(arg.u64());
          break;
        case v1::KernelArg::kF32:
          args.push_back(arg.f32());
          break;
        case v1::KernelArg::kF64:
          args.push_back(arg.f64());
          break;
        case v1::KernelArg::kBytes:
          args.push_back(arg.bytes());
          break;
        case v1::KernelArg::VALUE_NOT_SET:
          break;
      }
    }
  }
  if (absl::Status s = CheckLive(*this, req.queue_id(), *queue); !s.ok()) {
    return s;
  }
  if (!capturing) {
    if (absl::Status s = ctx_.tenant->CheckEnqueue(0); !s.ok()) return s;
  }
  return queue->Launch(**kernel, *config, std::move(args));
}

// --- Teardown -------------------------------------------------------------

void Session::Refuse(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (closed_ || refused_) return;
  refused_ = true;
  ended_reason_ = reason;
}

void Session::Teardown(const absl::Status& reason) {
  absl::flat_hash_map<uint64_t, Object> objects;
  absl::flat_hash_map<uint64_t, std::shared_ptr<GraphRecorder>> captures;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    ended_reason_ = reason;
    objects = objects_.TakeAll();
    // Captures end with the session; what they recorded is dropped.
    captures = std::move(captures_);
    captures_.clear();
    ctx_.tenant->ReleaseQueue(queue_count_);
    queue_count_ = 0;
    memory_bytes_ = 0;  // The tenant is credited as the buffers go.
  }
  if (ctx_.share_tickets != nullptr) ctx_.share_tickets->Forget(id_);
  // 0. Calls no cancellation below would reach end now, with `reason`;
  //    queues already being destroyed are torn down with the rest.
  ParkedCalls::Taken parked = parked_->TakeAll();
  for (auto& call : parked.calls) call->Finish(reason);
  std::vector<std::shared_ptr<Queue>> queues = std::move(parked.destroying);
  for (auto& [id, object] : objects) {
    if (auto* queue = std::get_if<std::shared_ptr<Queue>>(&object)) {
      queues.push_back(*queue);
    }
  }
  // 1. Cancel the queues: work still held in the daemon is dropped, so
  //    nothing queued behind a wait released below runs where the backend
  //    can stop it; calls parked on the queues get `reason`.
  for (auto& queue : queues) queue->Cancel(reason);
  // 2. Release every wait: queues stalled on a flag, and host waits.
  for (auto& [id, object] : objects) {
    if (auto* flag = std::get_if<std::shared_ptr<Flag>>(&object)) {
      (*flag)->Release(reason);
    }
  }
  // 3. Let the queues drain, so the memory their work uses is returned
  //    before this returns. Bounded: a kernel that never ends must not hold
  //    the teardown thread forever (its queue is then released when the
  //    work is done, by the references that work holds).
  struct Drain {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu);
  };
  auto drain = std::make_shared<Drain>();
  {
    absl::MutexLock lock(&drain->mu);
    drain->left = queues.size();
  }
  for (auto& queue : queues) {
    queue->OnIdle([drain](absl::Status) {
      absl::MutexLock lock(&drain->mu);
      --drain->left;
    });
  }
  queues.clear();
  {
    absl::MutexLock lock(&drain->mu);
    auto drained = [&drain]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain->mu) {
      return drain->left == 0;
    };
    drain->mu.AwaitWithTimeout(absl::Condition(&drained), kTeardownDrainLimit);
  }
  // 4. Queues, events, flags and buffers: their native resources go back on
  //    the device's cleanup thread once no enqueued work holds them.
  objects.clear();
  ctx_.device->FlushCleanup();
  // 5. Nothing more will be published.
  notifications_->CloseAll();
}

}  // namespace gpustream::session
