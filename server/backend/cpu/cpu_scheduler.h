// The CPU device's execution threads and the weighted fair queuing that
// decides which queue runs next on them.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_SCHEDULER_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/cpu/cpu_watchdog.h"
#include "server/backend/work_account.h"

namespace gpustream::backend {

// A fixed pool of execution threads shared by every queue of the device.
// A task (a CpuQueue) runs on one thread at a time, in turns: a turn runs
// one operation (several when they are quick: CpuQueueCore's slice). A
// task with no operation ready (idle, or parked on a wait) is in no run
// list and costs nothing.
//
// Who runs next is weighted fair queuing on measured execution time (the
// wall time a turn occupied a thread), in three levels:
//   1. tenants (WorkAccount, by pointer): start-time fair queuing. A
//      tenant's virtual time grows by exec_ns / weight (weight read when
//      the turn starts); the runnable tenant with the least virtual time
//      goes next. A tenant that becomes active (runnable or running) after
//      being idle starts at max(its virtual time, the least runnable one,
//      the last one picked): idling banks no credit.
//   2. sessions of a tenant (session_key): the same, weight 1 each, so
//      they share their tenant's time equally.
//   3. queues of a session: the greatest priority first (numerically
//      lowest, as CUDA), round-robin between equal priorities.
// A turn is charged when it starts, by the task's previous turn's time,
// and corrected by the measured time when it ends: many threads picking at
// once do not all see a tenant as owed. Each pick and charge is O(log n)
// in the runnable tenants, sessions and queues. (The task itself adds its
// operations' time to WorkAccount::busy_ns, before their completion shows.)
//
// Thread-safe. Lock order: task locks before the scheduler's; the
// scheduler calls tasks (RunNext, destructors) without its lock.
class CpuScheduler {
 public:
  // What a queue is to the scheduler.
  class Task {
   public:
    virtual ~Task() = default;
    // Runs the task's turn (its next operation, or a short run of them)
    // on the calling execution thread, whose launch slot is `slot`.
    // Returns whether another operation is ready at once (the task stays
    // runnable); false when none is (it calls Wake again when one is).
    virtual bool RunNext(LaunchSlot& slot) = 0;
  };

  // A task's place in the hierarchy: created by Add, owned by the
  // scheduler, destroyed by Remove.
  class Entry;

  // `threads`: 0 for std::thread::hardware_concurrency(). `kernel_time_limit`
  // bounds every launch (the watchdog's limit; <= 0 or infinite: none).
  CpuScheduler(uint32_t threads, absl::Duration kernel_time_limit);
  // Stop(), then drops what is still runnable.
  ~CpuScheduler();
  CpuScheduler(const CpuScheduler&) = delete;
  CpuScheduler& operator=(const CpuScheduler&) = delete;

  uint32_t threads() const { return static_cast<uint32_t>(threads_.size()); }
  absl::Duration kernel_time_limit() const { return limit_; }

  // Registers a task of `account` (which it holds) in session
  // `session_key`, at `priority`. The entry is idle until Wake.
  Entry* Add(std::shared_ptr<WorkAccount> account, uint64_t session_key,
             int32_t priority);
  // The task is gone. Its entry must be idle: a task that was woken is
  // kept alive by the scheduler until its last turn has returned false.
  void Remove(Entry* entry);
  // `task` (the entry's) has an operation ready: makes it runnable, or, if
  // it is running, runnable again after its turn whatever the turn
  // returns. Holds `task` until it is idle again. Idempotent; never blocks
  // on a running task.
  void Wake(Entry* entry, std::shared_ptr<Task> task);

  // Lets the threads finish what is runnable, then joins them. Tasks woken
  // afterwards are not run. Idempotent; the destructor calls it.
  void Stop();

 private:
  struct Session;
  struct Tenant;
  struct ByVtime {
    template <typename T>
    bool operator()(const T* a, const T* b) const {
      return a->vtime != b->vtime ? a->vtime < b->vtime : a->id < b->id;
    }
  };
  struct ByPriority {
    bool operator()(const Entry* a, const Entry* b) const;
  };

  void Loop(size_t index);
  // Takes the next entry off the run lists and charges its estimate.
  Entry* PickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The turn of `entry` took `exec_ns`; `more`: it has work ready. Returns
  // the task to release (outside the lock) when the entry went idle.
  std::shared_ptr<Task> FinishLocked(Entry* entry, uint64_t exec_ns, bool more)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts an entry on its session's run list (and its session and tenant on
  // theirs). `returning`: after its own turn, not from idle.
  void MakeRunnableLocked(Entry* entry, bool returning)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `ns` of execution time to the entry's session and tenant.
  void ChargeLocked(Entry* entry, double ns, uint32_t weight)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration limit_;
  CpuWatchdog watchdog_;

  absl::Mutex mu_;
  absl::CondVar work_;  // Signalled when an entry becomes runnable.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_turn_ ABSL_GUARDED_BY(mu_) = 0;  // Round-robin order.
  // The virtual time of the tenant picked last: never decreases.
  double clock_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<const WorkAccount*, std::unique_ptr<Tenant>> tenants_
      ABSL_GUARDED_BY(mu_);
  std::set<Tenant*, ByVtime> runnable_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_SCHEDULER_H_
