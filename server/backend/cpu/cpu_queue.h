// A CPU queue: its operations run in order on the device's execution pool
// (CpuScheduler), one at a time; waits park the queue, not a thread.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/cpu/cpu_event.h"
#include "server/backend/cpu/cpu_flag.h"
#include "server/backend/cpu/cpu_module.h"
#include "server/backend/cpu/cpu_scheduler.h"
#include "server/backend/device.h"
#include "server/backend/queue.h"
#include "server/util/serial_executor.h"

namespace gpustream::backend {

class CpuQueueCore;

// The most time one turn on an execution thread runs further ops after its
// first (CpuQueueCore::RunNext), and a resumable op runs before it yields.
inline constexpr std::chrono::microseconds kCpuTurnSlice(20);

// One enqueued operation.
struct CpuOp {
  // kLaunch is a kernel launch held as plain fields (no closure to allocate
  // and free per launch: the hottest op).
  enum class Kind : uint8_t { kWork, kLaunch, kWaitEvent, kWaitFlag };

  // How `fn` is called: to run the op (`dropped` false, `status` OK, on an
  // execution thread) or to drop it unrun (`dropped` true, `status` the
  // reason, which callbacks such as a Read's get: Cancel, or the queue's
  // sticky error for work enqueued after it). A non-OK return from a run
  // fails the queue (the first one becomes the sticky error).
  struct Context {
    const absl::Status& status;
    bool dropped;
    CpuQueueCore* core;
    LaunchSlot* slot;  // The execution thread's; null when dropped.
    // When the op began running (RunStoppable's start for the watchdog).
    std::chrono::steady_clock::time_point start = {};
    // A run may set it (OK status only) when the op has more to do: the op
    // stays at the head of the queue and runs on at the queue's next turn,
    // so a long op (a captured graph's commands) yields to the fair-share
    // scheduler like a stream of short ones. Null when dropped.
    bool* again = nullptr;
  };

  Kind kind = Kind::kWork;
  absl::AnyInvocable<absl::Status(const Context&)> fn;  // kWork
  const CpuKernel* kernel = nullptr;                    // kLaunch
  LaunchConfig config;                                  // kLaunch
  std::vector<KernelArg> args;                          // kLaunch
  std::shared_ptr<CpuEventPoint> point;                 // kWaitEvent
  std::shared_ptr<CpuFlag> flag;                        // kWaitFlag
  uint64_t value = 0;
  WaitCondition condition = WaitCondition::kEqual;
  // A Write's data, counted in the account's staged_bytes until the op
  // has run or been dropped.
  uint64_t staged_bytes = 0;
  uint64_t seq = 0;  // Enqueue order, from 1.
};

// The state of one queue, shared by its CpuQueue, the scheduler (while it
// has work ready or running), the cleanup thread (while dropped work is
// delivered) and, once the CpuQueue is gone, itself while work is left
// (parked on a wait, say): a dropped queue still runs what it was given,
// as a CUDA stream does. Waits hold it weakly. Thread-safe.
//
// WorkAccount (work_account.h): every op counts in inflight_commands (and
// a Write in staged_bytes) from enqueue until it has run or been dropped;
// commands_completed counts the ops that ran with no sticky error before
// them; busy_ns adds the wall time each op occupied an execution thread,
// before the op shows as done.
//
// Turns: the scheduler runs a core on one execution thread at a time; a
// turn runs the next op, then further ops while they are ready and the
// turn is under kCpuTurnSlice (20 us): a storm of tiny ops costs one pick
// per slice. A wait not yet satisfied parks the core (no thread is held) until
// its flag or event point calls Resume.
class CpuQueueCore final : public CpuScheduler::Task,
                           public std::enable_shared_from_this<CpuQueueCore> {
 public:
  // `scheduler` and `cleanup` outlive the core.
  CpuQueueCore(CpuScheduler* scheduler, util::SerialExecutor* cleanup,
               QueueOptions options);
  // Drops what is left, if anything (device shutdown), and leaves the
  // scheduler. Takes no lock: nothing else refers to it any more.
  ~CpuQueueCore() override;

  // Appends `op`, waking the queue if it was not scheduled. Never blocks.
  void Enqueue(CpuOp op);
  // Appends `ops` in order, under one lock (a graph's launch).
  void EnqueueBatch(std::vector<CpuOp> ops);
  // Queue::OnIdle: `done` fires once every op enqueued so far has run or
  // been dropped and dropped ops' callbacks have been delivered.
  std::shared_ptr<Watch> OnIdle(Queue::Done done);
  // Queue::Cancel. Never waits: the ops not yet run are taken off the
  // queue and dropped on the cleanup thread (their callbacks get `reason`;
  // records still complete), a parked wait is dropped with them, and a
  // kernel running now is asked to stop (LaunchSlot::RequestStop).
  void Cancel(const absl::Status& reason);
  bool IsIdle();
  // Enqueued commands not yet completed or dropped (this queue's share of
  // its account's inflight_commands).
  uint64_t inflight_commands() const { return inflight_.value(); }
  absl::Status error();
  // The CpuQueue is gone: the core keeps itself until its work is done.
  void Retire();

  // Runs `body`, which may run several kernels (a turn of a graph's
  // commands), as one launch of `slot` begun at `start`, stoppable by the
  // watchdog and Cancel: the time limit runs from `start`, and `body`
  // should return once `stop` reads nonzero. `*running` names the kernel
  // running when it was stopped. A launch the watchdog stopped fails with
  // DEADLINE_EXCEEDED naming the kernel and the limit, whatever the kernel
  // returned. Only from an op of a batch this core is running on `slot`.
  using StoppableBody = absl::FunctionRef<absl::Status(
      const volatile int* stop, const CpuKernel** running)>;
  absl::Status RunStoppable(LaunchSlot& slot,
                            std::chrono::steady_clock::time_point start,
                            StoppableBody body);

  // CpuScheduler::Task.
  bool RunNext(LaunchSlot& slot) override;

 private:
  struct IdleWaiter {
    uint64_t after;  // Fires once every op up to this seq is done.
    std::shared_ptr<WatchFor<absl::Status>> watch;
  };
  // What to do once the lock is released: callbacks, the self-reference
  // to let go (declared first in callers' frames, so it goes last).
  struct Deferred {
    std::vector<
        std::pair<std::shared_ptr<WatchFor<absl::Status>>, absl::Status>>
        idle;
    std::shared_ptr<CpuQueueCore> release;
  };

  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_ && !parked_ && ops_.empty() && delivering_ == 0;
  }
  // Collects idle waiters now due, and the self-reference of a retired
  // queue that became idle.
  void SettleLocked(Deferred* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunDeferred(Deferred& d);
  // Arms the wait the queue parked on as generation `gen`.
  void Arm(uint64_t gen, std::shared_ptr<CpuEventPoint> point,
           std::shared_ptr<CpuFlag> flag, uint64_t value,
           WaitCondition condition);
  // The parked wait of generation `gen` is over.
  void Resume(uint64_t gen);
  using Clock = std::chrono::steady_clock;
  // Runs the next ops: a batch of up to kMaxBatch launches and works taken
  // off the queue under one lock, or one wait, or (after a failure) drops
  // all of them. Whether another is ready; false also when the queue parked
  // on a wait. `*now`: when the first op starts, on return when the last
  // ended (one clock read per op serves its busy time, the turn's slice and
  // the next op's start). A batch stops early at `turn_end`.
  bool RunOne(LaunchSlot& slot, Clock::time_point* now,
              Clock::time_point turn_end);
  // RunOne's cases, each entered with running_ set.
  bool RunBatch(LaunchSlot& slot, Clock::time_point* now,
                Clock::time_point turn_end);
  bool RunWait(CpuOp op, Clock::time_point* now);
  // Ends the turn's RunOne: running_ off, `status` (an op's failure) made
  // the sticky error, idle waiters settled. Whether more is ready.
  bool FinishRun(const absl::Status& status);
  // Drops `ops` in order (off the lock) and counts them.
  void DropOps(std::deque<CpuOp>& ops, const absl::Status& reason);
  void Count(uint64_t ops, uint64_t staged, bool completed);
  // Adds the time since `start` to the account's busy_ns; returns now.
  Clock::time_point AddBusy(Clock::time_point start);

  CpuScheduler* const scheduler_;
  util::SerialExecutor* const cleanup_;
  const std::shared_ptr<WorkAccount> account_;
  InflightCount inflight_;
  void ChargeInflight(int64_t n) { inflight_.Charge(*account_, n); }
  CpuScheduler::Entry* const entry_;
  absl::AnyInvocable<void(const absl::Status&)> on_error_;

  absl::Mutex mu_;
  std::deque<CpuOp> ops_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Set under mu_ by Cancel; read without it by RunStoppable after the
  // slot's Begin (Cancel sets it before asking the slot to stop, so one of
  // the two sees the other).
  std::atomic<bool> cancelled_ = false;
  // Handed to the scheduler: runnable or running, until a turn finds
  // nothing more ready.
  bool scheduled_ ABSL_GUARDED_BY(mu_) = false;
  // A turn is running ops taken off ops_; the first one's seq.
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t running_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // The slot of the batch running (whatever it runs is this queue's), for
  // Cancel to stop.
  LaunchSlot* launch_slot_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The batch running, taken off ops_ by the turn that set running_: its
  // size changes only under mu_ (taken, cleared), by that turn. Each op is
  // claimed before it runs by taking batch_next_ (fetch_add, no lock);
  // Cancel, under mu_, claims every op not yet claimed at once (exchange
  // to the size) and drops them with the rest of the queue, so nothing
  // waits behind an op that cannot be stopped.
  std::vector<CpuOp> batch_;
  std::atomic<size_t> batch_next_ = 0;
  size_t batch_limit_ = 1;  // How many the next batch takes at most.
  // The wait the queue is parked on; generations tell a stale wake-up.
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  CpuOp parked_op_ ABSL_GUARDED_BY(mu_);
  uint64_t park_gen_ ABSL_GUARDED_BY(mu_) = 0;
  Flag::WaitId park_wait_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches of dropped ops whose callbacks are being delivered.
  int delivering_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<IdleWaiter> idle_waiters_ ABSL_GUARDED_BY(mu_);
  size_t idle_swept_size_ ABSL_GUARDED_BY(mu_) = 0;  // SweepCancelled's.
  bool retired_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<CpuQueueCore> self_ ABSL_GUARDED_BY(mu_);
};

// The Queue the session layer holds; the device destroys it on its cleanup
// thread, which retires the core.
class CpuQueue : public Queue {
 public:
  explicit CpuQueue(std::shared_ptr<CpuQueueCore> core)
      : core_(std::move(core)) {}
  ~CpuQueue() override { core_->Retire(); }
  CpuQueue(const CpuQueue&) = delete;
  CpuQueue& operator=(const CpuQueue&) = delete;

  absl::Status Launch(const Kernel& kernel, const LaunchConfig& config,
                      std::vector<KernelArg> args) override;
  absl::Status CheckLaunch(const Kernel& kernel,
                           const LaunchConfig& config) override;
  absl::Status Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                     std::string data) override;
  absl::Status Read(std::shared_ptr<Buffer> src, uint64_t offset, uint64_t size,
                    ReadDone done) override;
  absl::Status Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                    std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                    uint64_t size) override;
  absl::Status Fill(std::shared_ptr<Buffer> dst, uint64_t offset, uint64_t size,
                    uint32_t value) override;
  absl::Status RecordEvent(std::shared_ptr<Event> event) override;
  absl::Status WaitEvent(std::shared_ptr<Event> event) override;
  absl::Status WaitQueue(Queue& other) override;
  absl::Status WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                        WaitCondition condition) override;
  absl::Status WriteFlag(std::shared_ptr<Flag> flag, uint64_t value) override;
  absl::Status HostFunc(absl::AnyInvocable<void()> fn) override;
  // cpu_graph.cc: runs of commands between waits become one resumable op.
  absl::Status LaunchGraph(std::shared_ptr<const Graph> graph,
                           std::shared_ptr<Event> done) override;
  std::shared_ptr<Watch> OnIdle(Done done) override {
    return core_->OnIdle(std::move(done));
  }
  void Cancel(const absl::Status& reason) override { core_->Cancel(reason); }
  bool IsIdle() override { return core_->IsIdle(); }
  uint64_t inflight_commands() override { return core_->inflight_commands(); }
  absl::Status error() override { return core_->error(); }

 private:
  absl::Status Work(absl::AnyInvocable<absl::Status(const CpuOp::Context&)> fn,
                    uint64_t staged_bytes = 0);

  const std::shared_ptr<CpuQueueCore> core_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_
