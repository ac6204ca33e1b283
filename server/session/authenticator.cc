// Bearer-token authentication.
#include "server/session/authenticator.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpustream::session {

Authenticator::Authenticator(const std::vector<TokenGrant>& grants) {
  for (const TokenGrant& g : grants) {
    grants_[g.token] = Principal{g.tenant, g.admin};
  }
}

absl::StatusOr<Principal> Authenticator::Authenticate(
    const std::string* authorization) const {
  if (!enabled()) return Principal{"", true};
  if (authorization == nullptr) {
    return absl::UnauthenticatedError(
        "missing 'authorization: Bearer <token>' metadata");
  }
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(*authorization, kBearer)) {
    return absl::UnauthenticatedError(
        "authorization metadata must be 'Bearer <token>'");
  }
  auto it =
      grants_.find(absl::string_view(*authorization).substr(kBearer.size()));
  if (it == grants_.end()) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return it->second;
}

absl::Status Authenticator::RequireAdmin(const Principal& who,
                                         absl::string_view rpc) {
  if (who.admin) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, " is an admin RPC; tenant '", who.tenant, "' is not an admin"));
}

}  // namespace gpustream::session
