// GpuQueue: each v1 queue operation as native stream calls.
#include "server/backend/gpu/gpu_queue.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_args.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_module.h"

namespace gpustream::backend {
namespace {

// Objects handed to a GPU queue come from the same GPU device (the
// session layer pairs objects of one device), so these downcasts are exact.
GpuDeviceptr Ptr(const std::shared_ptr<Buffer>& buffer, uint64_t offset) {
  return static_cast<GpuBuffer&>(*buffer).ptr() + offset;
}

// A pinned staging block held by an operation: back to the pool, and no
// longer counted in the tenant's staged_bytes, when the operation's
// callback goes (after it ran, when the work is dropped, or when the work
// was never enqueued). Move-only.
class StagingLease {
 public:
  StagingLease(GpuDevice* device, Staging staging,
               std::shared_ptr<WorkAccount> charged, uint64_t bytes)
      : device_(device),
        staging_(staging),
        charged_(std::move(charged)),
        bytes_(static_cast<int64_t>(bytes)) {
    if (charged_ != nullptr) {
      charged_->staged_bytes.fetch_add(bytes_, std::memory_order_relaxed);
    }
  }
  StagingLease(StagingLease&& other) noexcept
      : device_(std::exchange(other.device_, nullptr)),
        staging_(other.staging_),
        charged_(std::move(other.charged_)),
        bytes_(other.bytes_) {}
  StagingLease& operator=(StagingLease&&) = delete;
  ~StagingLease() {
    if (device_ == nullptr) return;  // Moved from.
    device_->staging().Put(staging_);
    if (charged_ != nullptr) {
      charged_->staged_bytes.fetch_sub(bytes_, std::memory_order_relaxed);
    }
  }

  void* host() const { return staging_.host; }

 private:
  GpuDevice* device_;
  Staging staging_;
  std::shared_ptr<WorkAccount> charged_;  // Null: not counted (reads).
  int64_t bytes_;
};

}  // namespace

absl::Status IssueLaunch(GpuDevice& device, GpuStreamHandle stream,
                         const GpuKernel& kernel, const LaunchConfig& config,
                         const GpuArgBlock& args) {
  if (absl::Status s = kernel.AllowDynamicShared(device.driver(),
                                                 config.shared_memory_bytes);
      !s.ok()) {
    return s;
  }
  // The driver copies the arguments at the call: `args` may go after it.
  return device.Check(
      device.driver().LaunchKernel(kernel.function(), config, stream,
                                   const_cast<void**>(args.pointers.data())));
}

absl::Status IssueCopy(GpuDevice& device, GpuStreamHandle stream,
                       const Buffer& src, uint64_t src_offset,
                       const Buffer& dst, uint64_t dst_offset, uint64_t size) {
  return device.Check(device.driver().MemcpyDtoDAsync(
      static_cast<const GpuBuffer&>(dst).ptr() + dst_offset,
      static_cast<const GpuBuffer&>(src).ptr() + src_offset, size, stream));
}

absl::Status IssueFill(GpuDevice& device, GpuStreamHandle stream,
                       const Buffer& dst, uint64_t offset, uint64_t size,
                       uint32_t value) {
  return device.Check(device.driver().MemsetD32Async(
      static_cast<const GpuBuffer&>(dst).ptr() + offset, value, size / 4,
      stream));
}

absl::Status IssueWrite(GpuDevice& device, GpuStreamHandle stream,
                        const Buffer& dst, uint64_t offset, const void* host,
                        uint64_t size) {
  return device.Check(device.driver().MemcpyHtoDAsync(
      static_cast<const GpuBuffer&>(dst).ptr() + offset, host, size, stream));
}

GpuArgBlock PackGpuArgs(const GpuKernel& kernel,
                        const std::vector<KernelArg>& args) {
  return PackArgs(kernel.signature(), args, [](const BufferArg& b) {
    return static_cast<uint64_t>(Ptr(b.buffer, b.offset));
  });
}

absl::Status GpuQueue::Launch(const Kernel& kernel, const LaunchConfig& config,
                              std::vector<KernelArg> args) {
  const auto& gpu_kernel = static_cast<const GpuKernel&>(kernel);
  if (absl::Status s = CheckLaunch(kernel, config); !s.ok()) return s;
  auto block = std::make_shared<GpuArgBlock>(PackGpuArgs(gpu_kernel, args));
  GpuQueueCore::Op op;
  op.issue = [&gpu_kernel, config, block](GpuQueueCore& q) {
    return IssueLaunch(q.device(), q.stream(), gpu_kernel, config, *block);
  };
  // The buffers stay alive until the kernel has run.
  op.done = [args = std::move(args)](absl::Status) {};
  op.kernel = true;
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::CheckLaunch(const Kernel& kernel,
                                   const LaunchConfig& config) {
  if (!config.cooperative && !config.clustered) return absl::OkStatus();
  return static_cast<const GpuKernel&>(kernel).CheckLaunchFits(
      core_->device(), core_->sm_count(), config);
}

absl::Status GpuQueue::Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                             std::string data) {
  GpuDevice& device = core_->device();
  auto staging = device.staging().Get(data.size());
  if (!staging.ok()) return staging.status();
  StagingLease lease(&device, *staging, core_->account(), data.size());
  {
    // Pinned memory of the block's context: not once a reset frees it.
    GpuDevice::Pass hold(device, staging->epoch, GpuDevice::Pass::kMemory);
    if (!hold) return device.PassRefused();
    std::memcpy(lease.host(), data.data(), data.size());
  }
  GpuQueueCore::Op op;
  op.issue = [dst, offset, host = lease.host(),
              size = data.size()](GpuQueueCore& q) {
    return IssueWrite(q.device(), q.stream(), *dst, offset, host, size);
  };
  op.done = [dst, lease = std::move(lease)](absl::Status) {};
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::Read(std::shared_ptr<Buffer> src, uint64_t offset,
                            uint64_t size, ReadDone done) {
  GpuDevice& device = core_->device();
  auto staging = device.staging().Get(size);
  if (!staging.ok()) return staging.status();
  StagingLease lease(&device, *staging, /*charged=*/nullptr, size);
  auto shared_done = std::make_shared<ReadDone>(std::move(done));
  GpuQueueCore::Op op;
  op.issue = [src, offset, size, host = lease.host()](GpuQueueCore& q) {
    return q.device().Check(q.device().driver().MemcpyDtoHAsync(
        host, Ptr(src, offset), size, q.stream()));
  };
  op.done = [src, size, lease = std::move(lease), shared_done](absl::Status s) {
    if (s.ok()) {
      (*shared_done)(std::string(static_cast<const char*>(lease.host()), size));
    } else {
      (*shared_done)(s);
    }
  };
  op.prompt = true;
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                            std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                            uint64_t size) {
  GpuQueueCore::Op op;
  op.issue = [src, src_offset, dst, dst_offset, size](GpuQueueCore& q) {
    return IssueCopy(q.device(), q.stream(), *src, src_offset, *dst, dst_offset,
                     size);
  };
  op.done = [src, dst](absl::Status) {};
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::Fill(std::shared_ptr<Buffer> dst, uint64_t offset,
                            uint64_t size, uint32_t value) {
  GpuQueueCore::Op op;
  op.issue = [dst, offset, size, value](GpuQueueCore& q) {
    return IssueFill(q.device(), q.stream(), *dst, offset, size, value);
  };
  op.done = [dst](absl::Status) {};
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::Record(std::shared_ptr<GpuEventPoint> point,
                              bool counted) {
  GpuQueueCore::Op op;
  op.counted = counted;
  op.issue = [point](GpuQueueCore& q) {
    absl::Status s = q.device().Check(
        q.device().driver().EventRecord(point->event, q.stream()));
    if (s.ok()) {
      point->issued.store(true, std::memory_order_release);
      // Waits held on this record may go now.
      q.device().dispatcher().Wake();
    }
    return s;
  };
  op.done = [point](absl::Status) {
    // Dropped before it reached the stream (its queue failed or was
    // cancelled): the record counts as complete, so no wait hangs on it.
    if (!point->issued.load(std::memory_order_acquire)) {
      point->skipped.store(true, std::memory_order_release);
      point->device->dispatcher().Wake();
    }
  };
  absl::Status s = core_->Submit(std::move(op));
  if (!s.ok() && !point->issued.load(std::memory_order_acquire)) {
    // Refused outright (its done never runs): nothing will record it, so
    // waits bound to it must not wait.
    point->skipped.store(true, std::memory_order_release);
    point->device->dispatcher().Wake();
  }
  return s;
}

absl::Status GpuQueue::WaitPoint(std::shared_ptr<GpuEventPoint> point) {
  GpuQueueCore::Op op;
  op.ready = [point] {
    return point->issued.load(std::memory_order_acquire) ||
           point->skipped.load(std::memory_order_acquire);
  };
  op.issue = [point](GpuQueueCore& q) {
    if (!point->issued.load(std::memory_order_acquire)) {
      return absl::OkStatus();  // The record was dropped: nothing to wait.
    }
    return q.device().Check(
        q.device().driver().StreamWaitEvent(q.stream(), point->event));
  };
  op.done = [point](absl::Status) {};
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::RecordEvent(std::shared_ptr<Event> event) {
  auto point = static_cast<GpuEvent&>(*event).NewRecord();
  if (!point.ok()) return point.status();
  return Record(*std::move(point));
}

absl::Status GpuQueue::WaitEvent(std::shared_ptr<Event> event) {
  std::shared_ptr<GpuEventPoint> point =
      static_cast<GpuEvent&>(*event).Latest();
  if (point == nullptr) return absl::OkStatus();  // Never recorded.
  return WaitPoint(std::move(point));
}

absl::Status GpuQueue::WaitQueue(Queue& other) {
  GpuDevice& device = core_->device();
  auto event = device.events().Get(/*timing=*/false);
  if (!event.ok()) return event.status();
  auto point = std::make_shared<GpuEventPoint>(&device, event->event, false,
                                               event->epoch);
  // One command, this queue's: the record on `other` is internal.
  if (absl::Status s =
          static_cast<GpuQueue&>(other).Record(point, /*counted=*/false);
      !s.ok()) {
    return s;
  }
  return WaitPoint(std::move(point));
}

// Streams share a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), and
// work that does not finish at the head of one holds up every stream behind
// it, other tenants' too, and every context-synchronizing call. So a flag
// wait never goes to the stream as a cuStreamWaitValue64 (which would park
// there until somebody writes the value, perhaps never). The daemon holds
// the queue's later work until the flag satisfies the wait (a host signal
// wakes the dispatcher at once) or a value stored since the wait was
// enqueued did (GpuFlag::Watch), or until a write that satisfies it has
// been handed to a stream: then the stream waits on the event recorded
// right after the oldest such write, which completes once work issued
// before it has run. Nothing parks
// on the device for longer than work already issued takes.
absl::Status GpuQueue::WaitFlag(std::shared_ptr<Flag> flag_base, uint64_t value,
                                WaitCondition condition) {
  auto flag = std::static_pointer_cast<GpuFlag>(std::move(flag_base));
  std::shared_ptr<GpuFlag::Watch> watch = flag->WatchFor(value, condition);
  auto seen = [flag, value, condition, watch] {
    return flag->released() || Satisfies(flag->Load(), value, condition) ||
           watch->seen.load(std::memory_order_acquire);
  };
  GpuQueueCore::Op op;
  op.done = [flag, watch](absl::Status) { flag->Unwatch(watch.get()); };
  op.ready = [flag, value, condition, seen] {
    return seen() || flag->InFlightSatisfying(value, condition) != nullptr;
  };
  op.issue = [flag, value, condition, seen](GpuQueueCore& q) {
    if (seen()) return absl::OkStatus();
    std::shared_ptr<GpuEventPoint> point =
        flag->InFlightSatisfying(value, condition);
    // Gone from the writes in flight since ready(): it landed, and the
    // watch saw it (or is about to, in the Sweep that retires it): the wait
    // was satisfied.
    if (point == nullptr) return absl::OkStatus();
    return q.device().Check(
        q.device().driver().StreamWaitEvent(q.stream(), point->event));
  };
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::WriteFlag(std::shared_ptr<Flag> flag_base,
                                 uint64_t value) {
  auto flag = std::static_pointer_cast<GpuFlag>(std::move(flag_base));
  GpuDevice& device = core_->device();
  GpuQueueCore::Op op;
  op.prompt = true;  // Host waiters hear of it promptly.
  if (!device.info().supports_wait_value) {
    op.issue = [](GpuQueueCore&) { return absl::OkStatus(); };
    op.done = [flag, value](absl::Status s) {
      if (s.ok()) flag->Store(value);
    };
    return core_->Submit(std::move(op));
  }
  // The event recorded right after the write, for waits on this value.
  auto event = device.events().Get(/*timing=*/false);
  if (!event.ok()) return event.status();
  auto point = std::make_shared<GpuEventPoint>(&device, event->event, false,
                                               event->epoch);
  op.issue = [flag, value, point](GpuQueueCore& q) {
    const GpuDriver& driver = q.device().driver();
    if (absl::Status s = q.device().Check(
            driver.StreamWriteValue64(q.stream(), flag->device_ptr(), value));
        !s.ok()) {
      return s;  // Nothing enqueued.
    }
    if (absl::Status s =
            q.device().Check(driver.EventRecord(point->event, q.stream()));
        !s.ok()) {
      // The write is on the stream and lands: the command did not fail.
      // Untracked, waits see it through the flag's value; the queue
      // reports the error.
      q.IssuedPartly(s);
      return absl::OkStatus();
    }
    point->issued.store(true, std::memory_order_release);
    flag->WriteIssued(value, point);
    return absl::OkStatus();
  };
  op.done = [flag, point, value](absl::Status s) {
    if (point->issued.load(std::memory_order_acquire)) {
      flag->WriteDone(point.get());
    } else if (s.ok()) {
      flag->UntrackedWriteRan(value);  // Its event was refused (above).
    }
  };
  return core_->Submit(std::move(op));
}

absl::Status GpuQueue::HostFunc(absl::AnyInvocable<void()> fn) {
  GpuQueueCore::Op op;
  op.issue = [](GpuQueueCore&) { return absl::OkStatus(); };
  // Runs on the dispatcher once the marker behind it comes back: never in
  // the driver's callback, and skipped after a sticky error.
  op.done = [fn = std::move(fn)](absl::Status s) mutable {
    if (s.ok()) fn();
  };
  op.prompt = true;
  return core_->Submit(std::move(op));
}

}  // namespace gpustream::backend
