// CPU queues: ops run in order on the execution pool; waits park the queue.
#include "server/backend/cpu/cpu_queue.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/backend/cpu/cpu_buffer.h"

namespace gpustream::backend {
// --- The core ---------------------------------------------------------------

CpuQueueCore::CpuQueueCore(CpuScheduler* scheduler,
                           util::SerialExecutor* cleanup, QueueOptions options)
    : scheduler_(scheduler),
      cleanup_(cleanup),
      account_(options.account != nullptr
                   ? std::move(options.account)
                   : std::make_shared<WorkAccount>("(queue)")),
      entry_(scheduler->Add(account_, options.session_key, options.priority)),
      on_error_(std::move(options.on_error)) {}

// No lock: nobody else can reach a core being destroyed. It is idle unless
// the device shuts down with work left behind a wait.
CpuQueueCore::~CpuQueueCore() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::deque<CpuOp> left = std::move(ops_);
  if (parked_) {
    if (park_wait_id_ != 0) parked_op_.flag->CancelWait(park_wait_id_);
    left.push_front(std::move(parked_op_));
  }
  const absl::Status gone =
      absl::UnavailableError("CPU queue destroyed with work pending");
  DropOps(left, gone);
  for (IdleWaiter& w : idle_waiters_) w.watch->Run(error_.ok() ? gone : error_);
  scheduler_->Remove(entry_);
}

void CpuQueueCore::Count(uint64_t ops, uint64_t staged, bool completed) {
  if (ops == 0) return;
  ChargeInflight(-static_cast<int64_t>(ops));
  if (staged != 0) {
    account_->staged_bytes.fetch_sub(static_cast<int64_t>(staged),
                                     std::memory_order_relaxed);
  }
  if (completed) {
    account_->commands_completed.fetch_add(ops, std::memory_order_relaxed);
  }
}

void CpuQueueCore::Enqueue(CpuOp op) {
  ChargeInflight(1);
  if (op.staged_bytes != 0) {
    account_->staged_bytes.fetch_add(static_cast<int64_t>(op.staged_bytes),
                                     std::memory_order_relaxed);
  }
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    op.seq = ++next_seq_;
    ops_.push_back(std::move(op));
    // A parked queue is woken by its wait; a scheduled one runs on.
    if (!scheduled_ && !parked_) scheduled_ = wake = true;
  }
  if (wake) scheduler_->Wake(entry_, shared_from_this());
}

void CpuQueueCore::EnqueueBatch(std::vector<CpuOp> ops) {
  if (ops.empty()) return;
  uint64_t staged = 0;
  for (const CpuOp& op : ops) staged += op.staged_bytes;
  ChargeInflight(static_cast<int64_t>(ops.size()));
  if (staged != 0) {
    account_->staged_bytes.fetch_add(static_cast<int64_t>(staged),
                                     std::memory_order_relaxed);
  }
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    for (CpuOp& op : ops) {
      op.seq = ++next_seq_;
      ops_.push_back(std::move(op));
    }
    if (!scheduled_ && !parked_) scheduled_ = wake = true;
  }
  if (wake) scheduler_->Wake(entry_, shared_from_this());
}

void CpuQueueCore::SettleLocked(Deferred* out) {
  const uint64_t first_unfinished = running_        ? running_seq_
                                    : parked_       ? parked_op_.seq
                                    : !ops_.empty() ? ops_.front().seq
                                                    : next_seq_ + 1;
  if (delivering_ == 0) {
    while (!idle_waiters_.empty() &&
           idle_waiters_.front().after < first_unfinished) {
      out->idle.emplace_back(std::move(idle_waiters_.front().watch), error_);
      idle_waiters_.pop_front();
    }
  }
  if (retired_ && IdleLocked()) out->release = std::move(self_);
}

void CpuQueueCore::RunDeferred(Deferred& d) {
  for (auto& [watch, status] : d.idle) watch->Run(status);
  d.idle.clear();
  // d.release goes with d, after everything else the caller did.
}

void CpuQueueCore::DropOps(std::deque<CpuOp>& ops, const absl::Status& reason) {
  uint64_t count = 0, staged = 0;
  while (!ops.empty()) {
    CpuOp& op = ops.front();
    // Records still complete, so no other queue waits on them forever.
    if (op.fn) (void)op.fn({reason, /*dropped=*/true, this, nullptr});
    ++count;
    staged += op.staged_bytes;
    ops.pop_front();
  }
  Count(count, staged, /*completed=*/false);
}

CpuQueueCore::Clock::time_point CpuQueueCore::AddBusy(Clock::time_point start) {
  const auto now = Clock::now();
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count();
  if (ns > 0) {
    account_->busy_ns.fetch_add(static_cast<uint64_t>(ns),
                                std::memory_order_relaxed);
  }
  return now;
}

bool CpuQueueCore::RunNext(LaunchSlot& slot) {
  // Quick ops run on in one turn, up to a short slice: a storm of small
  // launches costs one pick per slice, not per op. Longer ops still end
  // their turn, so others wait at most one op plus the slice.
  const auto start = Clock::now();
  const auto turn_end = start + kCpuTurnSlice;
  auto now = start;
  while (RunOne(slot, &now, turn_end)) {
    if (now >= turn_end) return true;
  }
  return false;
}

namespace {

// The most ops RunBatch takes off the queue under one lock: enough that a
// storm of launches costs a lock pair per batch, few enough that what a
// turn leaves (the slice ended) goes back quickly.
constexpr size_t kMaxBatch = 32;

bool IsWait(const CpuOp& op) {
  return op.kind == CpuOp::Kind::kWaitEvent ||
         op.kind == CpuOp::Kind::kWaitFlag;
}

}  // namespace

bool CpuQueueCore::RunOne(LaunchSlot& slot, Clock::time_point* now,
                          Clock::time_point turn_end) {
  std::optional<std::deque<CpuOp>> skipped;
  absl::Status sticky;
  CpuOp wait;
  {
    absl::MutexLock lock(&mu_);
    if (ops_.empty() || parked_) {  // Cancel took the work meanwhile.
      scheduled_ = false;
      return false;
    }
    running_ = true;
    running_seq_ = ops_.front().seq;
    if (!error_.ok()) {
      // After a failure everything enqueued is skipped: all of it at once.
      sticky = error_;
      skipped.emplace().swap(ops_);
    } else if (IsWait(ops_.front())) {
      wait = std::move(ops_.front());
      ops_.pop_front();
    } else {
      launch_slot_ = &slot;
      while (!ops_.empty() && !IsWait(ops_.front()) &&
             batch_.size() < batch_limit_) {
        batch_.push_back(std::move(ops_.front()));
        ops_.pop_front();
      }
      batch_next_.store(0, std::memory_order_relaxed);
    }
  }
  if (skipped.has_value()) {
    DropOps(*skipped, sticky);
    *now = AddBusy(*now);
    return FinishRun(absl::OkStatus());
  }
  if (batch_.empty()) return RunWait(std::move(wait), now);
  return RunBatch(slot, now, turn_end);
}

bool CpuQueueCore::RunBatch(LaunchSlot& slot, Clock::time_point* now,
                            Clock::time_point turn_end) {
  const absl::Status ok;
  absl::Status status;
  const size_t size = batch_.size();  // Fixed until the batch ends.
  size_t ran = 0;                     // Ops that ran to their end.
  size_t again_at = size;  // An op with more to do (Context::again), if any.
  uint64_t staged = 0;     // Of the ops that ran.
  uint64_t busy_ns = 0;
  // Fresh: callbacks since the last op ended (a previous batch's idle
  // waiters) are no part of this launch's time limit.
  *now = Clock::now();
  // Each op is claimed before it runs; Cancel claims (and drops) the rest.
  for (size_t i = batch_next_.fetch_add(1, std::memory_order_acq_rel); i < size;
       i = batch_next_.fetch_add(1, std::memory_order_acq_rel)) {
    CpuOp& op = batch_[i];
    const Clock::time_point start = *now;
    bool again = false;
    if (op.kind == CpuOp::Kind::kLaunch) {
      const CpuKernel& kernel = *op.kernel;
      status = RunStoppable(
          slot, start,
          [&](const volatile int* stop, const CpuKernel** running) {
            *running = &kernel;
            return kernel.Run(op.config, op.args, stop);
          });
    } else {
      status = op.fn({ok, /*dropped=*/false, this, &slot, start, &again});
      again = again && status.ok();
    }
    if (again) {
      again_at = i;  // It goes back to the head and runs on at a later turn.
    } else {
      staged += op.staged_bytes;
      // Destroyed before it counts as done: it may hold the last reference
      // to objects whose release a waiter expects.
      op = CpuOp();
      ++ran;
    }
    *now = Clock::now();
    busy_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(*now - start)
            .count();
    if (again || !status.ok() || *now >= turn_end) break;
  }
  // Before the work shows as done: a Sync then sees its time.
  if (busy_ns > 0) {
    account_->busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
  }
  Count(ran, staged, /*completed=*/true);
  // Take about as many as ran next time: ops that end the slice early
  // (slow ones) are not taken in dozens only to be put back.
  batch_limit_ = ran < size ? std::max<size_t>(ran, 1)
                            : std::min(kMaxBatch, 2 * batch_limit_);
  {
    absl::MutexLock lock(&mu_);
    launch_slot_ = nullptr;
    // What is left goes back to the head, in order, even after a failure
    // (a later turn drops it with the rest): the ops not claimed, unless
    // Cancel took them, and before them an op with more to do.
    const size_t rest = batch_next_.exchange(size, std::memory_order_acq_rel);
    for (size_t i = size; i > rest; --i) {
      ops_.push_front(std::move(batch_[i - 1]));
    }
    if (again_at < size) ops_.push_front(std::move(batch_[again_at]));
    batch_.clear();
  }
  return FinishRun(status);
}

bool CpuQueueCore::RunWait(CpuOp op, Clock::time_point* now) {
  const auto start = *now;
  const bool ready =
      op.kind == CpuOp::Kind::kWaitEvent
          ? op.point->IsComplete()
          : op.flag->released() ||
                Satisfies(op.flag->Load(), op.value, op.condition);
  if (!ready) {
    std::shared_ptr<CpuEventPoint> point = op.point;
    std::shared_ptr<CpuFlag> flag = op.flag;
    const uint64_t value = op.value;
    const WaitCondition condition = op.condition;
    uint64_t gen = 0;
    {
      absl::MutexLock lock(&mu_);
      // Unless Cancel came meanwhile (then the wait is simply over).
      if (error_.ok()) {
        running_ = false;
        scheduled_ = false;
        parked_ = true;
        parked_op_ = std::move(op);
        gen = ++park_gen_;
      }
    }
    if (gen != 0) {
      Arm(gen, std::move(point), std::move(flag), value, condition);
      *now = AddBusy(start);
      return false;
    }
  }
  op = CpuOp();
  Count(1, 0, /*completed=*/true);
  *now = AddBusy(start);
  return FinishRun(absl::OkStatus());
}

bool CpuQueueCore::FinishRun(const absl::Status& status) {
  Deferred deferred;  // Declared first: a self-reference it takes goes last.
  bool first_failure = false;
  bool more;
  {
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (!status.ok() && error_.ok()) {
      error_ = status;
      first_failure = true;
    }
    more = !ops_.empty();
    if (!more) scheduled_ = false;
    SettleLocked(&deferred);
  }
  if (first_failure && on_error_) on_error_(status);
  RunDeferred(deferred);
  return more;
}

void CpuQueueCore::Arm(uint64_t gen, std::shared_ptr<CpuEventPoint> point,
                       std::shared_ptr<CpuFlag> flag, uint64_t value,
                       WaitCondition condition) {
  // Weak: a wait never keeps a queue alive (nor, through the queue's ops,
  // the flag or event it waits on).
  std::weak_ptr<CpuQueueCore> weak = weak_from_this();
  if (point != nullptr) {
    // Runs at once if the point completed since it was checked.
    point->OnComplete([weak, gen] {
      if (auto self = weak.lock()) self->Resume(gen);
    });
    return;
  }
  const Flag::WaitId id =
      flag->AsyncWait(value, condition, [weak, gen](absl::StatusOr<uint64_t>) {
        // Satisfied or released: either way the queue goes on.
        if (auto self = weak.lock()) self->Resume(gen);
      });
  if (id == 0) return;  // Already done.
  bool stale;
  {
    absl::MutexLock lock(&mu_);
    stale = !parked_ || park_gen_ != gen;
    if (!stale) park_wait_id_ = id;
  }
  if (stale) flag->CancelWait(id);  // Cancelled meanwhile.
}

void CpuQueueCore::Resume(uint64_t gen) {
  Deferred deferred;
  CpuOp finished;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (!parked_ || park_gen_ != gen) return;  // Cancelled, or stale.
    parked_ = false;
    park_wait_id_ = 0;
    finished = std::move(parked_op_);
    parked_op_ = CpuOp();
    Count(1, 0, /*completed=*/true);
    if (!ops_.empty()) scheduled_ = wake = true;
    SettleLocked(&deferred);
  }
  finished = CpuOp();  // Off the lock: it may hold a flag's last reference.
  if (wake) scheduler_->Wake(entry_, shared_from_this());
  RunDeferred(deferred);
}

absl::Status CpuQueueCore::RunStoppable(LaunchSlot& slot,
                                        Clock::time_point start,
                                        StoppableBody body) {
  slot.Begin(start);
  // After Begin: a Cancel that this load misses asks the slot to stop.
  if (cancelled_.load(std::memory_order_seq_cst)) {
    slot.End();
    return error();
  }
  const CpuKernel* running = nullptr;
  absl::Status status = body(slot.stop_word(), &running);
  switch (slot.End()) {
    case LaunchStop::kTimeLimit:
      return absl::DeadlineExceededError(absl::StrCat(
          "kernel ", running != nullptr ? running->signature().name : "(none)",
          " ran past the CPU device's time limit per launch (",
          absl::FormatDuration(slot.limit()), ") and was stopped"));
    case LaunchStop::kCancelled:
      return error();  // The reason Cancel gave.
    case LaunchStop::kNone:
      break;
  }
  return status;
}

std::shared_ptr<Watch> CpuQueueCore::OnIdle(Queue::Done done) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!IdleLocked()) {
      SweepCancelled(idle_waiters_, idle_swept_size_,
                     [](IdleWaiter& w) { return w.watch.get(); });
      auto watch = std::make_shared<WatchFor<absl::Status>>(std::move(done));
      idle_waiters_.push_back({next_seq_, watch});
      return watch;
    }
    status = error_;
  }
  done(status);
  return nullptr;
}

void CpuQueueCore::Cancel(const absl::Status& reason_in) {
  const absl::Status reason =
      reason_in.ok() ? absl::CancelledError("CPU queue cancelled") : reason_in;
  std::deque<CpuOp> dropped;
  std::shared_ptr<CpuFlag> wait_flag;
  Flag::WaitId wait_id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = reason;
    cancelled_.store(true, std::memory_order_seq_cst);
    dropped.swap(ops_);
    // The running batch's ops not yet claimed come first (the batch's
    // thread claims none after this).
    const size_t size = batch_.size();
    for (size_t i = size,
                rest = batch_next_.exchange(size, std::memory_order_acq_rel);
         i > rest; --i) {
      dropped.push_front(std::move(batch_[i - 1]));
    }
    if (parked_) {
      parked_ = false;
      ++park_gen_;  // Its wake-up, should it come, is stale.
      if (park_wait_id_ != 0) {
        wait_flag = parked_op_.flag;
        wait_id = park_wait_id_;
        park_wait_id_ = 0;
      }
      dropped.push_front(std::move(parked_op_));
      parked_op_ = CpuOp();
    }
    // A kernel running now is asked to return; the queue does not wait.
    if (launch_slot_ != nullptr) {
      launch_slot_->RequestStopRunning(LaunchStop::kCancelled);
    }
    if (!dropped.empty()) ++delivering_;
  }
  if (wait_flag != nullptr) wait_flag->CancelWait(wait_id);
  if (dropped.empty()) return;
  // Callbacks (a Read's done) run on a backend thread, never the caller's
  // (it may hold locks they take); the cleanup thread never runs kernels,
  // so they are delivered at once even when every execution thread is busy.
  cleanup_->Post([self = shared_from_this(), dropped = std::move(dropped),
                  reason]() mutable {
    self->DropOps(dropped, reason);
    Deferred deferred;
    {
      absl::MutexLock lock(&self->mu_);
      --self->delivering_;
      self->SettleLocked(&deferred);
    }
    RunDeferred(deferred);
  });
}

bool CpuQueueCore::IsIdle() {
  absl::MutexLock lock(&mu_);
  return IdleLocked();
}

absl::Status CpuQueueCore::error() {
  absl::MutexLock lock(&mu_);
  return error_;
}

void CpuQueueCore::Retire() {
  absl::MutexLock lock(&mu_);
  retired_ = true;
  if (!IdleLocked()) self_ = shared_from_this();
}

// --- The operations ---------------------------------------------------------

absl::Status CpuQueue::Work(
    absl::AnyInvocable<absl::Status(const CpuOp::Context&)> fn,
    uint64_t staged_bytes) {
  CpuOp op;
  op.fn = std::move(fn);
  op.staged_bytes = staged_bytes;
  core_->Enqueue(std::move(op));
  return absl::OkStatus();
}

absl::Status CpuQueue::Launch(const Kernel& kernel, const LaunchConfig& config,
                              std::vector<KernelArg> args) {
  if (absl::Status s = CheckLaunch(kernel, config); !s.ok()) return s;
  CpuOp op;
  op.kind = CpuOp::Kind::kLaunch;
  op.kernel = &static_cast<const CpuKernel&>(kernel);
  op.config = config;
  op.args = std::move(args);
  core_->Enqueue(std::move(op));
  return absl::OkStatus();
}

absl::Status CpuQueue::CheckLaunch(const Kernel&, const LaunchConfig& config) {
  if (config.cooperative && config.grid.Volume() > kCpuMaxCooperativeBlocks) {
    return absl::OutOfRangeError(absl::StrCat(
        "cooperative grid of ", config.grid.Volume(),
        " blocks: the CPU device holds at most ", kCpuMaxCooperativeBlocks,
        " blocks resident at once (one thread each)"));
  }
  return absl::OkStatus();
}

absl::Status CpuQueue::Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                             std::string data) {
  const uint64_t staged = data.size();
  return Work(
      [dst = std::move(dst), offset,
       data = std::move(data)](const CpuOp::Context& c) {
        if (!c.dropped)
          std::memcpy(CpuData(dst, offset), data.data(), data.size());
        return absl::OkStatus();
      },
      staged);
}

absl::Status CpuQueue::Read(std::shared_ptr<Buffer> src, uint64_t offset,
                            uint64_t size, ReadDone done) {
  return Work([src = std::move(src), offset, size,
               done = std::move(done)](const CpuOp::Context& c) mutable {
    if (c.dropped) {
      done(c.status);
    } else {
      done(std::string(reinterpret_cast<const char*>(CpuData(src, offset)),
                       size));
    }
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                            std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                            uint64_t size) {
  return Work([src = std::move(src), src_offset, dst = std::move(dst),
               dst_offset, size](const CpuOp::Context& c) {
    if (!c.dropped) CpuCopy(src, src_offset, dst, dst_offset, size);
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::Fill(std::shared_ptr<Buffer> dst, uint64_t offset,
                            uint64_t size, uint32_t value) {
  return Work(
      [dst = std::move(dst), offset, size, value](const CpuOp::Context& c) {
        if (!c.dropped) CpuFill(dst, offset, size, value);
        return absl::OkStatus();
      });
}

absl::Status CpuQueue::RecordEvent(std::shared_ptr<Event> event) {
  std::shared_ptr<CpuEventPoint> point =
      static_cast<CpuEvent&>(*event).NewRecord();
  // Completes even when dropped or skipped, so no other queue stays parked
  // on it.
  return Work([point = std::move(point)](const CpuOp::Context&) {
    point->Complete();
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::WaitEvent(std::shared_ptr<Event> event) {
  std::shared_ptr<CpuEventPoint> point =
      static_cast<CpuEvent&>(*event).Latest();
  if (point == nullptr) return absl::OkStatus();  // Never recorded.
  CpuOp op;
  op.kind = CpuOp::Kind::kWaitEvent;
  op.point = std::move(point);
  core_->Enqueue(std::move(op));
  return absl::OkStatus();
}

absl::Status CpuQueue::WaitQueue(Queue& other) {
  auto marker = std::make_shared<CpuEvent>(/*enable_timing=*/false);
  if (absl::Status s = other.RecordEvent(marker); !s.ok()) return s;
  return WaitEvent(std::move(marker));
}

absl::Status CpuQueue::WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                                WaitCondition condition) {
  CpuOp op;
  op.kind = CpuOp::Kind::kWaitFlag;
  op.flag = std::static_pointer_cast<CpuFlag>(std::move(flag));
  op.value = value;
  op.condition = condition;
  core_->Enqueue(std::move(op));
  return absl::OkStatus();
}

absl::Status CpuQueue::WriteFlag(std::shared_ptr<Flag> flag, uint64_t value) {
  return Work([flag = std::move(flag), value](const CpuOp::Context& c) {
    if (!c.dropped) flag->Store(value);
    return absl::OkStatus();
  });
}

absl::Status CpuQueue::HostFunc(absl::AnyInvocable<void()> fn) {
  return Work([fn = std::move(fn)](const CpuOp::Context& c) mutable {
    if (!c.dropped) fn();
    return absl::OkStatus();
  });
}

}  // namespace gpustream::backend
