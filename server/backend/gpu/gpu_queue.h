// A GPU queue: a non-blocking native stream, fed within a bounded budget.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_QUEUE_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_QUEUE_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_admission.h"
#include "server/backend/gpu/gpu_args.h"
#include "server/backend/gpu/gpu_driver.h"
#include "server/backend/gpu/gpu_objects.h"
#include "server/backend/gpu/gpu_pools.h"
#include "server/backend/queue.h"
#include "server/backend/work_account.h"

namespace gpustream::backend {

class GpuDevice;
class GpuKernel;

// The state of one stream, shared by its GpuQueue, the dispatcher and the
// flags whose waits it holds; outlives the GpuQueue until its work is done.
//
// Budget: CUDA blocks the caller once about a thousand operations are
// pending on a stream. At most kBudget operations are handed to the stream
// and not yet known complete; the rest wait, in order, in `held_`, and the
// dispatcher hands them on as completions come back.
//
// Completions come back through markers, put on the stream after every
// kMarkerEvery operations, after any operation whose completion someone
// awaits (reads, host functions, flag writes, OnIdle: "prompt"), and by the
// dispatcher's tick when work is left unmarked. A marker is a
// cuStreamWriteValue64 of the issue count into the queue's progress word
// (pinned, device-mapped host memory; the write's default memory barrier
// makes the marked work's results visible first), which the dispatcher
// polls: no host function, which would stall the stream, and every other
// stream on its hardware queue, until a driver thread had run it. Where the
// device has no stream memory operations, a marker is a pooled event
// record, polled with cuEventQuery. Polling runs while work is
// outstanding: every kPollPeriod, and faster after a prompt marker (an
// eighth of the time since it was issued, at least kPromptPollPeriod), so
// that a waiter hears of short work within microseconds and long work
// costs few wake-ups.
//
// Admission: beyond the budget, each operation handed to the stream needs
// the device's admission (GpuAdmission: the tenant's fair share of the
// device's operations in flight). Work it refuses is held in `held_` too,
// and the queue waits for its turn, which the dispatcher's pump gives it
// as the tenant's earlier work completes.
//
// Accounting (WorkAccount, the queue's tenant): inflight_commands counts
// each operation from enqueue until it completed (known when its marker
// comes back) or was dropped; commands_completed the ones that ran;
// staged_bytes is kept by the writes' staging (GpuQueue::Write); busy_ns
// comes from the markers' completion times (GpuAdmission::Completed).
// Internal operations (OnIdle's, the record behind WaitQueue) are not
// counted: `Op::counted`.
//
// Thread-safe: `mu_` serializes every call on the stream, so work reaches it
// in enqueue order whichever thread issues it. Lock order: mu_, then the
// admission's (a leaf).
class GpuQueueCore : public std::enable_shared_from_this<GpuQueueCore>,
                     public GpuAdmission::Client {
 public:
  static constexpr uint64_t kBudget = 384;
  static constexpr uint64_t kMarkerEvery = 64;
  static constexpr absl::Duration kPollPeriod = absl::Microseconds(250);
  static constexpr absl::Duration kPromptPollPeriod = absl::Microseconds(5);

  // One operation. `issue` makes the native calls (under mu_). `done` runs
  // on the dispatcher once the work completed (OK), or with the error when
  // it is skipped or dropped; it holds what the work uses alive. `ready`
  // gates issuing (a wait on a record not issued yet; a flag wait the
  // daemon holds).
  // The OnIdle watches one no-op serves: every OnIdle made while it is the
  // last op submitted joins it, so host waits that time out over and over
  // on a stalled queue add no ops.
  struct IdleGroup {
    absl::Mutex mu;
    bool ran ABSL_GUARDED_BY(mu) = false;
    std::vector<std::shared_ptr<WatchFor<absl::Status>>> watches
        ABSL_GUARDED_BY(mu);
    size_t swept_size ABSL_GUARDED_BY(mu) = 0;  // SweepCancelled's mark.
  };
  struct Op {
    absl::AnyInvocable<absl::Status(GpuQueueCore&)> issue;
    absl::AnyInvocable<void(absl::Status)> done;
    absl::AnyInvocable<bool()> ready;
    bool prompt = false;  // Mark right after it: someone awaits `done`.
    bool counted = true;  // A client's command (WorkAccount counters).
    bool kernel = false;  // A kernel launch (DeviceFailure's suspects).
    std::shared_ptr<IdleGroup> idle;  // OnIdle's no-op: the watches it serves.
  };

  // `account` is not null. `progress`: the progress word, reading 0, whose
  // slot the core owns; a null `progress.host` makes markers event records.
  // JoinAdmission must follow, before any Submit. `partition`: the SM
  // partition whose green context made `stream` (null: none), held until
  // the stream is destroyed.
  GpuQueueCore(GpuDevice* device, GpuStreamHandle stream, uint64_t epoch,
               GpuSlotAllocator::Slot progress,
               std::shared_ptr<WorkAccount> account,
               absl::AnyInvocable<void(const absl::Status&)> on_error,
               std::shared_ptr<SmPartition> partition = nullptr)
      : device_(device),
        stream_(stream),
        epoch_(epoch),
        progress_(progress),
        account_(std::move(account)),
        on_error_(std::move(on_error)),
        partition_(std::move(partition)) {}
  ~GpuQueueCore() override;
  // Takes the queue's place in the device's admission (it needs
  // weak_from_this, so not in the constructor).
  void JoinAdmission(uint64_t session_key);
  uint64_t session_key() const { return session_key_; }

  GpuStreamHandle stream() const { return stream_; }
  GpuDevice& device() { return *device_; }
  // The SMs the stream's work runs on: its partition's, or the device's.
  uint32_t sm_count() const;
  // Its SM partition (null: none) and the context epoch of its stream.
  const std::shared_ptr<SmPartition>& partition() const { return partition_; }
  uint64_t epoch() const { return epoch_; }
  // Only from inside an Op's `issue` (mu_ held): part of the op is on the
  // stream already and the rest failed with `status`. The op counts as
  // issued (the part on the stream runs) and the queue becomes sticky.
  void IssuedPartly(absl::Status status);
  const std::shared_ptr<WorkAccount>& account() const { return account_; }

  // Issues `op` now if the stream has room and nothing is held before it,
  // else holds it. A sticky queue completes it at once with the error.
  absl::Status Submit(Op op);
  std::shared_ptr<Watch> OnIdle(absl::AnyInvocable<void(absl::Status)> done);
  void Cancel(const absl::Status& reason);
  // The device failed: everything completes with `status`.
  // Returns whether a kernel of the queue was issued and not completed:
  // it may be the one that failed the device.
  bool Fail(const absl::Status& status);
  bool IsIdle();
  // Enqueued commands not yet completed or dropped (this queue's share of
  // its account's inflight_commands).
  uint64_t inflight_commands() const { return inflight_.value(); }
  // The queue's sticky error; the device's failure (or reset) as soon as
  // the device knows of it, before Fail() has run.
  absl::Status error();
  // The GpuQueue is gone: destroy the stream once idle.
  void Retire();

  // The queue's admission turn (GpuAdmission::Pump, on the dispatcher).
  void PumpAdmitted() override;
  // One tick, on the dispatcher: completes what the markers say has landed,
  // hands held work on, marks unmarked work, checks the stream for a fatal
  // error. Returns how long until the queue wants its next tick
  // (absl::InfiniteDuration() once it has nothing outstanding).
  absl::Duration Tick();

 private:
  struct Pending {
    uint64_t at;  // Runs once `completed_` reaches it.
    absl::AnyInvocable<void(absl::Status)> done;
    bool skipped;  // Enqueued after the sticky error: gets that error.
    bool idle;     // An OnIdle no-op's: runs once the queue is idle.
  };
  // A callback due, with its outcome. `idle`: an OnIdle group's, which
  // runs once the queue is idle (after the others of its batch).
  struct Callback {
    Callback(absl::AnyInvocable<void(absl::Status)> done, absl::Status status,
             bool idle = false)
        : done(std::move(done)), status(std::move(status)), idle(idle) {}
    absl::AnyInvocable<void(absl::Status)> done;
    absl::Status status;
    bool idle;
  };
  using Callbacks = std::vector<Callback>;
  // Callbacks made due under mu_, in the order they must run. From then
  // until the last that is not an OnIdle's has run, the queue counts them
  // in delivering_ (it is not idle while a read's data or a host function
  // is still to come), whichever thread delivers them.
  struct Delivery {
    Callbacks callbacks;
    size_t busy = 0;  // How many run before delivering_ drops again.
  };

  // Issues `op` (mu_ held), admitted already. On error the op is handed
  // back untouched. A marker the driver refuses makes the queue sticky:
  // held work then goes to `out`.
  absl::Status IssueLocked(Op& op, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a marker of issued_ on the stream. `prompt`: someone awaits it.
  absl::Status MarkLocked(bool prompt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The issue count the markers say has completed.
  uint64_t LandedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Everything issued up to `count` is complete (seen at `end_ns`,
  // MonotonicNanos): settles it and runs what awaited it.
  void Completed(uint64_t count, int64_t end_ns);
  // Puts the queue on the dispatcher's polling list unless it is there.
  void TrackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Issues held work while the stream and admission have room; waits for
  // admission when it refuses. `pumped`: the queue's admission turn (one
  // grant, then back to the end of the line). Errors become sticky.
  void PumpLocked(Callbacks* out, bool pumped = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Issued operations up to `upto` left the stream (ran, or dropped when
  // `!ran`): the WorkAccount counters. Returns how many.
  uint64_t SettleLocked(uint64_t upto, bool ran)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queue holds work admission refused: in line for a turn. Unwait:
  // it holds none any more (issued through its floor, or dropped), so that
  // its tenant does not look backlogged.
  void WaitAdmissionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnwaitAdmissionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `status` the queue's sticky error (the first one stays) and
  // drops the held work: its callbacks get the error, in `out` when
  // nothing is outstanding, else in pending_ behind the issued work.
  void StickLocked(const absl::Status& status, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return held_.empty() && completed_ == issued_ && delivering_ == 0;
  }
  void MaybeDestroyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `callbacks` due: counts them in delivering_ and queues them in
  // to_deliver_, in the order they became due; whether there were any (then
  // Deliver once mu_ is released). Every callback the queue makes goes this
  // way.
  bool DueLocked(Callbacks callbacks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs what is due on the dispatcher: at once when already there, else
  // posted.
  void Deliver() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the due deliveries in order, each callback outside mu_, and stops
  // counting one after its last callback that is not an OnIdle's. One
  // thread drains at a time (the dispatcher, or after it stopped the
  // poster): a delivery made meanwhile (a callback that enqueues on this
  // queue, another thread's Cancel) runs after the ones before it, never
  // inside or ahead of them.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // The device failed, or was reset since the stream was made: no pass is
  // granted for epoch_, and Fail() comes (or came) for this queue.
  bool Lost() const;
  // Destroys the stream on the cleanup thread, once.
  void ReleaseStream();

  GpuDevice* const device_;
  const GpuStreamHandle stream_;
  const uint64_t epoch_;
  // Written by the stream's markers (not under mu_: read with atomic_ref).
  const GpuSlotAllocator::Slot progress_;
  const std::shared_ptr<WorkAccount> account_;
  InflightCount inflight_;
  void ChargeInflight(int64_t n) { inflight_.Charge(*account_, n); }
  // Set once by JoinAdmission, before the core is shared.
  std::unique_ptr<GpuAdmission::Member> member_;
  uint64_t session_key_ = 0;  // Set with member_.
  absl::AnyInvocable<void(const absl::Status&)> on_error_;
  const std::shared_ptr<SmPartition> partition_;

  absl::Mutex mu_;
  std::deque<Op> held_ ABSL_GUARDED_BY(mu_);
  // The idle group of the last op submitted, if it was OnIdle's.
  std::shared_ptr<IdleGroup> last_idle_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t marked_ ABSL_GUARDED_BY(mu_) = 0;
  // The issue count of the last kernel launch (Op::kernel).
  uint64_t kernel_issued_ ABSL_GUARDED_BY(mu_) = 0;
  // Event markers (no progress word): the count each one completes.
  struct EventMark {
    uint64_t count;
    GpuEventHandle event;
  };
  std::deque<EventMark> event_marks_ ABSL_GUARDED_BY(mu_);
  // The last prompt marker: its count and when it was issued
  // (MonotonicNanos), for the polling period.
  uint64_t prompt_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prompt_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Issue numbers (1-based, as issued_) of internal operations not yet
  // settled: completions do not count them.
  std::deque<uint64_t> uncounted_ ABSL_GUARDED_BY(mu_);
  // Busy time: work issued to an idle stream starts at its issue; later
  // batches start when the previous one completed (MonotonicNanos).
  int64_t busy_start_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_complete_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Deliveries whose callbacks have not all run yet (DueLocked): the queue
  // is not idle until they have (a host function, a read's data).
  int delivering_ ABSL_GUARDED_BY(mu_) = 0;
  // Due and not yet run (DueLocked), and whether a thread is running them.
  std::deque<Delivery> to_deliver_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_issue_ ABSL_GUARDED_BY(mu_);
  absl::Time last_query_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  absl::Status partly_ ABSL_GUARDED_BY(mu_);  // IssuedPartly's, once.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  bool tracked_ ABSL_GUARDED_BY(mu_) = false;  // On the polling list.
  // In admission's line, as far as this queue knows (the pump takes it off
  // before its turn, PumpAdmitted).
  bool waiting_admission_ ABSL_GUARDED_BY(mu_) = false;
};

// The native calls behind a launch, a copy and a fill, on `stream` of
// `device` (its context current): GpuQueue's ops make them from inside
// their issue, and graph capture records them (gpu_graph.cc).
absl::Status IssueLaunch(GpuDevice& device, GpuStreamHandle stream,
                         const GpuKernel& kernel, const LaunchConfig& config,
                         const GpuArgBlock& args);
absl::Status IssueCopy(GpuDevice& device, GpuStreamHandle stream,
                       const Buffer& src, uint64_t src_offset,
                       const Buffer& dst, uint64_t dst_offset, uint64_t size);
absl::Status IssueFill(GpuDevice& device, GpuStreamHandle stream,
                       const Buffer& dst, uint64_t offset, uint64_t size,
                       uint32_t value);
// From `host`, pinned memory that lives until the copy ran.
absl::Status IssueWrite(GpuDevice& device, GpuStreamHandle stream,
                        const Buffer& dst, uint64_t offset, const void* host,
                        uint64_t size);
// A launch's arguments as the kernel takes them, buffers as device
// addresses.
GpuArgBlock PackGpuArgs(const GpuKernel& kernel,
                        const std::vector<KernelArg>& args);

// The Queue the session layer holds. Destroying it retires the core: the
// stream goes once its work is done.
class GpuQueue : public Queue {
 public:
  explicit GpuQueue(std::shared_ptr<GpuQueueCore> core)
      : core_(std::move(core)) {}
  ~GpuQueue() override { core_->Retire(); }

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
  // Runs of launches, copies and fills as executable graphs where the
  // driver has them (gpu_graph.cc); the rest one by one.
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
  // `counted`: false for the record WaitQueue puts on the other queue.
  absl::Status Record(std::shared_ptr<GpuEventPoint> point,
                      bool counted = true);
  absl::Status WaitPoint(std::shared_ptr<GpuEventPoint> point);

  const std::shared_ptr<GpuQueueCore> core_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_QUEUE_H_
