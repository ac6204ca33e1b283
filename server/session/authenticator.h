// Bearer-token authentication: who is calling, and may they administer.
#ifndef GPUSTREAM_SERVER_SESSION_AUTHENTICATOR_H_
#define GPUSTREAM_SERVER_SESSION_AUTHENTICATOR_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpustream::session {

// The authenticated caller. Sessions belong to a tenant.
struct Principal {
  std::string tenant;
  bool admin = false;
};

struct TokenGrant {
  std::string token;
  std::string tenant;
  bool admin = false;
};

// Immutable, hence thread-safe.
class Authenticator {
 public:
  // No grants: authentication is off and every caller is the admin of one
  // anonymous tenant.
  explicit Authenticator(const std::vector<TokenGrant>& grants);

  bool enabled() const { return !grants_.empty(); }

  // `authorization` is the request's "authorization" metadata, if any
  // ("Bearer <token>"). UNAUTHENTICATED when missing or unknown.
  absl::StatusOr<Principal> Authenticate(
      const std::string* authorization) const;

  // PERMISSION_DENIED unless `who` is an admin; names the RPC.
  static absl::Status RequireAdmin(const Principal& who, absl::string_view rpc);

 private:
  absl::flat_hash_map<std::string, Principal> grants_;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_AUTHENTICATOR_H_
