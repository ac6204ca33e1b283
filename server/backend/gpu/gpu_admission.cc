// GpuAdmission: shares, the waiting rings and the pump.
#include "server/backend/gpu/gpu_admission.h"

#include <algorithm>
#include <utility>

namespace gpustream::backend {
namespace {

// A bound on Pump's turns per call, against a bug spinning the dispatcher:
// each turn issues work or takes a queue off the rings, so a call ends long
// before (the budget over kGrant, plus the waiting queues).
constexpr int kMaxTurns = 4096;

}  // namespace

GpuAdmission::Member::~Member() { admission_->Leave(*this); }

GpuAdmission::GpuAdmission(uint64_t budget, absl::AnyInvocable<void()> wake)
    : budget_(std::max<uint64_t>(budget, 1)), wake_(std::move(wake)) {}

GpuAdmission::~GpuAdmission() = default;

std::unique_ptr<GpuAdmission::Member> GpuAdmission::Join(
    std::shared_ptr<WorkAccount> account, uint64_t session_key,
    std::weak_ptr<Client> client) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Account>& a = accounts_[account.get()];
  if (a == nullptr) {
    a = std::make_unique<Account>();
    a->account = std::move(account);
  }
  std::unique_ptr<Session>& s = a->by_key[session_key];
  if (s == nullptr) {
    s = std::make_unique<Session>();
    s->account = a.get();
    s->key = session_key;
  }
  ++s->members;
  return std::unique_ptr<Member>(new Member(this, s.get(), std::move(client)));
}

void GpuAdmission::Leave(Member& m) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    const bool had_inflight = m.inflight_ != 0;
    UnwaitLocked(m);
    ReleaseLocked(m, m.inflight_);
    Session* s = m.session_;
    Account& a = *s->account;
    if (--s->members == 0) a.by_key.erase(s->key);  // Never waiting now.
    RefreshLocked(a);  // May forget the account: `a` is gone after this.
    wake = had_inflight && !waiting_.empty();
  }
  if (wake) Wake();
}

uint64_t GpuAdmission::Admit(Member& m, uint64_t want, uint64_t queue_inflight,
                             bool pumped) {
  if (want == 0) return 0;
  absl::MutexLock lock(&mu_);
  Account& a = *m.session_->account;
  // The liveness floor holds whatever the account's state.
  const uint64_t floor = queue_inflight < kQueueFloor
                             ? std::min(want, kQueueFloor - queue_inflight)
                             : 0;
  uint64_t share = 0;
  // Outside its turn, a queue does not overtake its tenant's waiting ones.
  if (pumped || (!m.waiting_ && !a.waiting)) {
    const uint64_t limit = LimitLocked(a);
    if (a.inflight < limit) {
      share = std::min(want, limit - a.inflight);
    } else if (MayBorrowLocked(a)) {
      share = std::min(want, budget_ - total_inflight_);
    }
  }
  const uint64_t grant = std::max(floor, share);
  if (grant != 0) {
    a.inflight += grant;
    m.inflight_ += grant;
    total_inflight_ += grant;
    RefreshLocked(a);
  }
  return grant;
}

void GpuAdmission::Wait(Member& m) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    WaitLocked(m);
    // Only when there is room now: a queue re-waiting with none must not
    // make the dispatcher spin.
    wake = MayIssueLocked(*m.session_->account);
  }
  if (wake) Wake();
}

void GpuAdmission::Unwait(Member& m) {
  absl::MutexLock lock(&mu_);
  UnwaitLocked(m);
}

void GpuAdmission::Completed(Member& m, uint64_t n, int64_t start_ns,
                             int64_t end_ns) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    Account& a = *m.session_->account;
    // The union of the account's batches, approximately: batches of
    // several streams complete out of order, and a batch that started
    // before the covered end but completes after it is charged from that
    // end only.
    const int64_t from = std::max(start_ns, a.covered_until_ns);
    if (end_ns > from) {
      a.account->busy_ns.fetch_add(static_cast<uint64_t>(end_ns - from),
                                   std::memory_order_relaxed);
    }
    a.covered_until_ns = std::max(a.covered_until_ns, end_ns);
    ReleaseLocked(m, n);
    wake = n != 0 && !waiting_.empty();
  }
  if (wake) Wake();
}

void GpuAdmission::Release(Member& m, uint64_t n) {
  if (n == 0) return;
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    ReleaseLocked(m, n);
    wake = !waiting_.empty();
  }
  if (wake) Wake();
}

void GpuAdmission::Pump() {
  for (int turn = 0; turn < kMaxTurns; ++turn) {
    std::shared_ptr<Client> client;
    {
      absl::MutexLock lock(&mu_);
      // The next account, round-robin, that may issue now.
      Account* chosen = nullptr;
      for (size_t i = 0, n = waiting_.size(); i < n; ++i) {
        Account* a = waiting_.front();
        // splice keeps iterators (a->pos) valid.
        waiting_.splice(waiting_.end(), waiting_, waiting_.begin());
        if (MayIssueLocked(*a)) {
          chosen = a;
          break;
        }
      }
      if (chosen == nullptr) return;
      // Its next session, then that session's next queue. The queue leaves
      // the ring for its turn and waits again at the back if it still has
      // work held for admission.
      Session* s = chosen->ring.front();
      chosen->ring.splice(chosen->ring.end(), chosen->ring,
                          chosen->ring.begin());
      Member* m = s->ring.front();
      client = m->client_.lock();
      UnwaitLocked(*m);
    }
    // A queue being destroyed has nothing to issue.
    if (client != nullptr) client->PumpAdmitted();
  }
}

bool GpuAdmission::HasWaiting() {
  absl::MutexLock lock(&mu_);
  return !waiting_.empty();
}

GpuAdmission::AccountView GpuAdmission::View(const WorkAccount* account) {
  absl::MutexLock lock(&mu_);
  auto it = accounts_.find(account);
  if (it == accounts_.end()) return {};
  const Account& a = *it->second;
  return {a.inflight, LimitLocked(a), a.waiting};
}

uint64_t GpuAdmission::total_inflight() {
  absl::MutexLock lock(&mu_);
  return total_inflight_;
}

void GpuAdmission::WaitLocked(Member& m) {
  if (m.waiting_) return;
  Session& s = *m.session_;
  Account& a = *s.account;
  m.waiting_ = true;
  m.pos_ = s.ring.insert(s.ring.end(), &m);
  if (!s.waiting) {
    s.waiting = true;
    s.pos = a.ring.insert(a.ring.end(), &s);
  }
  if (!a.waiting) {
    a.waiting = true;
    a.pos = waiting_.insert(waiting_.end(), &a);
  }
  RefreshLocked(a);
}

void GpuAdmission::UnwaitLocked(Member& m) {
  if (!m.waiting_) return;
  Session& s = *m.session_;
  Account& a = *s.account;
  m.waiting_ = false;
  s.ring.erase(m.pos_);
  if (s.ring.empty()) {
    s.waiting = false;
    a.ring.erase(s.pos);
  }
  if (a.ring.empty()) {
    a.waiting = false;
    waiting_.erase(a.pos);
  }
  RefreshLocked(a);  // The member's session keeps the account.
}

void GpuAdmission::ReleaseLocked(Member& m, uint64_t n) {
  n = std::min(n, m.inflight_);
  if (n == 0) return;
  Account& a = *m.session_->account;
  m.inflight_ -= n;
  a.inflight -= n;
  total_inflight_ -= n;
  RefreshLocked(a);  // The member's session keeps the account.
}

void GpuAdmission::RefreshLocked(Account& a) {
  const bool active = a.inflight != 0 || a.waiting;
  // Read at scheduling time: a reload's new weight applies from here on.
  const uint32_t weight =
      active ? std::max<uint32_t>(
                   a.account->weight.load(std::memory_order_relaxed), 1)
             : 0;
  total_weight_ = total_weight_ - a.active_weight + weight;
  a.active_weight = weight;
  if (!active && a.by_key.empty()) {
    const WorkAccount* key = a.account.get();
    accounts_.erase(key);  // Destroys `a`.
  }
}

uint64_t GpuAdmission::LimitLocked(const Account& a) {
  // As if active: an account about to issue counts itself in W.
  const uint64_t weight =
      std::max<uint32_t>(a.account->weight.load(std::memory_order_relaxed), 1);
  const uint64_t total = total_weight_ - a.active_weight + weight;
  return std::max(kAccountFloor, budget_ * weight / total);
}

bool GpuAdmission::MayBorrowLocked(const Account& a) {
  const size_t others_waiting = waiting_.size() - (a.waiting ? 1 : 0);
  return total_inflight_ < budget_ && others_waiting == 0;
}

void GpuAdmission::Wake() {
  if (wake_) wake_();
}

}  // namespace gpustream::backend
