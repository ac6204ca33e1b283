// Where a daemon listening on a unix socket keeps its operator token, so
// that gpustreamctl finds it without being told. Header-only: the tools
// include it without linking the server.
#ifndef GPUSTREAM_SERVER_TENANTS_OPERATOR_TOKEN_PATH_H_
#define GPUSTREAM_SERVER_TENANTS_OPERATOR_TOKEN_PATH_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpustream::tenants {

// The tenant name of a caller that presents the operator token. Reserved:
// a config may not declare a tenant of this name.
inline constexpr char kOperatorTenant[] = "local-operator";

// "/tmp/gpustreamd.sock" -> "/tmp/gpustreamd.sock.operator-token".
inline std::string OperatorTokenPath(absl::string_view socket_path) {
  return absl::StrCat(socket_path, ".operator-token");
}

}  // namespace gpustream::tenants

#endif  // GPUSTREAM_SERVER_TENANTS_OPERATOR_TOKEN_PATH_H_
