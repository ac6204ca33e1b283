// Tenant limits and usage.
#include "server/tenants/tenant.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpustream::tenants {
namespace {

// Charges `amount` to `counter` unless that would pass `limit` (0: none).
template <typename T>
absl::Status Charge(std::atomic<T>& counter, T amount, uint64_t limit,
                    absl::string_view tenant, absl::string_view quota,
                    absl::string_view unit) {
  T current = counter.load(std::memory_order_relaxed);
  do {
    // Written so that no sum can wrap past the limit.
    if (limit != 0 && (amount > limit || current > limit - amount)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant '", tenant, "' ", quota, " exhausted: limit ", limit, unit,
          ", in use ", current, unit, ", requested ", amount, unit));
    }
  } while (!counter.compare_exchange_weak(current, current + amount,
                                          std::memory_order_relaxed));
  return absl::OkStatus();
}

}  // namespace

const std::string& Principal::name() const { return tenant->name(); }
bool Principal::admin() const { return tenant->admin(); }

Tenant::Tenant(std::string name, bool admin, uint32_t weight, v1::Quota quota)
    : name_(std::move(name)),
      admin_(admin),
      quota_(std::move(quota)),
      weight_(std::max<uint32_t>(weight, 1)) {
  max_inflight_ = quota_.max_inflight_commands();
  max_staged_ = quota_.max_staged_bytes();
}

std::shared_ptr<backend::WorkAccount> Tenant::account(uint32_t device_id) {
  absl::MutexLock lock(&mu_);
  auto& account = accounts_[device_id];
  if (account == nullptr) {
    account = std::make_shared<backend::WorkAccount>(name_, weight_);
  }
  return account;
}

uint64_t Tenant::busy_ns(uint32_t device_id) const {
  absl::MutexLock lock(&mu_);
  auto it = accounts_.find(device_id);
  return it == accounts_.end()
             ? 0
             : it->second->busy_ns.load(std::memory_order_relaxed);
}

Tenant::Totals Tenant::Sum() const {
  Totals totals;
  absl::MutexLock lock(&mu_);
  for (const auto& [device, a] : accounts_) {
    totals.inflight_commands +=
        a->inflight_commands.load(std::memory_order_relaxed);
    totals.staged_bytes += a->staged_bytes.load(std::memory_order_relaxed);
    totals.commands_completed +=
        a->commands_completed.load(std::memory_order_relaxed);
    totals.busy_ns += a->busy_ns.load(std::memory_order_relaxed);
  }
  return totals;
}

v1::Quota Tenant::quota() const {
  absl::MutexLock lock(&mu_);
  return quota_;
}

uint32_t Tenant::weight() const {
  absl::MutexLock lock(&mu_);
  return weight_;
}

void Tenant::Update(bool admin, uint32_t weight, const v1::Quota& quota) {
  admin_.store(admin, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  quota_ = quota;
  max_inflight_ = quota.max_inflight_commands();
  max_staged_ = quota.max_staged_bytes();
  weight_ = std::max<uint32_t>(weight, 1);
  for (auto& [device, account] : accounts_) {
    account->weight.store(weight_, std::memory_order_relaxed);
  }
}

absl::Status Tenant::ReserveSession() {
  return Charge<uint32_t>(sessions_, 1, quota().max_sessions(), name_,
                          "quota.max_sessions", " sessions");
}
void Tenant::ReleaseSession() { sessions_.fetch_sub(1); }

absl::Status Tenant::ReserveQueue() {
  return Charge<uint32_t>(queues_, 1, quota().max_queues(), name_,
                          "quota.max_queues", " queues");
}
void Tenant::ReleaseQueue(uint32_t count) { queues_.fetch_sub(count); }

absl::Status Tenant::ReserveMemory(uint64_t bytes) {
  return Charge<uint64_t>(memory_bytes_, bytes, quota().device_memory_bytes(),
                          name_, "quota.device_memory_bytes", " bytes");
}
void Tenant::ReleaseMemory(uint64_t bytes) { memory_bytes_.fetch_sub(bytes); }

absl::Status Tenant::ReserveGraph() {
  return Charge<uint32_t>(graphs_, 1, quota().max_graphs(), name_,
                          "quota.max_graphs", " graphs");
}
void Tenant::ReleaseGraph() { graphs_.fetch_sub(1); }

absl::Status Tenant::ReserveWait() {
  return Charge<uint32_t>(waits_, 1, kMaxPendingWaits, name_,
                          "limit of pending waits (synchronize and WaitFlag "
                          "calls not yet answered)",
                          " waits");
}
void Tenant::ReleaseWait() { waits_.fetch_sub(1); }

absl::Status Tenant::CheckEnqueue(uint64_t staged, uint64_t commands) const {
  const uint64_t max_inflight = max_inflight_.load(std::memory_order_relaxed);
  const uint64_t max_staged = max_staged_.load(std::memory_order_relaxed);
  if (max_inflight == 0 && (staged == 0 || max_staged == 0)) {
    return absl::OkStatus();
  }
  const Totals totals = Sum();
  const uint64_t inflight =
      static_cast<uint64_t>(std::max<int64_t>(totals.inflight_commands, 0));
  // Work larger than the whole quota (a graph's launch) needs it all free.
  const uint64_t needed =
      max_inflight != 0 ? std::min(commands, max_inflight) : commands;
  if (max_inflight != 0 && inflight + needed > max_inflight) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", name_, "' quota.max_inflight_commands exhausted: limit ",
        max_inflight, " commands, in flight ", inflight,
        commands > 1 ? absl::StrCat(", requested ", commands) : ""));
  }
  const uint64_t held =
      static_cast<uint64_t>(std::max<int64_t>(totals.staged_bytes, 0));
  if (staged != 0 && max_staged != 0 &&
      held + std::min(staged, max_staged) > max_staged) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", name_, "' quota.max_staged_bytes exhausted: limit ",
        max_staged, " bytes, staged ", held, " bytes, requested ", staged,
        " bytes"));
  }
  return absl::OkStatus();
}

int32_t Tenant::ClampPriority(int32_t requested) const {
  if (!quota().has_max_priority()) return requested;
  // Numerically lower is the greater priority (CUDA's convention).
  return std::max(requested, quota().max_priority());
}

void Tenant::Describe(v1::TenantStats* stats) const {
  const Totals totals = Sum();
  stats->set_tenant(name_);
  stats->set_sessions(sessions());
  stats->set_queues(queues());
  stats->set_host_waits(waits());
  stats->set_memory_bytes(memory_bytes());
  stats->set_inflight_commands(
      static_cast<uint64_t>(std::max<int64_t>(totals.inflight_commands, 0)));
  stats->set_staged_bytes(
      static_cast<uint64_t>(std::max<int64_t>(totals.staged_bytes, 0)));
  stats->set_commands_completed(totals.commands_completed);
  stats->set_busy_seconds(static_cast<double>(totals.busy_ns) / 1e9);
  absl::MutexLock lock(&mu_);
  stats->set_weight(weight_);
  *stats->mutable_quota() = quota_;
}

}  // namespace gpustream::tenants
