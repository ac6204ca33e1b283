// CUDA buffers, events and flags.
#include "server/backend/cuda/cuda_objects.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/cuda/cuda_device.h"
#include "server/backend/cuda/cuda_queue.h"

namespace gpustream::backend {

// --- Buffers ----------------------------------------------------------------

CudaBuffer::~CudaBuffer() {
  // Runs on the cleanup thread (the device's deleter puts it there).
  if (epoch_ != device_->epoch() || !device_->MakeCurrent().ok()) return;
  const CudaDriver& driver = device_->driver();
  if (kind_ == MemoryKind::kDevice) {
    device_->FreeDevice(ptr_, pooled_);
  } else {
    // Synchronizes the context (cuda.h): it waits for work already issued,
    // which never includes a wait that nothing will satisfy (WaitFlag).
    device_->Warn(driver.cuMemFreeHost(host_), "cuMemFreeHost");
  }
}

// --- Events -----------------------------------------------------------------

CudaEventPoint::~CudaEventPoint() {
  device->events().Put(event, timing, epoch);
}

bool PointComplete(CudaDevice& device, CudaEventPoint& point) {
  if (point.skipped.load(std::memory_order_acquire)) return true;
  if (!point.issued.load(std::memory_order_acquire)) return device.failed();
  CudaDevice::Pass pass(device, point.epoch);
  if (!pass || !device.MakeCurrent().ok()) return true;  // Never will.
  CUresult r = device.driver().cuEventQuery(point.event);
  if (r == CUDA_ERROR_NOT_READY) return false;
  device.Warn(r, "cuEventQuery");
  return true;
}

absl::StatusOr<std::shared_ptr<CudaEventPoint>> CudaEvent::NewRecord() {
  auto event = device_->events().Get(timing_);
  if (!event.ok()) return event.status();
  auto point = std::make_shared<CudaEventPoint>(device_, event->event, timing_,
                                                event->epoch);
  absl::MutexLock lock(&mu_);
  latest_ = point;
  return point;
}

std::shared_ptr<CudaEventPoint> CudaEvent::Latest() {
  absl::MutexLock lock(&mu_);
  return latest_;
}

bool CudaEvent::IsComplete() {
  std::shared_ptr<CudaEventPoint> point = Latest();
  return point == nullptr || PointComplete(*device_, *point);
}

void CudaEvent::OnComplete(absl::AnyInvocable<void()> done) {
  std::shared_ptr<CudaEventPoint> point = Latest();
  if (point == nullptr || PointComplete(*device_, *point)) {
    done();
    return;
  }
  device_->WatchEvent(std::move(point), std::move(done));
}

absl::StatusOr<float> CudaEvent::ElapsedMillisSince(Event& start_event) {
  auto& start = static_cast<CudaEvent&>(start_event);
  if (!timing_ || !start.timing_) {
    return absl::FailedPreconditionError(
        "both events must be created with enable_timing");
  }
  // A record that never reached a stream (skipped, dropped with its
  // queue) or was made in a context since reset counts as complete for
  // waiters, but has no time: never ask the driver about it.
  auto timed = [this](const std::shared_ptr<CudaEventPoint>& point) {
    return point != nullptr &&
           !point->skipped.load(std::memory_order_acquire) &&
           point->issued.load(std::memory_order_acquire) &&
           point->epoch == device_->epoch() && PointComplete(*device_, *point);
  };
  std::shared_ptr<CudaEventPoint> begin = start.Latest();
  if (!timed(begin)) {
    return absl::FailedPreconditionError(
        "start_event_id has not been recorded and completed");
  }
  std::shared_ptr<CudaEventPoint> end = Latest();
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
  float ms = 0;
  absl::Status s = device_->Check(
      device_->driver().cuEventElapsedTime(&ms, begin->event, end->event),
      "cuEventElapsedTime");
  if (!s.ok()) return s;
  return ms;
}

// --- Flags ------------------------------------------------------------------

CudaFlag::CudaFlag(CudaDevice* device, CudaSlotAllocator::Slot slot)
    : device_(device), slot_(slot) {
  std::atomic_ref<uint64_t>(*slot_.host).store(0, std::memory_order_release);
}

CudaFlag::~CudaFlag() { device_->slots().Put(slot_); }

uint64_t CudaFlag::Load() {
  // The slot went with a reset context: such a flag reads 0.
  CudaDevice::Pass hold(*device_, slot_.epoch, CudaDevice::Pass::kMemory);
  if (!hold) return 0;
  return std::atomic_ref<uint64_t>(*slot_.host).load(std::memory_order_acquire);
}

void CudaFlag::Store(uint64_t value) {
  Sweep();  // Device writes that landed came before this store.
  std::vector<uint64_t> landed;
  {
    // Not across the notifications below (callbacks of other layers).
    CudaDevice::Pass hold(*device_, slot_.epoch, CudaDevice::Pass::kMemory);
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

Flag::WaitId CudaFlag::AsyncWait(uint64_t value, WaitCondition condition,
                                 WaitDone done) {
  return waiters_.Add([this] { return Load(); }, value, condition,
                      std::move(done));
}

void CudaFlag::Release(const absl::Status& reason) {
  if (!waiters_.Release(reason)) return;
  device_->dispatcher().Wake();  // Waits the daemon holds on it go.
}

void CudaFlag::Remember(uint64_t value) {
  for (const std::shared_ptr<Watch>& w : watches_) {
    if (Satisfies(value, w->value, w->condition)) {
      w->seen.store(true, std::memory_order_release);
    }
  }
}

std::shared_ptr<CudaFlag::Watch> CudaFlag::WatchFor(uint64_t value,
                                                    WaitCondition condition) {
  Sweep();  // A write that landed before the wait is not "from now on".
  auto watch = std::make_shared<Watch>();
  watch->value = value;
  watch->condition = condition;
  absl::MutexLock lock(&mu_);
  watches_.push_back(watch);
  return watch;
}

void CudaFlag::Unwatch(const Watch* watch) {
  absl::MutexLock lock(&mu_);
  std::erase_if(watches_, [watch](const std::shared_ptr<Watch>& w) {
    return w.get() == watch;
  });
}

void CudaFlag::WriteIssued(uint64_t value,
                           std::shared_ptr<CudaEventPoint> point) {
  {
    absl::MutexLock lock(&mu_);
    in_flight_.push_back({value, std::move(point)});
  }
  device_->dispatcher().Wake();  // Waits held for such a write may go.
}

void CudaFlag::WriteDone(const CudaEventPoint* point) {
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

void CudaFlag::UntrackedWriteRan(uint64_t value) {
  Sweep();  // Writes before it landed before it.
  {
    absl::MutexLock lock(&mu_);
    Remember(value);
  }
  waiters_.Notify(value);
  device_->dispatcher().Wake();  // Waits the daemon holds may go.
}

bool CudaFlag::Landed(const CudaEventPoint& point) {
  if (!point.issued.load(std::memory_order_acquire)) return false;
  CudaDevice::Pass pass(*device_, point.epoch);
  if (!pass || !device_->MakeCurrent().ok()) return false;
  return device_->driver().cuEventQuery(point.event) == CUDA_SUCCESS;
}

void CudaFlag::Sweep() {
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

std::shared_ptr<CudaEventPoint> CudaFlag::InFlightSatisfying(
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
