// CUDA buffers, events and flags.
#include "server/backend/cuda/cuda_objects.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/backend/cuda/cuda_device.h"
#include "server/backend/cuda/cuda_queue.h"

namespace gpustream::backend {
namespace {

// How long the releaser keeps one awaited value stored before it tries the
// next wait (the queue may still be busy before reaching its wait).
constexpr absl::Duration kReleaseRotate = absl::Milliseconds(20);

bool Passed(const CudaFlag::NativeWait& w) {
  std::shared_ptr<CudaQueueCore> queue = w.queue.lock();
  return queue == nullptr || queue->Passed(w.index);
}

}  // namespace

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
  if (point.epoch != device.epoch() || device.failed()) return true;
  if (!device.MakeCurrent().ok()) return true;
  CUresult r = device.driver().cuEventQuery(point.event);
  if (r == CUDA_ERROR_NOT_READY) return false;
  device.Warn(r, "cuEventQuery");
  return true;
}

absl::StatusOr<std::shared_ptr<CudaEventPoint>> CudaEvent::NewRecord() {
  auto event = device_->events().Get(timing_);
  if (!event.ok()) return event.status();
  auto point = std::make_shared<CudaEventPoint>(device_, *event, timing_,
                                                device_->epoch());
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
  return std::atomic_ref<uint64_t>(*slot_.host).load(std::memory_order_acquire);
}

void CudaFlag::Store(uint64_t value) {
  // Release: data the host wrote before signalling is visible to work the
  // signal releases.
  std::atomic_ref<uint64_t>(*slot_.host)
      .store(value, std::memory_order_release);
  waiters_.Notify(value);
  device_->dispatcher().Wake();  // Waits the daemon holds may go.
}

void CudaFlag::Changed(uint64_t value) { waiters_.Notify(value); }

void CudaFlag::WriteIssued(uint64_t value) {
  {
    absl::MutexLock lock(&mu_);
    last_issued_write_ = value;
  }
  device_->dispatcher().Wake();  // Waits held for such a write may go.
}

bool CudaFlag::IssuedWriteSatisfies(uint64_t value, WaitCondition condition) {
  absl::MutexLock lock(&mu_);
  return last_issued_write_.has_value() &&
         Satisfies(*last_issued_write_, value, condition);
}

Flag::WaitId CudaFlag::AsyncWait(uint64_t value, WaitCondition condition,
                                 WaitDone done) {
  return waiters_.Add([this] { return Load(); }, value, condition,
                      std::move(done));
}

void CudaFlag::Release(const absl::Status& reason) {
  if (!waiters_.Release(reason)) return;
  bool device_waits;
  {
    absl::MutexLock lock(&mu_);
    device_waits = !native_waits_.empty();
    releasing_ = 0;
    releasing_since_ = absl::InfinitePast();
  }
  device_->dispatcher().Wake();  // Daemon-held waits on it may go.
  if (device_waits) device_->TrackRelease(shared_from_this());
}

void CudaFlag::AddNativeWait(NativeWait wait) {
  bool start_releaser;
  {
    absl::MutexLock lock(&mu_);
    // Forget waits already passed, so the list stays as short as the waits
    // actually pending.
    if (native_waits_.size() >= 64) {
      std::erase_if(native_waits_, [](NativeWait& w) { return Passed(w); });
    }
    native_waits_.push_back(std::move(wait));
    // Release() marks the flag released before it looks at native_waits_
    // under mu_: if it looked before this push, the flag reads released
    // here, and this starts the releaser itself.
    start_releaser = waiters_.released();
  }
  if (start_releaser) device_->TrackRelease(shared_from_this());
}

bool CudaFlag::StepRelease() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  // Until every wait has passed: a queue busy for long before its wait
  // (a long kernel) is released when it gets there.
  if (device_->failed()) {
    native_waits_.clear();
    return false;
  }
  // Waits passed are done; the rest are released one at a time: the value
  // stored is that of the wait being released, kept until its queue has
  // passed it (EQUAL waits on different values need one store each).
  for (size_t tried = 0; tried <= native_waits_.size(); ++tried) {
    if (native_waits_.empty()) return false;
    if (releasing_ >= native_waits_.size()) releasing_ = 0;
    NativeWait& w = native_waits_[releasing_];
    if (Passed(w)) {
      native_waits_.erase(native_waits_.begin() + releasing_);
      releasing_since_ = absl::InfinitePast();
      continue;
    }
    if (releasing_since_ == absl::InfinitePast()) {
      std::atomic_ref<uint64_t>(*slot_.host)
          .store(w.value, std::memory_order_release);
      releasing_since_ = now;
    } else if (now - releasing_since_ > kReleaseRotate) {
      ++releasing_;  // Its queue is busy before the wait: try the next.
      releasing_since_ = absl::InfinitePast();
      continue;
    }
    return true;
  }
  return !native_waits_.empty();
}

}  // namespace gpustream::backend
