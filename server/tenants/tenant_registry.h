// The configured tenants: authentication and reload.
#ifndef GPUSTREAM_SERVER_TENANTS_TENANT_REGISTRY_H_
#define GPUSTREAM_SERVER_TENANTS_TENANT_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/server_config.pb.h"
#include "server/tenants/tenant.h"

namespace gpustream::tenants {

// The name every caller gets when no tenant is configured. Not an admin.
inline constexpr char kDefaultTenant[] = "default";
// Write data a tenant may have staged when neither its quota nor the
// daemon's limits.default_max_staged_bytes says.
inline constexpr uint64_t kDefaultMaxStagedBytes = uint64_t{256} << 20;
// Likewise for commands enqueued and not yet completed.
inline constexpr uint64_t kDefaultMaxInflightCommands = 262144;

// Tokens are kept only as SHA-256 digests and compared in constant time;
// no token or digest is ever logged. Thread-safe.
class TenantRegistry {
 public:
  // INVALID_ARGUMENT naming the tenant and field for a malformed config
  // (empty or duplicate name, a token_sha256 that is not 64 hex digits, a
  // digest or subject claimed by two tenants).
  static absl::StatusOr<std::unique_ptr<TenantRegistry>> Create(
      const v1::ServerConfig& config);

  // The operator token's tenant (operator_token.h): the admin tenant
  // "local-operator", with the daemon's default quota, authenticated by
  // `token` from now on, tenants configured or not. Call once (gpustreamd
  // does once its listeners are bound and the token file is written).
  void EnableOperatorToken(const std::string& token,
                           const std::string& token_path);

  // The operator token, when one is enabled and the bearer token is it:
  // the tenant "local-operator". Else, with tenants configured: the tenant
  // whose token digest or TLS subject matches (a bearer token is checked
  // first), else UNAUTHENTICATED saying what was missing or wrong. Without:
  // the tenant "default".
  absl::StatusOr<Principal> Authenticate(const Credentials& credentials) const;

  // SIGHUP: tenants, weights and quotas from `config` (a tenant whose quota
  // sets no max_staged_bytes or max_inflight_commands gets the daemon's
  // limits.default_max_*). Tenants
  // kept (by name) are updated in place; the names of tenants that are gone are
  // returned so their sessions can be ended. The old set stays on error,
  // and a config without tenants is refused once tenants were configured
  // (it would turn authentication off).
  absl::StatusOr<std::vector<std::string>> Reload(
      const v1::ServerConfig& config);

  // Every configured tenant (or "default"), for GetStats and fair shares.
  std::vector<std::shared_ptr<Tenant>> All() const;
  // The operator token's tenant, or null without one. Apart from All(): it
  // takes no part in the split of max_sessions into fair shares.
  std::shared_ptr<Tenant> Operator() const;
  bool configured() const;

  // PERMISSION_DENIED unless `who` is an admin; names the RPC and says how
  // to call as an admin.
  absl::Status RequireAdmin(const Principal& who, absl::string_view rpc) const;

 private:
  TenantRegistry() = default;
  struct Parsed;
  static absl::StatusOr<Parsed> Parse(const v1::ServerConfig& config);

  mutable absl::Mutex mu_;
  bool configured_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> by_name_
      ABSL_GUARDED_BY(mu_);
  // SHA-256 digests (32 raw bytes) and subjects, to tenant names.
  std::vector<std::pair<std::string, std::string>> digests_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> subjects_ ABSL_GUARDED_BY(mu_);
  // The operator token's digest and tenant, and where the token is; unset
  // without one. Kept apart from by_name_: reloads leave them alone.
  std::string operator_digest_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Tenant> operator_ ABSL_GUARDED_BY(mu_);
  std::string operator_token_path_ ABSL_GUARDED_BY(mu_);
  v1::Quota default_quota_ ABSL_GUARDED_BY(mu_);
};

// SHA-256 of `data`, as 64 lowercase hex digits (for tools and tests that
// write configs).
std::string Sha256Hex(absl::string_view data);

}  // namespace gpustream::tenants

#endif  // GPUSTREAM_SERVER_TENANTS_TENANT_REGISTRY_H_
