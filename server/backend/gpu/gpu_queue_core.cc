// GpuQueueCore: the budget, the held FIFO and completion through markers.
#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_queue.h"

namespace gpustream::backend {
namespace {

// How often the dispatcher asks a busy stream for a fatal error (a faulted
// context writes no more markers, so they alone would never say).
constexpr absl::Duration kErrorPollPeriod = absl::Milliseconds(5);
// Work issued and not marked gets a marker after this long.
constexpr absl::Duration kMarkDelay = absl::Microseconds(500);

}  // namespace

// No lock: nobody else can reach a core being destroyed, and taking mu_
// here would order it after whatever lock the last owner holds.
uint32_t GpuQueueCore::sm_count() const {
  return partition_ != nullptr ? partition_->sm_count()
                               : device_->info().multiprocessor_count;
}

GpuQueueCore::~GpuQueueCore() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Normally settled (the device keeps a busy core until it is idle, and
  // fails stuck ones at shutdown); whatever is left counts as dropped.
  // member_ releases its admission when it goes.
  int64_t dropped = 0;
  for (const Op& op : held_) dropped += op.counted ? 1 : 0;
  ChargeInflight(-dropped);
  SettleLocked(issued_, /*ran=*/false);
  for (const EventMark& mark : event_marks_) {
    device_->events().Put(mark.event, /*timing=*/false, epoch_);
  }
  // The progress word is reused only once no marker can still write it
  // (after a failure some may: the slot then stays out until its slab goes,
  // with the context).
  if (GpuDevice::Pass hold(*device_, epoch_, GpuDevice::Pass::kMemory);
      hold && progress_.host != nullptr &&
      std::atomic_ref<uint64_t>(*progress_.host)
              .load(std::memory_order_acquire) == marked_) {
    device_->slots().Put(progress_);
  }
  if (destroyed_) return;
  // Nothing refers to the stream any more; CUDA releases a stream destroyed
  // with work pending once that work is done.
  ReleaseStream();
}

void GpuQueueCore::ReleaseStream() {
  // The partition's green context goes after its stream (the closure
  // holds it).
  device_->Release(
      epoch_, [device = device_, stream = stream_, partition = partition_] {
        device->Warn(device->driver().StreamDestroy(stream));
      });
}

void GpuQueueCore::JoinAdmission(uint64_t session_key) {
  session_key_ = session_key;
  member_ = device_->admission().Join(account_, session_key, weak_from_this());
}

absl::Status GpuQueueCore::Submit(Op op) {
  Callbacks callbacks;
  bool due = false;
  absl::Status status;
  bool held = false;
  {
    absl::MutexLock lock(&mu_);
    last_idle_ = op.idle;
    if (!error_.ok()) {
      // Skipped, as everything after a sticky error; its callback sees the
      // error once the work already on the stream has completed (so that
      // OnIdle still means idle). Never enqueued: not counted.
      if (op.done) {
        if (completed_ == issued_) {
          callbacks.emplace_back(std::move(op.done), error_,
                                 op.idle != nullptr);
        } else {
          pending_.push_back({issued_, std::move(op.done), /*skipped=*/true,
                              /*idle=*/op.idle != nullptr});
        }
      }
    } else {
      const bool counted = op.counted;
      if (counted) {
        ChargeInflight(1);
      }
      GpuAdmission& admission = device_->admission();
      bool now = held_.empty() && issued_ - completed_ < kBudget &&
                 (!op.ready || op.ready());
      const bool refused =
          now && admission.Admit(*member_, 1, issued_ - completed_,
                                 /*pumped=*/false) == 0;
      if (now && !refused) {
        status = IssueLocked(op, &callbacks);
        if (!status.ok()) {  // Not enqueued after all.
          admission.Release(*member_, 1);
          if (counted) {
            ChargeInflight(-1);
          }
          if (op.idle != nullptr && Lost()) {
            // An OnIdle's no-op on a lost context: held, for Fail() to
            // answer after the work before it (a read's data, an earlier
            // OnIdle), never before. Tracked: a failed device fails it.
            held_.push_back(std::move(op));
            held = true;
            TrackLocked();
            status = absl::OkStatus();
          } else {
            last_idle_ = nullptr;  // Its group never runs: none may join.
          }
        }
      } else {
        held_.push_back(std::move(op));
        held = true;
        TrackLocked();
        if (refused) WaitAdmissionLocked();
      }
    }
    due = DueLocked(std::move(callbacks));
  }
  if (held) device_->dispatcher().Wake();
  if (due) Deliver();
  return status;
}

absl::Status GpuQueueCore::IssueLocked(Op& op, Callbacks* out) {
  GpuDevice::Pass pass(*device_, epoch_);
  if (!pass) return device_->PassRefused();
  // Callers' threads (gRPC's) issue too: each needs the context current.
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  // Work handed to an idle stream starts no earlier than now.
  const bool idle = issued_ == completed_;
  const int64_t now = idle ? MonotonicNanos() : 0;
  if (absl::Status s = op.issue(*this); !s.ok()) return s;
  if (idle) busy_start_ns_ = now;
  ++issued_;
  if (!op.counted) uncounted_.push_back(issued_);
  if (op.kernel) kernel_issued_ = issued_;
  last_issue_ = absl::Now();
  if (op.done) {
    pending_.push_back({issued_, std::move(op.done), /*skipped=*/false,
                        /*idle=*/op.idle != nullptr});
  }
  if (!partly_.ok()) {
    // Only now: the held work the error drops is answered after this op.
    absl::Status partly = std::exchange(partly_, absl::OkStatus());
    StickLocked(partly, out);
  }
  // Polled from now on: unmarked work gets marked, a stream that faults is
  // noticed (its markers never come back).
  TrackLocked();
  if (op.prompt || issued_ - marked_ >= kMarkerEvery) {
    // The work is on the stream whatever happens to the marker: a marker
    // the driver refuses fails the queue (or, fatal, the device), which
    // completes the pending work with the error.
    if (absl::Status s = MarkLocked(op.prompt);
        !s.ok() && s.code() != absl::StatusCode::kAborted) {
      StickLocked(s, out);
    }
  }
  return absl::OkStatus();
}

void GpuQueueCore::IssuedPartly(absl::Status status) {
  mu_.AssertHeld();
  if (partly_.ok()) partly_ = std::move(status);
}

void GpuQueueCore::TrackLocked() {
  if (tracked_) return;
  tracked_ = true;
  device_->Track(shared_from_this());
}

absl::Status GpuQueueCore::MarkLocked(bool prompt) {
  if (marked_ == issued_) return absl::OkStatus();
  GpuDevice::Pass pass(*device_, epoch_);
  if (!pass) return device_->PassRefused();
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  const GpuDriver& driver = device_->driver();
  if (progress_.host != nullptr) {
    if (absl::Status s = device_->Check(
            driver.StreamWriteValue64(stream_, progress_.device, issued_));
        !s.ok()) {
      return s;
    }
  } else {
    // Of epoch_: the pass above keeps the context from being reset.
    auto event = device_->events().Get(/*timing=*/false);
    if (!event.ok()) return event.status();
    if (absl::Status s =
            device_->Check(driver.EventRecord(event->event, stream_));
        !s.ok()) {
      device_->events().Put(event->event, /*timing=*/false, event->epoch);
      return s;
    }
    event_marks_.push_back({issued_, event->event});
  }
  marked_ = issued_;
  if (prompt) {
    prompt_count_ = issued_;
    prompt_ns_ = MonotonicNanos();
    // A dispatcher sleeping a whole polling period must poll sooner now
    // (on the dispatcher itself, its tick computes the period anyway).
    if (!device_->dispatcher().InDispatcher()) device_->dispatcher().Wake();
  }
  return absl::OkStatus();
}

uint64_t GpuQueueCore::LandedLocked() {
  uint64_t landed = completed_;
  if (progress_.host != nullptr) {
    // Not after a reset freed the word (Fail() completes the rest).
    if (GpuDevice::Pass hold(*device_, epoch_, GpuDevice::Pass::kMemory);
        hold) {
      landed = std::atomic_ref<uint64_t>(*progress_.host)
                   .load(std::memory_order_acquire);
    }
    return landed;
  }
  GpuDevice::Pass pass(*device_, epoch_);
  if (!pass) return landed;  // Failed: Fail() completes the rest.
  while (!event_marks_.empty()) {
    const EventMark& mark = event_marks_.front();
    // Not ready, or an error: the stream query in Tick reports errors.
    absl::StatusOr<bool> done = device_->driver().EventQuery(mark.event);
    if (!done.ok() || !*done) break;
    landed = mark.count;
    device_->events().Put(mark.event, /*timing=*/false, epoch_);
    event_marks_.pop_front();
  }
  return landed;
}

void GpuQueueCore::PumpLocked(Callbacks* out, bool pumped) {
  GpuAdmission& admission = device_->admission();
  uint64_t granted = 0;  // Admitted and not issued yet.
  bool asked = false;
  bool refused = false;
  while (error_.ok() && !held_.empty() && issued_ - completed_ < kBudget) {
    if (Op& front = held_.front(); front.ready && !front.ready()) break;
    if (granted == 0) {
      // A turn is one grant: then back to the end of the line.
      if (pumped && asked) {
        refused = true;
        break;
      }
      const uint64_t room = kBudget - (issued_ - completed_);
      const uint64_t want = std::min<uint64_t>(
          {static_cast<uint64_t>(held_.size()), room, GpuAdmission::kGrant});
      granted = admission.Admit(*member_, want, issued_ - completed_,
                                /*pumped=*/pumped && !asked);
      asked = true;
      if (granted == 0) {
        refused = true;
        break;
      }
    }
    // Off the FIFO first: a refused marker makes IssueLocked drop the
    // rest of it.
    Op op = std::move(held_.front());
    held_.pop_front();
    if (absl::Status s = IssueLocked(op, out); !s.ok()) {
      held_.push_front(std::move(op));
      StickLocked(s, out);
      break;
    }
    --granted;
  }
  if (granted != 0) admission.Release(*member_, granted);
  if (refused && error_.ok()) {
    WaitAdmissionLocked();
  } else if (held_.empty()) {
    UnwaitAdmissionLocked();  // Issued through its floor meanwhile.
  }
  if (marked_ != issued_ && !held_.empty()) {
    // Held work waits for room: make sure progress comes back.
    if (absl::Status s = MarkLocked(/*prompt=*/false); !s.ok()) {
      StickLocked(s, out);
    }
  }
}

uint64_t GpuQueueCore::SettleLocked(uint64_t upto, bool ran) {
  if (upto <= completed_) return 0;
  const uint64_t n = upto - completed_;
  uint64_t internal = 0;
  while (!uncounted_.empty() && uncounted_.front() <= upto) {
    uncounted_.pop_front();
    ++internal;
  }
  const uint64_t commands = n - internal;
  ChargeInflight(-static_cast<int64_t>(commands));
  if (ran) {
    account_->commands_completed.fetch_add(commands, std::memory_order_relaxed);
  }
  return n;
}

void GpuQueueCore::StickLocked(const absl::Status& status, Callbacks* out) {
  const bool first = error_.ok();
  if (first) error_ = status;
  // The queue's error is news, not work: it does not keep the queue busy.
  if (first && on_error_ && !cancelled_) {
    out->emplace_back(
        [self = shared_from_this()](absl::Status s) { self->on_error_(s); },
        status, /*idle=*/true);
  }
  int64_t dropped = 0;
  for (Op& op : held_) {
    if (op.counted) ++dropped;
    if (!op.done) continue;
    if (completed_ == issued_) {
      out->emplace_back(std::move(op.done), error_, op.idle != nullptr);
    } else {
      // Skipped, answered once the work before it has completed (as in
      // Submit): never ahead of a pending read, and an OnIdle group
      // dropped here still means idle for those that join it.
      pending_.push_back({issued_, std::move(op.done), /*skipped=*/true,
                          /*idle=*/op.idle != nullptr});
    }
  }
  held_.clear();
  ChargeInflight(-dropped);
  UnwaitAdmissionLocked();
}

std::shared_ptr<Watch> GpuQueueCore::OnIdle(
    absl::AnyInvocable<void(absl::Status)> done) {
  auto watch = std::make_shared<WatchFor<absl::Status>>(std::move(done));
  bool idle;
  {
    absl::MutexLock lock(&mu_);
    // Nothing submitted since the last OnIdle's no-op, and its watches have
    // not run: it serves this one too (the work it waits for is the same),
    // and answers it after them, even once the queue is idle.
    if (last_idle_ != nullptr) {
      absl::MutexLock group_lock(&last_idle_->mu);
      if (!last_idle_->ran) {
        SweepCancelled(last_idle_->watches, last_idle_->swept_size,
                       [](auto& w) { return w.get(); });
        last_idle_->watches.push_back(watch);
        return watch;
      }
    }
    idle = IdleLocked();
  }
  if (idle) {
    watch->Run(error());
    return nullptr;
  }
  // A no-op behind everything enqueued so far, marked at once.
  auto group = std::make_shared<IdleGroup>();
  {
    absl::MutexLock group_lock(&group->mu);
    group->watches.push_back(watch);
  }
  Op op;
  op.issue = [](GpuQueueCore&) { return absl::OkStatus(); };
  op.done = [self = shared_from_this(), group](absl::Status s) {
    std::vector<std::shared_ptr<WatchFor<absl::Status>>> watches;
    {
      absl::MutexLock lock(&group->mu);
      group->ran = true;
      watches.swap(group->watches);
    }
    // Work that completed before a sticky error still reports it.
    const absl::Status status = s.ok() ? self->error() : s;
    for (auto& w : watches) w->Run(status);
  };
  op.prompt = true;
  op.counted = false;  // Not a command of the client's.
  op.idle = group;
  if (absl::Status s = Submit(std::move(op)); !s.ok()) watch->Run(s);
  return watch;
}

void GpuQueueCore::Cancel(const absl::Status& reason) {
  bool due = false;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    Callbacks callbacks;
    StickLocked(reason, &callbacks);
    due = DueLocked(std::move(callbacks));
  }
  if (due) Deliver();
}

bool GpuQueueCore::Fail(const absl::Status& status) {
  bool due = false;
  bool kernel_in_flight;
  {
    absl::MutexLock lock(&mu_);
    // What the markers say landed, read once more (a progress word is host
    // memory, readable while the device is failed): a kernel that finished
    // before the fault is no suspect.
    kernel_in_flight = kernel_issued_ > std::max(completed_, LandedLocked());
    // No marker will come back from a failed context.
    for (const EventMark& mark : event_marks_) {
      device_->events().Put(mark.event, /*timing=*/false, epoch_);
    }
    event_marks_.clear();
    // Whether it ran is unknown: dropped.
    device_->admission().Release(*member_,
                                 SettleLocked(issued_, /*ran=*/false));
    completed_ = issued_;
    marked_ = issued_;
    // In issue order: the pending callbacks, then the held ops' (nothing
    // is outstanding now: StickLocked answers them too).
    Callbacks callbacks;
    for (Pending& p : pending_) {
      callbacks.emplace_back(std::move(p.done), status, p.idle);
    }
    pending_.clear();
    StickLocked(status, &callbacks);
    due = DueLocked(std::move(callbacks));
    MaybeDestroyLocked();
  }
  if (due) Deliver();
  return kernel_in_flight;
}

bool GpuQueueCore::IsIdle() {
  absl::MutexLock lock(&mu_);
  // OnIdle watches not yet answered: they answer first (a SynchronizeQueue
  // before what asks now).
  if (last_idle_ != nullptr) {
    absl::MutexLock group_lock(&last_idle_->mu);
    if (!last_idle_->ran) return false;
  }
  if (IdleLocked()) return true;
  // Callbacks not yet run (a host function, a read's delivery) mean busy,
  // on a lost context too (Fail() runs them).
  if (!held_.empty() || !pending_.empty() || delivering_ != 0) return false;
  GpuDevice::Pass pass(*device_, epoch_);
  if (!pass || !device_->MakeCurrent().ok()) {
    return !pass;  // A failed or reset context runs nothing more.
  }
  // Markers lag; the stream itself knows.
  absl::StatusOr<bool> done = device_->driver().StreamQuery(stream_);
  return done.ok() && *done;
}

bool GpuQueueCore::Lost() const {
  return device_->failed() || device_->epoch() != epoch_;
}

absl::Status GpuQueueCore::error() {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  // The device fails its queues on its dispatcher, a moment after it
  // learns of the failure. In that moment IsIdle() already says idle (a
  // failed context runs nothing more): the failure must be this queue's
  // error too, or an idle queue would report that its faulted work ran.
  if (Lost()) return device_->PassRefused();
  return error_;
}

void GpuQueueCore::Retire() {
  absl::MutexLock lock(&mu_);
  retired_ = true;
  // Work still running keeps its callbacks (a read, a host function) and
  // what it uses: the device holds this state until the stream is idle.
  if (!IdleLocked()) device_->HoldUntilIdle(shared_from_this());
  MaybeDestroyLocked();
}

void GpuQueueCore::MaybeDestroyLocked() {
  if (destroyed_ || !retired_ || !IdleLocked()) return;
  destroyed_ = true;
  device_->LetGo(this);
  ReleaseStream();
}

void GpuQueueCore::Completed(uint64_t count, int64_t end_ns) {
  bool due = false;
  {
    absl::MutexLock lock(&mu_);
    if (count <= completed_) return;
    // The batch ran from its issue to an idle stream, or from the previous
    // batch's completion, until its marker was seen: an approximation (the
    // daemon cannot see inside a batch, and sees a marker up to a polling
    // period late; time parked on a device-side wait counts as busy).
    const int64_t start = std::max(busy_start_ns_, last_complete_ns_);
    last_complete_ns_ = std::max(last_complete_ns_, end_ns);
    device_->admission().Completed(*member_, SettleLocked(count, /*ran=*/true),
                                   start, end_ns);
    completed_ = count;
    // Work that ran reports OK, unless teardown cancelled the queue (the
    // caller waited for an outcome that no longer matters).
    const absl::Status ran = cancelled_ ? error_ : absl::OkStatus();
    Callbacks callbacks;
    while (!pending_.empty() && pending_.front().at <= completed_) {
      Pending& p = pending_.front();
      callbacks.emplace_back(std::move(p.done), p.skipped ? error_ : ran,
                             p.idle);
      pending_.pop_front();
    }
    PumpLocked(&callbacks);
    due = DueLocked(std::move(callbacks));
    MaybeDestroyLocked();
  }
  if (due) Deliver();  // On the dispatcher: runs them now.
}

void GpuQueueCore::WaitAdmissionLocked() {
  waiting_admission_ = true;
  device_->admission().Wait(*member_);
}

void GpuQueueCore::UnwaitAdmissionLocked() {
  if (!waiting_admission_) return;
  waiting_admission_ = false;
  device_->admission().Unwait(*member_);
}

void GpuQueueCore::PumpAdmitted() {
  bool due = false;
  {
    absl::MutexLock lock(&mu_);
    waiting_admission_ = false;  // The pump took it off the line.
    Callbacks callbacks;
    PumpLocked(&callbacks, /*pumped=*/true);
    due = DueLocked(std::move(callbacks));
    MaybeDestroyLocked();
  }
  if (due) Deliver();
}

absl::Duration GpuQueueCore::Tick() {
  uint64_t landed = 0;
  {
    absl::MutexLock lock(&mu_);
    landed = LandedLocked();
    if (landed <= completed_) landed = 0;
  }
  if (landed != 0) Completed(landed, MonotonicNanos());
  bool due = false;
  absl::Duration next = absl::InfiniteDuration();
  {
    absl::MutexLock lock(&mu_);
    Callbacks callbacks;
    PumpLocked(&callbacks);
    const absl::Time now = absl::Now();
    if (marked_ != issued_ && now - last_issue_ >= kMarkDelay) {
      if (absl::Status s = MarkLocked(/*prompt=*/false); !s.ok()) {
        StickLocked(s, &callbacks);
      }
    }
    if (GpuDevice::Pass pass(*device_, epoch_);
        pass && completed_ != issued_ &&
        now - last_query_ >= kErrorPollPeriod) {
      last_query_ = now;
      absl::StatusOr<bool> done = device_->driver().StreamQuery(stream_);
      if (!done.ok()) {
        // Check() fails the device for a fatal code, which fails this
        // queue too (after we let go of mu_).
        const bool fatal = done.status().code() == absl::StatusCode::kAborted;
        absl::Status s = device_->Check(done.status());
        if (!fatal) StickLocked(s, &callbacks);
      }
    }
    due = DueLocked(std::move(callbacks));
    MaybeDestroyLocked();
    if (IdleLocked() || destroyed_) {
      tracked_ = false;  // Submit tracks it again when needed.
    } else if (prompt_count_ > completed_) {
      // Someone awaits a marker: poll at an eighth of its age so far.
      const absl::Duration age =
          absl::Nanoseconds(MonotonicNanos() - prompt_ns_);
      next = std::clamp(age / 8, kPromptPollPeriod, kPollPeriod);
    } else {
      next = kPollPeriod;
    }
  }
  if (due) Deliver();
  return next;
}

bool GpuQueueCore::DueLocked(Callbacks callbacks) {
  if (callbacks.empty()) return false;
  Delivery delivery{std::move(callbacks)};
  // OnIdle's callbacks at the end run once the queue is idle again: a
  // SynchronizeQueue they answer may be followed at once by a QueryQueue,
  // which must say idle.
  for (size_t i = delivery.callbacks.size(); i > 0; --i) {
    if (!delivery.callbacks[i - 1].idle) {
      delivery.busy = i;
      break;
    }
  }
  if (delivery.busy != 0) ++delivering_;
  to_deliver_.push_back(std::move(delivery));
  return true;
}

void GpuQueueCore::Deliver() {
  if (device_->dispatcher().InDispatcher()) {
    Drain();
    return;
  }
  // The post keeps the core until it has run (its deliveries count in it).
  device_->dispatcher().Post([self = shared_from_this()] { self->Drain(); });
}

void GpuQueueCore::Drain() {
  // A callback may drop the last reference to the queue.
  const std::shared_ptr<GpuQueueCore> keep = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    // Draining already (this thread, in a callback that enqueued here; or,
    // once the dispatcher has stopped, another thread): the drain runs
    // these too, after what it is running.
    if (draining_ || to_deliver_.empty()) return;
    draining_ = true;
  }
  while (true) {
    Delivery next;
    {
      absl::MutexLock lock(&mu_);
      if (to_deliver_.empty()) {
        draining_ = false;
        return;
      }
      next = std::move(to_deliver_.front());
      to_deliver_.pop_front();
    }
    // Each callback goes as soon as it has run: what it held (buffers whose
    // memory a later callback's caller expects back) is released in order.
    for (size_t i = 0; i < next.callbacks.size(); ++i) {
      Callback& c = next.callbacks[i];
      c.done(std::move(c.status));
      c.done = nullptr;
      if (i + 1 == next.busy) {
        absl::MutexLock lock(&mu_);
        --delivering_;
        MaybeDestroyLocked();
      }
    }
  }
}

}  // namespace gpustream::backend
