// CPU queue: a deque of operations drained in order by one worker thread.
#include "server/backend/cpu/cpu_queue.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/backend/cpu/cpu_buffer.h"
#include "server/backend/cpu/cpu_event.h"
#include "server/backend/cpu/cpu_flag.h"
#include "server/backend/cpu/cpu_module.h"

namespace gpustream::backend {
namespace {

// Objects handed to a CPU queue come from the CPU device (the session layer
// only pairs objects of one device), so the downcasts below are exact.
std::byte* Data(const std::shared_ptr<Buffer>& buffer, uint64_t offset) {
  return static_cast<CpuBuffer&>(*buffer).data() + offset;
}

}  // namespace

CpuQueue::CpuQueue(absl::AnyInvocable<void(const absl::Status&)> on_error)
    : state_(std::make_unique<State>()) {
  state_->on_error = std::move(on_error);
  worker_ = std::thread(&CpuQueue::Work, state_.get());
}

CpuQueue::~CpuQueue() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopping = true;
  }
  worker_.join();
}

void CpuQueue::Work(State* state) {
  std::deque<Op> batch;
  absl::Status sticky;
  while (true) {
    {
      absl::MutexLock lock(&state->mu);
      state->mu.Await(absl::Condition(
          +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
            return !s->ops.empty() || s->stopping;
          },
          state));
      if (state->ops.empty()) return;  // Stopping, and all work is done.
      batch.swap(state->ops);
      sticky = state->error;
    }
    for (Op& op : batch) {
      if (sticky.ok() && state->cancelled.load(std::memory_order_acquire)) {
        absl::MutexLock lock(&state->mu);
        sticky = state->error;
      }
      absl::Status status = op(sticky);
      // Destroy the op before counting it done: it may hold the last
      // reference to objects whose release a waiter expects.
      op = nullptr;
      if (!status.ok() && sticky.ok()) {
        sticky = status;
        {
          absl::MutexLock lock(&state->mu);
          state->error = status;
        }
        if (state->on_error) state->on_error(status);
      }
      state->pending.fetch_sub(1, std::memory_order_acq_rel);
    }
    batch.clear();
  }
}

absl::Status CpuQueue::Enqueue(Op op) {
  state_->pending.fetch_add(1, std::memory_order_acq_rel);
  absl::MutexLock lock(&state_->mu);
  state_->ops.push_back(std::move(op));
  return absl::OkStatus();
}

absl::Status CpuQueue::Launch(const Kernel& kernel, const LaunchConfig& config,
                              std::vector<KernelArg> args) {
  const auto& cpu_kernel = static_cast<const CpuKernel&>(kernel);
  return Enqueue([&cpu_kernel, config, args = std::move(args)](
                     const absl::Status& sticky) mutable -> absl::Status {
    if (!sticky.ok()) return sticky;
    return cpu_kernel.Run(config, args);
  });
}

absl::Status CpuQueue::Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                             std::string data) {
  return Enqueue([dst = std::move(dst), offset,
                  data = std::move(data)](const absl::Status& sticky) {
    if (!sticky.ok()) return sticky;
    std::memcpy(Data(dst, offset), data.data(), data.size());
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::Read(std::shared_ptr<Buffer> src, uint64_t offset,
                            uint64_t size, ReadDone done) {
  return Enqueue([src = std::move(src), offset, size,
                  done = std::move(done)](const absl::Status& sticky) mutable {
    if (!sticky.ok()) {
      done(sticky);
    } else {
      done(std::string(reinterpret_cast<const char*>(Data(src, offset)), size));
    }
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                            std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                            uint64_t size) {
  return Enqueue([src = std::move(src), src_offset, dst = std::move(dst),
                  dst_offset, size](const absl::Status& sticky) {
    if (!sticky.ok()) return sticky;
    // memmove: source and destination may be overlapping ranges of one buffer.
    std::memmove(Data(dst, dst_offset), Data(src, src_offset), size);
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::Fill(std::shared_ptr<Buffer> dst, uint64_t offset,
                            uint64_t size, uint32_t value) {
  return Enqueue(
      [dst = std::move(dst), offset, size, value](const absl::Status& sticky) {
        if (!sticky.ok()) return sticky;
        std::byte* p = Data(dst, offset);
        for (uint64_t i = 0; i < size; i += 4) std::memcpy(p + i, &value, 4);
        return absl::OkStatus();
      });
}

absl::Status CpuQueue::RecordEvent(std::shared_ptr<Event> event) {
  std::shared_ptr<CpuEventPoint> point =
      static_cast<CpuEvent&>(*event).NewRecord();
  // Completes even after a failure, so no other queue stays blocked on it.
  return Enqueue([point = std::move(point)](const absl::Status&) {
    point->Complete();
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::WaitEvent(std::shared_ptr<Event> event) {
  std::shared_ptr<CpuEventPoint> point =
      static_cast<CpuEvent&>(*event).Latest();
  if (point == nullptr) return absl::OkStatus();  // Never recorded.
  return Enqueue([point = std::move(point)](const absl::Status& sticky) {
    if (sticky.ok()) point->BlockUntilComplete();
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::WaitQueue(Queue& other) {
  auto marker = std::make_shared<CpuEvent>(/*enable_timing=*/false);
  if (absl::Status s = other.RecordEvent(marker); !s.ok()) return s;
  return WaitEvent(std::move(marker));
}

absl::Status CpuQueue::WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                                WaitCondition condition) {
  return Enqueue([flag = std::static_pointer_cast<CpuFlag>(std::move(flag)),
                  value, condition](const absl::Status& sticky) {
    if (sticky.ok()) flag->BlockUntil(value, condition);
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::WriteFlag(std::shared_ptr<Flag> flag, uint64_t value) {
  return Enqueue([flag = std::move(flag), value](const absl::Status& sticky) {
    if (!sticky.ok()) return sticky;
    flag->Store(value);
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::HostFunc(absl::AnyInvocable<void()> fn) {
  return Enqueue([fn = std::move(fn)](const absl::Status& sticky) mutable {
    if (!sticky.ok()) return sticky;
    fn();
    return absl::OkStatus();
  });
}

void CpuQueue::OnIdle(Done done) {
  if (IsIdle()) {
    done(error());
    return;
  }
  // A CPU enqueue cannot fail.
  Enqueue([done = std::move(done)](const absl::Status& sticky) mutable {
    done(sticky);
    return absl::OkStatus();
  }).IgnoreError();
}

void CpuQueue::Cancel(const absl::Status& reason) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->error.ok()) state_->error = reason;
  }
  state_->cancelled.store(true, std::memory_order_release);
}

bool CpuQueue::IsIdle() {
  return state_->pending.load(std::memory_order_acquire) == 0;
}

absl::Status CpuQueue::error() {
  absl::MutexLock lock(&state_->mu);
  return state_->error;
}

}  // namespace gpustream::backend
