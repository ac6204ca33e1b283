// The daemon's --config file: reading and parsing a v1::ServerConfig.
#ifndef GPUSTREAM_SERVER_CONFIG_CONFIG_FILE_H_
#define GPUSTREAM_SERVER_CONFIG_CONFIG_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/gpustream/v1/server_config.pb.h"

namespace gpustream::config {

// Parses `text`, a v1::ServerConfig in protobuf text format (unknown fields
// are errors). INVALID_ARGUMENT "--config <path>: line L, column C: <the
// parser's message, naming the field or token>" otherwise; `path` only names
// the file in that message. What the config means (its tenants) is checked
// by tenants::TenantRegistry::Create, whose errors name the field
// ("tenants[1] ('ops').token_sha256[0] ...").
// Pure and thread-safe.
absl::StatusOr<v1::ServerConfig> ParseServerConfig(absl::string_view text,
                                                   absl::string_view path);

// The config in the file at `path`; an empty `path` is the empty config.
// NOT_FOUND "--config <path> cannot be read" if the file cannot be opened;
// otherwise as ParseServerConfig.
absl::StatusOr<v1::ServerConfig> LoadServerConfig(const std::string& path);

}  // namespace gpustream::config

#endif  // GPUSTREAM_SERVER_CONFIG_CONFIG_FILE_H_
