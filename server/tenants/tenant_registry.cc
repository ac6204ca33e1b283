// Tenants from the config: token digests, TLS subjects, reloads.
#include "server/tenants/tenant_registry.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/tenants/operator_token_path.h"

namespace gpustream::tenants {
namespace {

std::string Sha256(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

// The daemon-wide staging and in-flight bounds apply to tenants whose quota
// sets none: without them one stalled queue fed writes or launches grows
// the daemon without end.
v1::Quota EffectiveQuota(const v1::Quota& quota,
                         const v1::ServerConfig& config) {
  v1::Quota effective = quota;
  if (effective.max_staged_bytes() == 0) {
    const uint64_t fallback = config.limits().default_max_staged_bytes();
    effective.set_max_staged_bytes(fallback != 0 ? fallback
                                                 : kDefaultMaxStagedBytes);
  }
  if (effective.max_inflight_commands() == 0) {
    const uint64_t fallback = config.limits().default_max_inflight_commands();
    effective.set_max_inflight_commands(
        fallback != 0 ? fallback : kDefaultMaxInflightCommands);
  }
  return effective;
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  return absl::BytesToHexString(Sha256(data));
}

struct TenantRegistry::Parsed {
  std::vector<v1::Tenant> tenants;
  std::vector<std::pair<std::string, std::string>> digests;
  absl::flat_hash_map<std::string, std::string> subjects;
};

absl::StatusOr<TenantRegistry::Parsed> TenantRegistry::Parse(
    const v1::ServerConfig& config) {
  Parsed parsed;
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_set<std::string> digests;
  for (int i = 0; i < config.tenants_size(); ++i) {
    const v1::Tenant& t = config.tenants(i);
    const std::string where = absl::StrCat("tenants[", i, "]");
    if (t.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".name is empty"));
    }
    if (t.name() == kOperatorTenant) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".name '", t.name(),
                       "' is reserved for the daemon's operator token"));
    }
    if (!names.insert(t.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".name '", t.name(), "' is declared twice"));
    }
    for (int k = 0; k < t.token_sha256_size(); ++k) {
      const std::string hex = absl::AsciiStrToLower(t.token_sha256(k));
      const bool is_hex =
          hex.size() == 2 * SHA256_DIGEST_LENGTH &&
          hex.find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!is_hex) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " ('", t.name(), "').token_sha256[", k,
            "] is not 64 hex digits (the SHA-256 of a token, e.g. from "
            "`printf %s TOKEN | sha256sum`)"));
      }
      std::string digest = absl::HexStringToBytes(hex);
      if (!digests.insert(digest).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " ('", t.name(), "').token_sha256[", k,
                         "] is already another tenant's (or repeated)"));
      }
      parsed.digests.emplace_back(std::move(digest), t.name());
    }
    for (int k = 0; k < t.tls_subject_size(); ++k) {
      if (t.tls_subject(k).empty() ||
          !parsed.subjects.emplace(t.tls_subject(k), t.name()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " ('", t.name(), "').tls_subject[", k, "] '",
                         t.tls_subject(k), "' is empty or already claimed"));
      }
    }
    v1::Tenant effective = t;
    *effective.mutable_quota() = EffectiveQuota(t.quota(), config);
    parsed.tenants.push_back(std::move(effective));
  }
  if (parsed.tenants.empty()) {
    v1::Tenant fallback;
    fallback.set_name(kDefaultTenant);
    // Without tenants every caller is this one: nobody to keep apart.
    fallback.set_allow_unchecked_kernels(true);
    *fallback.mutable_quota() = EffectiveQuota({}, config);
    parsed.tenants.push_back(std::move(fallback));
  }
  return parsed;
}

absl::StatusOr<std::unique_ptr<TenantRegistry>> TenantRegistry::Create(
    const v1::ServerConfig& config) {
  auto registry = std::unique_ptr<TenantRegistry>(new TenantRegistry());
  auto removed = registry->Reload(config);
  if (!removed.ok()) return removed.status();
  return registry;
}

absl::StatusOr<std::vector<std::string>> TenantRegistry::Reload(
    const v1::ServerConfig& config) {
  auto parsed = Parse(config);
  if (!parsed.ok()) return parsed.status();
  absl::MutexLock lock(&mu_);
  // An empty or half-written file parses as a config without tenants;
  // taken, it would silently let every caller in as "default".
  if (configured_ && config.tenants_size() == 0) {
    return absl::FailedPreconditionError(
        "the new config declares no tenants: reloading it would turn "
        "authentication off; restart the daemon to serve without tenants");
  }
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> next;
  for (const v1::Tenant& t : parsed->tenants) {
    auto it = by_name_.find(t.name());
    std::shared_ptr<Tenant> tenant;
    if (it != by_name_.end()) {
      tenant = it->second;
      tenant->Update(t.admin(), t.weight(), t.quota());
    } else {
      tenant =
          std::make_shared<Tenant>(t.name(), t.admin(), t.weight(), t.quota());
    }
    tenant->set_allow_unchecked_kernels(t.allow_unchecked_kernels());
    next.emplace(t.name(), std::move(tenant));
  }
  std::vector<std::string> removed;
  for (const auto& [name, tenant] : by_name_) {
    if (!next.contains(name)) removed.push_back(name);
  }
  by_name_ = std::move(next);
  default_quota_ = EffectiveQuota({}, config);
  // The operator follows the daemon's default limits as they are reloaded.
  if (operator_ != nullptr) {
    operator_->Update(true, 1, default_quota_);
    operator_->set_allow_unchecked_kernels(config.tenants_size() == 0);
  }
  digests_ = std::move(parsed->digests);
  subjects_ = std::move(parsed->subjects);
  configured_ = config.tenants_size() > 0;
  return removed;
}

absl::StatusOr<Principal> TenantRegistry::Authenticate(
    const Credentials& credentials) const {
  absl::MutexLock lock(&mu_);
  // Nothing to compare a token with: no hash.
  if (!configured_ && operator_ == nullptr) {
    return Principal{by_name_.at(kDefaultTenant)};
  }
  const std::string digest = credentials.bearer_token.has_value()
                                 ? Sha256(*credentials.bearer_token)
                                 : std::string();
  if (operator_ != nullptr && !digest.empty() &&
      CRYPTO_memcmp(operator_digest_.data(), digest.data(), digest.size()) ==
          0) {
    return Principal{operator_};
  }
  if (!configured_) return Principal{by_name_.at(kDefaultTenant)};
  if (credentials.bearer_token.has_value()) {
    // Every digest is compared, in constant time, so the time taken says
    // nothing about which (or whether one) matched.
    const std::string* match = nullptr;
    for (const auto& [candidate, tenant] : digests_) {
      if (CRYPTO_memcmp(candidate.data(), digest.data(), digest.size()) == 0) {
        match = &tenant;
      }
    }
    if (match == nullptr) {
      return absl::UnauthenticatedError("invalid bearer token");
    }
    return Principal{by_name_.at(*match)};
  }
  if (credentials.tls_subject.has_value()) {
    auto it = subjects_.find(*credentials.tls_subject);
    if (it == subjects_.end()) {
      return absl::UnauthenticatedError(
          absl::StrCat("client certificate subject '", *credentials.tls_subject,
                       "' is no tenant's"));
    }
    return Principal{by_name_.at(it->second)};
  }
  return absl::UnauthenticatedError(
      "missing credentials: send 'authorization: Bearer <token>' metadata or "
      "a client certificate");
}

std::vector<std::shared_ptr<Tenant>> TenantRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Tenant>> all;
  for (const auto& [name, tenant] : by_name_) all.push_back(tenant);
  return all;
}

std::shared_ptr<Tenant> TenantRegistry::Operator() const {
  absl::MutexLock lock(&mu_);
  return operator_;
}

void TenantRegistry::EnableOperatorToken(const std::string& token,
                                         const std::string& token_path) {
  absl::MutexLock lock(&mu_);
  operator_digest_ = Sha256(token);
  operator_ = std::make_shared<Tenant>(kOperatorTenant, /*admin=*/true,
                                       /*weight=*/1, default_quota_);
  // As every caller without tenants; with tenants only those allowed.
  operator_->set_allow_unchecked_kernels(!configured_);
  operator_token_path_ = token_path;
}

bool TenantRegistry::configured() const {
  absl::MutexLock lock(&mu_);
  return configured_;
}

absl::Status TenantRegistry::RequireAdmin(const Principal& who,
                                          absl::string_view rpc) const {
  if (who.admin()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  const std::string how =
      operator_ != nullptr
          ? absl::StrCat(
                "send an admin tenant's token, or the operator token "
                "in ",
                operator_token_path_,
                " (readable by root and the daemon's user; "
                "gpustreamctl reads it by itself)")
          : "send an admin tenant's token (a tenant with admin: true in "
            "--config); this daemon has no operator token "
            "(--operator_token_file)";
  return absl::PermissionDeniedError(
      absl::StrCat(rpc, " is an admin RPC; tenant '", who.name(),
                   "' is not an admin: ", how));
}

}  // namespace gpustream::tenants
