// Reading and parsing the daemon's --config file.
#include "server/config/config_file.h"

#include <google/protobuf/text_format.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::config {

absl::StatusOr<v1::ServerConfig> ParseServerConfig(absl::string_view text,
                                                   absl::string_view path) {
  v1::ServerConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(std::string(text),
                                                     &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, " is not a valid ServerConfig"));
  }
  return config;
}

absl::StatusOr<v1::ServerConfig> LoadServerConfig(const std::string& path) {
  if (path.empty()) return v1::ServerConfig();
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--config ", path, " cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseServerConfig(text.str(), path);
}

}  // namespace gpustream::config
