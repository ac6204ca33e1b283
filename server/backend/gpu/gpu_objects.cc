// GPU buffers, events and flags.
#include "server/backend/gpu/gpu_objects.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_queue.h"

namespace gpustream::backend {

// --- Buffers ----------------------------------------------------------------

GpuBuffer::~GpuBuffer() {
  // Runs on the cleanup thread (the device's deleter puts it there).
  if (epoch_ != device_->epoch()) return;  // Its context is gone, and all.
  if (!device_->MakeCurrent().ok()) {
    // A HOST_SHARED region's registration may still stand: the driver may
    // still reach its pages, so they are never unmapped (kept until the
    // process ends) rather than freed under it.
    if (region_ != nullptr) {
      static absl::Mutex mu;
      static auto* kept = new std::vector<std::shared_ptr<SharedRegion>>;
      absl::MutexLock lock(&mu);
      kept->push_back(region_);
    }
    return;
  }
  if (kind_ == MemoryKind::kDevice) {
    device_->FreeDevice(ptr_, pooled_);
    return;
  }
  // Both synchronize the context (cuda.h): they wait for work already
  // issued, which never includes a wait that nothing will satisfy
  // (WaitFlag); not during a capture (GpuDevice::capture_mu).
  absl::WriterMutexLock no_capture(&device_->capture_mu());
  device_->Warn(kind_ == MemoryKind::kHostShared
                    ? device_->driver().HostUnregister(host_)
                    : device_->driver().HostFree(host_));
}

// --- Events -----------------------------------------------------------------

GpuEventPoint::~GpuEventPoint() { device->events().Put(event, timing, epoch); }

bool PointComplete(GpuDevice& device, GpuEventPoint& point) {
  if (point.skipped.load(std::memory_order_acquire)) return true;
  if (!point.issued.load(std::memory_order_acquire)) return device.failed();
  GpuDevice::Pass pass(device, point.epoch);
  if (!pass || !device.MakeCurrent().ok()) return true;  // Never will.
  absl::StatusOr<bool> done = device.driver().EventQuery(point.event);
  if (done.ok()) return *done;
  device.Warn(done.status());
  return true;
}

absl::StatusOr<std::shared_ptr<GpuEventPoint>> GpuEvent::NewRecord() {
  auto event = device_->events().Get(timing_);
  if (!event.ok()) return event.status();
  auto point = std::make_shared<GpuEventPoint>(device_, event->event, timing_,
                                               event->epoch);
  absl::MutexLock lock(&mu_);
  latest_ = point;
  return point;
}

std::shared_ptr<GpuEventPoint> GpuEvent::Latest() {
  absl::MutexLock lock(&mu_);
  return latest_;
}

bool GpuEvent::IsComplete() {
  std::shared_ptr<GpuEventPoint> point = Latest();
  return point == nullptr || PointComplete(*device_, *point);
}

std::shared_ptr<Watch> GpuEvent::OnComplete(absl::AnyInvocable<void()> done) {
  std::shared_ptr<GpuEventPoint> point = Latest();
  if (point == nullptr || PointComplete(*device_, *point)) {
    done();
    return nullptr;
  }
  return device_->WatchEvent(std::move(point), std::move(done));
}

absl::StatusOr<float> GpuEvent::ElapsedMillisSince(Event& start_event) {
  auto& start = static_cast<GpuEvent&>(start_event);
  if (!timing_ || !start.timing_) {
    return absl::FailedPreconditionError(
        "both events must be created with enable_timing");
  }
  // A record that never reached a stream (skipped, dropped with its
  // queue) or was made in a context since reset counts as complete for
  // waiters, but has no time: never ask the driver about it.
  auto timed = [this](const std::shared_ptr<GpuEventPoint>& point) {
    return point != nullptr &&
           !point->skipped.load(std::memory_order_acquire) &&
           point->issued.load(std::memory_order_acquire) &&
           point->epoch == device_->epoch() && PointComplete(*device_, *point);
  };
  std::shared_ptr<GpuEventPoint> begin = start.Latest();
  if (!timed(begin)) {
    return absl::FailedPreconditionError(
        "start_event_id has not been recorded and completed");
  }
  std::shared_ptr<GpuEventPoint> end = Latest();
  if (!timed(end)) {
    return absl::FailedPreconditionError(
        "end_event_id has not been recorded and completed");
  }
  absl::ReaderMutexLock reset_lock(&device_->reset_mu());
  // A failed device completes every record (PointComplete) without timing
  // it; its context may be being reset.
  if (device_->failed()) return device_->failure();
  if (begin->epoch != device_->epoch() || end->epoch != device_->epoch()) {
    return absl::FailedPreconditionError(
        "the events were recorded before the device was reset");
  }
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  absl::StatusOr<float> ms =
      device_->driver().EventElapsedMillis(begin->event, end->event);
  if (!ms.ok()) return device_->Check(ms.status());
  return *ms;
}

// --- Flags ------------------------------------------------------------------

GpuFlag::GpuFlag(GpuDevice* device, GpuSlotAllocator::Slot slot)
    : device_(device), slot_(slot) {
  std::atomic_ref<uint64_t>(*slot_.host).store(0, std::memory_order_release);
}

GpuFlag::~GpuFlag() { device_->slots().Put(slot_); }

uint64_t GpuFlag::Load() {
  // The slot went with a reset context: such a flag reads 0.
  GpuDevice::Pass hold(*device_, slot_.epoch, GpuDevice::Pass::kMemory);
  if (!hold) return 0;
  return std::atomic_ref<uint64_t>(*slot_.host).load(std::memory_order_acquire);
}

void GpuFlag::Store(uint64_t value) {
  Sweep();  // Device writes that landed came before this store.
  std::vector<uint64_t> landed;
  {
    // Not across the notifications below (callbacks of other layers).
    GpuDevice::Pass hold(*device_, slot_.epoch, GpuDevice::Pass::kMemory);
    // The slot went with a reset context: nothing to store into, and
    // nobody waits (the flag was released with its session).
    if (!hold) return;
    // Under mu_, so that host_stored_ is the value this store replaces
    // unless a device write landed in between.
    absl::MutexLock lock(&mu_);
    // Release: data the host wrote before signalling is visible to work
    // the signal releases.
    const uint64_t replaced = std::atomic_ref<uint64_t>(*slot_.host)
                                  .exchange(value, std::memory_order_acq_rel);
    // The value replaced was a device write's if one in flight wrote it:
    // it has landed, though its event may not have completed yet. Unless
    // the host had stored that value itself: then the write may still be
    // coming, and stays in flight until its event says (Sweep).
    for (auto it = in_flight_.begin();
         replaced != host_stored_ && it != in_flight_.end(); ++it) {
      if (it->value == replaced) {
        Remember(replaced);
        landed.push_back(replaced);
        in_flight_.erase(it);
        break;
      }
    }
    host_stored_ = value;
    Remember(value);
  }
  for (uint64_t v : landed) waiters_.Notify(v);
  waiters_.Notify(value);
  device_->dispatcher().Wake();  // Waits the daemon holds may go.
}

Flag::WaitId GpuFlag::AsyncWait(uint64_t value, WaitCondition condition,
                                WaitDone done) {
  return waiters_.Add([this] { return Load(); }, value, condition,
                      std::move(done));
}

void GpuFlag::Release(const absl::Status& reason) {
  if (!waiters_.Release(reason)) return;
  device_->dispatcher().Wake();  // Waits the daemon holds on it go.
}

void GpuFlag::Remember(uint64_t value) {
  for (const std::shared_ptr<Watch>& w : watches_) {
    if (Satisfies(value, w->value, w->condition)) {
      w->seen.store(true, std::memory_order_release);
    }
  }
}

std::shared_ptr<GpuFlag::Watch> GpuFlag::WatchFor(uint64_t value,
                                                  WaitCondition condition) {
  Sweep();  // A write that landed before the wait is not "from now on".
  auto watch = std::make_shared<Watch>();
  watch->value = value;
  watch->condition = condition;
  absl::MutexLock lock(&mu_);
  watches_.push_back(watch);
  return watch;
}

void GpuFlag::Unwatch(const Watch* watch) {
  absl::MutexLock lock(&mu_);
  std::erase_if(watches_, [watch](const std::shared_ptr<Watch>& w) {
    return w.get() == watch;
  });
}

void GpuFlag::WriteIssued(uint64_t value,
                          std::shared_ptr<GpuEventPoint> point) {
  {
    absl::MutexLock lock(&mu_);
    in_flight_.push_back({value, std::move(point)});
  }
  device_->dispatcher().Wake();  // Waits held for such a write may go.
}

void GpuFlag::WriteDone(const GpuEventPoint* point) {
  Sweep();  // It, if it landed.
  {
    // Still here: it never ran (dropped before the stream reached it, or
    // the device failed). Nobody may wait on it any more.
    absl::MutexLock lock(&mu_);
    std::erase_if(in_flight_, [point](const InFlight& w) {
      return w.point.get() == point;
    });
  }
  device_->dispatcher().Wake();
}

void GpuFlag::UntrackedWriteRan(uint64_t value) {
  Sweep();  // Writes before it landed before it.
  {
    absl::MutexLock lock(&mu_);
    Remember(value);
  }
  waiters_.Notify(value);
  device_->dispatcher().Wake();  // Waits the daemon holds may go.
}

bool GpuFlag::Landed(const GpuEventPoint& point) {
  if (!point.issued.load(std::memory_order_acquire)) return false;
  GpuDevice::Pass pass(*device_, point.epoch);
  if (!pass || !device_->MakeCurrent().ok()) return false;
  absl::StatusOr<bool> done = device_->driver().EventQuery(point.event);
  return done.ok() && *done;
}

void GpuFlag::Sweep() {
  std::vector<uint64_t> landed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (Landed(*it->point)) {
        Remember(it->value);
        landed.push_back(it->value);
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (uint64_t value : landed) waiters_.Notify(value);
}

std::shared_ptr<GpuEventPoint> GpuFlag::InFlightSatisfying(
    uint64_t value, WaitCondition condition) {
  // Without Sweep(): this runs under queue locks, where host waiters must
  // not be called. A write that landed is skipped, not moved.
  absl::MutexLock lock(&mu_);
  for (const InFlight& w : in_flight_) {
    if (Satisfies(w.value, value, condition) && !Landed(*w.point)) {
      return w.point;
    }
  }
  return nullptr;
}

}  // namespace gpustream::backend
