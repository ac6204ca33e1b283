// Fair-share admission of a GPU device's work to its streams: how many
// operations each tenant may have handed to the driver at once.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_ADMISSION_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_ADMISSION_H_

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/work_account.h"

namespace gpustream::backend {

// Nanoseconds of a monotonic clock (completion stamps, busy time).
inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A GPU runs what its streams hold; the daemon decides what they hold. Each
// account (a tenant on this device) may have at most its *limit* of
// operations handed to the driver and not yet known complete (completion
// comes back through markers, so "in flight" is measured by completion):
//
//   limit(a) = max(kAccountFloor, budget * weight(a) / W)
//
// where W sums the weights of the *active* accounts: those with operations
// in flight on this device or queues waiting for admission. Weights are
// read at scheduling time (an account's own limit uses its weight now;
// its part of W follows at its next admission or completion). Work beyond
// the limit stays held in its queue's FIFO (enqueue never blocks) and the
// queue waits here; the dispatcher's Pump() hands room to waiting queues as
// completions come back.
//
// Work-conserving: a lone active account's limit is the whole budget, and
// an account over its limit may still *borrow* free budget (total in
// flight below the budget) while no other account waits for admission.
// Once another account waits, borrowers issue nothing until they are back
// under their limit, so the shares hold within about one marker batch per
// stream. An account under its limit is admitted at once, even while
// others' borrowing keeps the total above the budget: a newcomer is never
// delayed by earlier borrowing (the total stays below about twice the
// budget).
//
// Within an account, waiting queues are served round-robin by session,
// then by queue within the session, kGrant operations per turn.
//
// Liveness: every queue may keep kQueueFloor operations in flight whatever
// its account's limit. Queues of a tenant wait for each other (events,
// flags written by one queue and awaited by another); without the floor a
// tenant whose in-flight work is parked behind device-side waits could
// never issue the work that releases them. A tenant's queue count is
// bounded by its quota, so the floor bounds what it adds.
//
// What it bounds is the depth of each tenant's work on the device, not GPU
// time: streams that hold work run concurrently under the hardware's own
// scheduler.
//
// Cost: Admit, Wait, Unwait, Completed, Release are O(1); Join and Leave a
// hash lookup; Pump O(accounts waiting) per turn. Thread-safe. The mutex
// is a leaf: nothing is called while it is held, so callers may hold their
// own locks (a queue calls in under its mutex). Pump calls
// Client::PumpAdmitted without the lock.
class GpuAdmission {
 private:
  struct Account;
  struct Session;

 public:
  // Device-wide operations in flight that the shares divide.
  static constexpr uint64_t kDefaultBudget = 1024;
  // Two marker batches: an account at its floor still has one batch
  // running while the completion of the other comes back.
  static constexpr uint64_t kAccountFloor = 128;
  static constexpr uint64_t kQueueFloor = 16;
  // Operations a waiting queue may issue per turn (one marker batch).
  static constexpr uint64_t kGrant = 64;

  // A queue, as the pump sees it.
  class Client {
   public:
    virtual ~Client() = default;
    // The queue's turn: issue held work, asking Admit(..., pumped=true)
    // once, then Wait() again if work is still held for admission. Called
    // on Pump's thread, without the admission lock.
    virtual void PumpAdmitted() = 0;
  };

  // A queue's place in admission; Join() makes one per queue. Its
  // destructor leaves: whatever it still has in flight is released.
  class Member {
   public:
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    friend class GpuAdmission;
    Member(GpuAdmission* admission, Session* session,
           std::weak_ptr<Client> client)
        : admission_(admission), session_(session), client_(client) {}
    GpuAdmission* const admission_;
    Session* const session_;
    const std::weak_ptr<Client> client_;
    // Guarded by admission_->mu_ (not expressible to the analysis).
    uint64_t inflight_ = 0;
    bool waiting_ = false;
    std::list<Member*>::iterator pos_;  // In session_->ring while waiting.
  };

  // `wake` is called (without the lock) when waiting queues may have room:
  // it should make Pump() run soon (the dispatcher's tick).
  explicit GpuAdmission(uint64_t budget = kDefaultBudget,
                        absl::AnyInvocable<void()> wake = nullptr);
  ~GpuAdmission();
  GpuAdmission(const GpuAdmission&) = delete;
  GpuAdmission& operator=(const GpuAdmission&) = delete;

  uint64_t budget() const { return budget_; }

  // A queue charged to `account` (not null) in session `session_key`.
  // Members must go before the GpuAdmission.
  std::unique_ptr<Member> Join(std::shared_ptr<WorkAccount> account,
                               uint64_t session_key,
                               std::weak_ptr<Client> client);

  // How many of `want` operations the member may hand to the driver now
  // (0..want); they count as in flight until Completed or Release.
  // `queue_inflight`: the member's queue's operations in flight (the
  // floor). Unless `pumped` (the member's turn from Pump), nothing beyond
  // the floor is admitted while queues of the same account wait: a queue
  // does not overtake the others of its tenant.
  uint64_t Admit(Member& m, uint64_t want, uint64_t queue_inflight,
                 bool pumped);
  // The member holds work that Admit refused: it waits for a turn (at the
  // back of its session's ring). Idempotent.
  void Wait(Member& m);
  // The member holds nothing for admission any more (its work was dropped).
  void Unwait(Member& m);
  // `n` admitted operations completed; the batch ran on the device over
  // [start_ns, end_ns] (MonotonicNanos): busy time is charged to the
  // account as the union of its batches' intervals on this device.
  void Completed(Member& m, uint64_t n, int64_t start_ns, int64_t end_ns);
  // `n` admitted operations were never issued or were dropped unrun.
  void Release(Member& m, uint64_t n);

  // Gives waiting queues their turns while their accounts have room.
  // Called by one thread at a time (the dispatcher).
  void Pump();
  bool HasWaiting();

  // For tests and stats: the account's operations in flight on this
  // device, its current limit, and whether any of its queues wait.
  struct AccountView {
    uint64_t inflight = 0;
    uint64_t limit = 0;
    bool waiting = false;
  };
  AccountView View(const WorkAccount* account);
  uint64_t total_inflight();

 private:
  void WaitLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnwaitLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Member& m, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Leave(Member& m);
  // Keeps W (total_weight_) in step with the account's activity and
  // weight; forgets an account nobody uses.
  void RefreshLocked(Account& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t LimitLocked(const Account& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayBorrowLocked(const Account& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayIssueLocked(const Account& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return a.inflight < LimitLocked(a) || MayBorrowLocked(a);
  }
  void Wake();

  struct Session {
    Account* account;
    uint64_t key;
    size_t members = 0;
    std::list<Member*> ring;  // Waiting queues, served in turn.
    bool waiting = false;
    std::list<Session*>::iterator pos;  // In account->ring while waiting.
  };
  struct Account {
    std::shared_ptr<WorkAccount> account;
    uint64_t inflight = 0;
    uint32_t active_weight = 0;  // Its part of W; 0 while inactive.
    size_t sessions = 0;         // Session entries alive.
    std::list<Session*> ring;    // Sessions with waiting queues.
    bool waiting = false;
    std::list<Account*>::iterator pos;  // In waiting_ while waiting.
    int64_t covered_until_ns = 0;       // End of the busy time charged.
    absl::flat_hash_map<uint64_t, std::unique_ptr<Session>> by_key;
  };

  const uint64_t budget_;
  absl::AnyInvocable<void()> wake_;
  absl::Mutex mu_;
  absl::flat_hash_map<const WorkAccount*, std::unique_ptr<Account>> accounts_
      ABSL_GUARDED_BY(mu_);
  std::list<Account*> waiting_ ABSL_GUARDED_BY(mu_);  // Round-robin.
  uint64_t total_weight_ ABSL_GUARDED_BY(mu_) = 0;    // W.
  uint64_t total_inflight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_ADMISSION_H_
