// Session lifecycle: ids, leases and background teardown.
#include "server/session/session_manager.h"

#include <sys/random.h>

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/log/log.h"

namespace gpustream::session {
namespace {

// `Bytes` bytes from the kernel's CSPRNG, hex-encoded.
template <size_t Bytes>
std::string RandomHex() {
  char bytes[Bytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += n;
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

// 128 bits: unguessable.
std::string NewSessionId() { return RandomHex<16>(); }
// A name for admins, unrelated to the secret id.
std::string NewPublicId() { return "s-" + RandomHex<8>(); }

}  // namespace

SessionManager::SessionManager(std::vector<DeviceSlot> devices,
                               util::TimerThread* timer,
                               const tenants::TenantRegistry* tenants,
                               ManagerOptions options)
    : devices_(std::move(devices)),
      timer_(timer),
      tenants_(tenants),
      options_(options),
      housekeeper_(&SessionManager::Housekeep, this) {}

SessionManager::~SessionManager() {
  CloseAll();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  housekeeper_.join();
}

absl::Status SessionManager::CheckFairShare(const tenants::Tenant& tenant) {
  const size_t max = options_.max_sessions;
  if (sessions_.size() + opening_ >= max) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon serves the maximum of ", max, " sessions (max_sessions)"));
  }
  // Each tenant's guaranteed share: max_sessions split by weight, at least
  // one session (a light tenant must never be locked out by a heavy one).
  // Room left after the shares other tenants have not used yet is open to
  // anyone.
  const auto all = tenants_->All();
  uint64_t total_weight = 0;
  for (const auto& t : all) total_weight += t->weight();
  auto share = [&](const tenants::Tenant& t) -> uint64_t {
    return std::max<uint64_t>(
        1, max * t.weight() / std::max<uint64_t>(total_weight, 1));
  };
  uint64_t held_for_others = 0;
  for (const auto& t : all) {
    if (t.get() == &tenant) continue;
    const uint64_t s = share(*t);
    if (t->sessions() < s) held_for_others += s - t->sessions();
  }
  // A tenant outside the split (the local operator: root or the daemon's
  // own user, trusted with the machine) takes part in no share: it may use
  // any session free under max_sessions, checked above.
  const bool shared = std::any_of(all.begin(), all.end(), [&](const auto& t) {
    return t.get() == &tenant;
  });
  if (!shared) return absl::OkStatus();
  const uint64_t mine = tenant.sessions();
  // Opens in progress count as sessions (other tenants' are in their
  // sessions() already, which lowered held_for_others).
  if (mine < share(tenant) ||
      sessions_.size() + opening_ + 1 + held_for_others <= max) {
    return absl::OkStatus();
  }
  // Says nothing of other tenants' counts.
  return absl::ResourceExhaustedError(absl::StrCat(
      "tenant '", tenant.name(), "' holds ", mine,
      " sessions, past its fair share ", share(tenant), " of max_sessions ",
      max, "; the free sessions left are held for other tenants' shares"));
}

absl::Status SessionManager::Open(const tenants::Principal& who,
                                  const v1::OpenSessionRequest& req,
                                  v1::OpenSessionResponse* resp) {
  if (req.device_id() >= devices_.size()) {
    return absl::NotFoundError(
        absl::StrCat("unknown device_id ", req.device_id(), ": the daemon has ",
                     devices_.size(), " device(s)"));
  }
  const uint32_t lease_s =
      std::min(req.lease_seconds() == 0 ? options_.default_lease_seconds
                                        : req.lease_seconds(),
               options_.max_lease_seconds);
  // The quotas first (a refused tenant costs no context), held from the
  // limit check to the reservation so that concurrent opens cannot pass
  // the limit together.
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("daemon shutting down");
    if (auto s = CheckFairShare(*who.tenant); !s.ok()) return s;
    if (auto s = who.tenant->ReserveSession(); !s.ok()) return s;
    ++opening_;
  }
  // Outside the lock: a tenant's first session on a device may create its
  // context there (which loads modules).
  absl::StatusOr<Placement> placement =
      devices_[req.device_id()].sharing->Place(who.name());
  absl::MutexLock lock(&mu_);
  --opening_;
  if (!placement.ok() || stopping_) {
    who.tenant->ReleaseSession();
    return !placement.ok() ? placement.status()
                           : absl::UnavailableError("daemon shutting down");
  }
  const std::string public_id = NewPublicId();
  auto session = Session::Create(
      NewSessionId(),
      {who.name(), req.client_name(), req.device_id(), public_id},
      {placement->device, placement->modules, timer_, options_.session_limits,
       who.tenant, next_session_key_++, placement->partition, placement->hold,
       options_.share_tickets});
  if (!session.ok()) {
    who.tenant->ReleaseSession();
    return session.status();
  }
  resp->set_session_id((*session)->id());
  resp->set_default_queue_id((*session)->default_queue_id());
  resp->set_public_id(public_id);
  resp->set_lease_seconds(lease_s);
  public_ids_.emplace(public_id, resp->session_id());
  log::Info("session_opened")
      .Str("tenant", who.name())
      .Str("client", req.client_name())
      .Str("session", public_id)
      .Num("device", req.device_id())
      .Num("lease_s", lease_s);
  sessions_.emplace(resp->session_id(),
                    Entry{*std::move(session), absl::Seconds(lease_s)});
  return absl::OkStatus();
}

absl::StatusOr<SessionManager::Entry*> SessionManager::Lookup(
    const std::string& tenant, const std::string& session_id) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || it->second.session->owner().tenant != tenant) {
    if (stopping_) return absl::UnavailableError("daemon shutting down");
    if (auto ended = ended_.find(session_id);
        ended != ended_.end() && ended->second.tenant == tenant) {
      return ended->second.reason;
    }
    // The id is a secret: never echoed, not even to whoever sent it.
    return absl::NotFoundError(
        "unknown session_id: no live session of this tenant has it");
  }
  return &it->second;
}

void SessionManager::Close(const std::string& tenant,
                           const std::string& session_id,
                           absl::AnyInvocable<void(absl::Status)> done) {
  absl::MutexLock lock(&mu_);
  // `done` never runs under the lock, nor on the caller's thread.
  auto entry = Lookup(tenant, session_id);
  if (!entry.ok()) {
    chores_.push_back([done = std::move(done),
                       status = entry.status()]() mutable { done(status); });
    return;
  }
  const std::string public_id = (*entry)->session->owner().public_id;
  StartTeardown(
      Take(sessions_.find(session_id)),
      absl::CancelledError(absl::StrCat("session ", public_id, " was closed")),
      "closed", std::move(done));
}

absl::Status SessionManager::KeepAlive(const std::string& tenant,
                                       const v1::KeepAliveRequest& req,
                                       v1::KeepAliveResponse* resp) {
  absl::MutexLock lock(&mu_);
  auto entry = Lookup(tenant, req.session_id());
  if (!entry.ok()) return entry.status();
  (*entry)->session->Touch();
  (*entry)->warned = false;
  resp->set_lease_seconds(absl::ToInt64Seconds((*entry)->lease));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Find(
    const std::string& tenant, const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  auto entry = Lookup(tenant, session_id);
  if (!entry.ok()) return entry.status();
  (*entry)->session->Touch();
  (*entry)->warned = false;
  return (*entry)->session;
}

void SessionManager::List(v1::ListSessionsResponse* resp) {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : sessions_) sessions.push_back(entry.session);
  }
  for (auto& session : sessions) session->Describe(resp->add_sessions());
}

std::shared_ptr<Session> SessionManager::Take(
    absl::flat_hash_map<std::string, Entry>::iterator it) {
  std::shared_ptr<Session> session = std::move(it->second.session);
  public_ids_.erase(session->owner().public_id);
  sessions_.erase(it);
  return session;
}

void SessionManager::Abort(absl::flat_hash_map<std::string, Entry>::iterator it,
                           const absl::Status& reason, absl::string_view cause,
                           absl::AnyInvocable<void(absl::Status)> done) {
  RememberEnded(it->first, it->second.session->owner().tenant, reason);
  StartTeardown(Take(it), reason, cause, std::move(done));
}

absl::Status SessionManager::Kill(const std::string& public_id,
                                  const std::string& by) {
  absl::MutexLock lock(&mu_);
  auto id = public_ids_.find(public_id);
  if (id == public_ids_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no live session has public_id '", public_id, "'"));
  }
  Abort(sessions_.find(id->second),
        absl::AbortedError(absl::StrCat("an administrator (tenant '", by,
                                        "') ended session ", public_id)),
        "killed", nullptr);
  return absl::OkStatus();
}

void SessionManager::EndTenant(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  const absl::Status reason = absl::AbortedError(absl::StrCat(
      "tenant '", tenant, "' was removed from the daemon's configuration"));
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (it->second.session->owner().tenant == tenant)
      Abort(it, reason, "tenant_removed", nullptr);
    it = next;
  }
}

void SessionManager::StartTeardown(
    std::shared_ptr<Session> session, absl::Status reason,
    absl::string_view cause, absl::AnyInvocable<void(absl::Status)> done) {
  const SessionOwner& owner = session->owner();
  log::Info("session_ended")
      .Str("tenant", owner.tenant)
      .Str("client", owner.client_name)
      .Str("session", owner.public_id)
      .Num("device", owner.device_id)
      .Str("cause", cause)
      .Num("age_s", absl::ToDoubleSeconds(absl::Now() - session->opened_at()));
  ++teardowns_in_flight_;
  session->Refuse(reason);  // At once: later commands must not run on it.
  std::thread([this, session = std::move(session), reason = std::move(reason),
               done = std::move(done)]() mutable {
    session->Teardown(reason);
    session->tenant()->ReleaseSession();
    session.reset();
    if (done) done(absl::OkStatus());
    absl::MutexLock lock(&mu_);
    --teardowns_in_flight_;
  }).detach();
}

void SessionManager::CloseAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, entry] : sessions_) {
    StartTeardown(std::move(entry.session),
                  absl::UnavailableError("daemon shutting down"), "shutdown",
                  nullptr);
  }
  sessions_.clear();
  public_ids_.clear();
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return teardowns_in_flight_ == 0;
  };
  mu_.Await(absl::Condition(&drained));
}

void SessionManager::AbortDevice(uint32_t device_id,
                                 const backend::Device* context,
                                 const absl::Status& reason,
                                 absl::AnyInvocable<void()> done) {
  struct Countdown {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 1;  // The loop below holds one.
    absl::AnyInvocable<void()> done;
    void Down() {
      {
        absl::MutexLock lock(&mu);
        if (--left != 0) return;
      }
      done();
    }
  };
  auto countdown = std::make_shared<Countdown>();
  countdown->done = std::move(done);
  absl::MutexLock lock(&mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    const Session& session = *it->second.session;
    if (session.owner().device_id == device_id &&
        (context == nullptr || session.device() == context)) {
      {
        absl::MutexLock count_lock(&countdown->mu);
        ++countdown->left;
      }
      Abort(it, reason, "device_failed",
            [countdown](absl::Status) { countdown->Down(); });
    }
    it = next;
  }
  chores_.push_back([countdown] { countdown->Down(); });
}

std::vector<std::string> SessionManager::DescribeSessions(
    uint32_t device_id, absl::Span<const uint64_t> keys) {
  std::vector<std::string> names;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : sessions_) {
    const Session& session = *entry.session;
    if (session.owner().device_id != device_id ||
        !absl::c_linear_search(keys, session.session_key())) {
      continue;
    }
    names.push_back(absl::StrCat("session ", session.owner().public_id,
                                 " (tenant '", session.owner().tenant, "')"));
  }
  absl::c_sort(names);  // Stable output for the same sessions.
  return names;
}

void SessionManager::RememberEnded(const std::string& session_id,
                                   const std::string& tenant,
                                   const absl::Status& reason) {
  if (ended_order_.size() >= kMaxRemembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  ended_[session_id] = Ended{tenant, reason};
  ended_order_.push_back(session_id);
}

size_t SessionManager::session_count() {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

void SessionManager::CheckLeases() {
  const absl::Time now = absl::Now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Entry& entry = it->second;
    if (entry.session->open_streams() > 0) {
      ++it;
      continue;
    }
    const absl::Duration idle = now - entry.session->last_used();
    if (idle >= entry.lease) {
      auto next = std::next(it);
      const std::string id = entry.session->owner().public_id;
      StartTeardown(Take(it),
                    absl::CancelledError(
                        absl::StrCat("session ", id, "'s lease expired")),
                    "lease_expired", nullptr);
      it = next;
      continue;
    }
    // Warn once per idle spell, when a quarter of the lease is left.
    if (!entry.warned && idle >= entry.lease * 3 / 4) {
      entry.warned = true;
      v1::Notification n;
      n.mutable_lease_expiring()->set_seconds_left(
          static_cast<uint32_t>(absl::ToInt64Seconds(entry.lease - idle)));
      chores_.push_back([session = entry.session, n] {
        session->notifications().Publish(n);
      });
    }
    ++it;
  }
}

void SessionManager::Housekeep() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto has_chores = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !chores_.empty() || stopping_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&has_chores),
                         options_.lease_check_period);
    CheckLeases();
    // Off the lock: a trim takes milliseconds, and locks each arena in
    // turn.
    mu_.Unlock();
    if (const auto trim = heap_trimmer_.MaybeTrim(absl::Now())) {
      log::Debug("heap_trimmed")
          .Num("resident_before_kb", trim->resident_before >> 10)
          .Num("resident_after_kb", trim->resident_after >> 10)
          .Num("heap_in_use_kb", trim->in_use >> 10);
    }
    mu_.Lock();
    while (!chores_.empty()) {
      auto chore = std::move(chores_.front());
      chores_.pop_front();
      mu_.Unlock();
      chore();
      chore = nullptr;
      mu_.Lock();
    }
    if (stopping_) return;
  }
}

}  // namespace gpustream::session
