// The CPU execution pool and its weighted fair queuing.
#include "server/backend/cpu/cpu_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

namespace gpustream::backend {

// The scheduler's records: all guarded by CpuScheduler::mu_.
struct CpuScheduler::Session {
  Tenant* tenant = nullptr;
  uint64_t key = 0;
  uint64_t id = 0;
  double vtime = 0;  // Execution ns (sessions weigh the same).
  int entries = 0;
  int running = 0;
  std::set<Entry*, ByPriority> runnable;
};

struct CpuScheduler::Tenant {
  std::shared_ptr<WorkAccount> account;
  uint64_t id = 0;
  double vtime = 0;  // Execution ns / weight.
  // The virtual time of the session picked last: never decreases.
  double session_clock = 0;
  int entries = 0;  // Registered, for removal.
  int running = 0;  // Turns of its queues in progress.
  std::set<Session*, ByVtime> runnable;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Session>> sessions;
};

class CpuScheduler::Entry {
 public:
  enum class State { kIdle, kRunnable, kRunning };

  Session* session = nullptr;
  int32_t priority = 0;
  uint64_t turn = 0;  // Round-robin position among equal priorities.
  State state = State::kIdle;
  bool rearm = false;  // Woken while running: runnable again after.
  // The task's last turn (its next turn's estimate), and what its current
  // turn was charged with.
  uint64_t last_ns = 0;
  uint32_t charged_weight = 1;
  std::shared_ptr<Task> task;  // Held while runnable or running.
};

bool CpuScheduler::ByPriority::operator()(const Entry* a,
                                          const Entry* b) const {
  return a->priority != b->priority ? a->priority < b->priority
                                    : a->turn < b->turn;
}

CpuScheduler::CpuScheduler(uint32_t threads, absl::Duration kernel_time_limit)
    : limit_(kernel_time_limit),
      watchdog_(kernel_time_limit,
                threads != 0
                    ? threads
                    : std::max(1u, std::thread::hardware_concurrency())) {
  for (size_t i = 0; i < watchdog_.size(); ++i) {
    threads_.emplace_back(&CpuScheduler::Loop, this, i);
  }
}

CpuScheduler::~CpuScheduler() {
  Stop();
  std::vector<std::shared_ptr<Task>> left;  // Released outside the lock.
  {
    absl::MutexLock lock(&mu_);
    for (Tenant* tenant : runnable_) {
      for (Session* session : tenant->runnable) {
        for (Entry* entry : session->runnable) {
          entry->state = Entry::State::kIdle;
          left.push_back(std::move(entry->task));
        }
        session->runnable.clear();
      }
      tenant->runnable.clear();
    }
    runnable_.clear();
  }
  left.clear();
  // Entries of tasks that outlive the scheduler would dangle: by contract
  // (the device outlives its queues) there are none.
}

CpuScheduler::Entry* CpuScheduler::Add(std::shared_ptr<WorkAccount> account,
                                       uint64_t session_key, int32_t priority) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Tenant>& tenant = tenants_[account.get()];
  if (tenant == nullptr) {
    tenant = std::make_unique<Tenant>();
    tenant->account = std::move(account);
    tenant->id = ++next_id_;
  }
  std::unique_ptr<Session>& session = tenant->sessions[session_key];
  if (session == nullptr) {
    session = std::make_unique<Session>();
    session->tenant = tenant.get();
    session->key = session_key;
    session->id = ++next_id_;
  }
  ++tenant->entries;
  ++session->entries;
  auto* entry = new Entry();
  entry->session = session.get();
  entry->priority = priority;
  return entry;
}

void CpuScheduler::Remove(Entry* entry) {
  absl::MutexLock lock(&mu_);
  Session* session = entry->session;
  Tenant* tenant = session->tenant;
  delete entry;
  if (--session->entries == 0) tenant->sessions.erase(session->key);
  if (--tenant->entries == 0) tenants_.erase(tenant->account.get());
}

void CpuScheduler::Wake(Entry* entry, std::shared_ptr<Task> task) {
  absl::MutexLock lock(&mu_);
  switch (entry->state) {
    case Entry::State::kIdle:
      entry->task = std::move(task);
      MakeRunnableLocked(entry, /*returning=*/false);
      work_.Signal();
      break;
    case Entry::State::kRunning:
      entry->rearm = true;
      break;
    case Entry::State::kRunnable:
      break;
  }
}

void CpuScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    work_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void CpuScheduler::MakeRunnableLocked(Entry* entry, bool returning) {
  Session* session = entry->session;
  Tenant* tenant = session->tenant;
  if (!returning) {
    // Start-time fair queuing: one that was idle starts no earlier than
    // the virtual time now being served.
    if (tenant->runnable.empty() && tenant->running == 0) {
      double now = clock_;
      if (!runnable_.empty()) now = std::max(now, (*runnable_.begin())->vtime);
      tenant->vtime = std::max(tenant->vtime, now);
    }
    if (session->runnable.empty() && session->running == 0) {
      double now = tenant->session_clock;
      if (!tenant->runnable.empty()) {
        now = std::max(now, (*tenant->runnable.begin())->vtime);
      }
      session->vtime = std::max(session->vtime, now);
    }
  }
  entry->state = Entry::State::kRunnable;
  entry->turn = ++next_turn_;
  session->runnable.insert(entry);
  if (session->runnable.size() == 1) tenant->runnable.insert(session);
  if (tenant->runnable.size() == 1) runnable_.insert(tenant);
}

CpuScheduler::Entry* CpuScheduler::PickLocked() {
  Tenant* tenant = *runnable_.begin();
  Session* session = *tenant->runnable.begin();
  Entry* entry = *session->runnable.begin();
  clock_ = std::max(clock_, tenant->vtime);
  tenant->session_clock = std::max(tenant->session_clock, session->vtime);

  session->runnable.erase(session->runnable.begin());
  if (session->runnable.empty()) tenant->runnable.erase(session);
  if (tenant->runnable.empty()) runnable_.erase(tenant);
  ++session->running;
  ++tenant->running;
  entry->state = Entry::State::kRunning;
  entry->charged_weight = std::max<uint32_t>(
      1, tenant->account->weight.load(std::memory_order_relaxed));
  ChargeLocked(entry, static_cast<double>(entry->last_ns),
               entry->charged_weight);
  return entry;
}

std::shared_ptr<CpuScheduler::Task> CpuScheduler::FinishLocked(Entry* entry,
                                                               uint64_t exec_ns,
                                                               bool more) {
  Session* session = entry->session;
  Tenant* tenant = session->tenant;
  ChargeLocked(
      entry, static_cast<double>(exec_ns) - static_cast<double>(entry->last_ns),
      entry->charged_weight);
  entry->last_ns = exec_ns;
  std::shared_ptr<Task> release;
  if (more || entry->rearm) {
    entry->rearm = false;
    // Still counted as running: a backlogged queue keeps its tenant's and
    // session's place rather than restarting at the current clock.
    MakeRunnableLocked(entry, /*returning=*/true);
  } else {
    entry->state = Entry::State::kIdle;
    release = std::move(entry->task);
  }
  --session->running;
  --tenant->running;
  return release;
}

void CpuScheduler::ChargeLocked(Entry* entry, double ns, uint32_t weight) {
  if (ns == 0) return;
  Session* session = entry->session;
  Tenant* tenant = session->tenant;
  // Keys of ordered sets change only while out of them.
  const bool session_listed = !session->runnable.empty();
  if (session_listed) tenant->runnable.erase(session);
  session->vtime += ns;
  if (session_listed) tenant->runnable.insert(session);
  const bool tenant_listed = !tenant->runnable.empty();
  if (tenant_listed) runnable_.erase(tenant);
  tenant->vtime += ns / weight;
  if (tenant_listed) runnable_.insert(tenant);
}

void CpuScheduler::Loop(size_t index) {
  LaunchSlot& slot = watchdog_.slot(index);
  absl::MutexLock lock(&mu_);
  while (true) {
    while (runnable_.empty() && !stopping_) work_.Wait(&mu_);
    if (runnable_.empty()) return;  // Stopping, and nothing is runnable.
    Entry* entry = PickLocked();
    // Held by the entry until FinishLocked returns it.
    Task* task = entry->task.get();
    mu_.Unlock();
    const auto start = std::chrono::steady_clock::now();
    const bool more = task->RunNext(slot);
    const auto exec_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    mu_.Lock();
    std::shared_ptr<Task> release = FinishLocked(
        entry, static_cast<uint64_t>(std::max<int64_t>(exec_ns, 0)), more);
    if (release != nullptr) {
      // Possibly the task's last reference: its destructor calls Remove.
      mu_.Unlock();
      release.reset();
      mu_.Lock();
    }
  }
}

}  // namespace gpustream::backend
