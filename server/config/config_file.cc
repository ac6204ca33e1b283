// Reading and parsing the daemon's --config file.
#include "server/config/config_file.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::config {
namespace {

// Keeps the parser's first error with its position (1-based, as editors
// count). The parser stops at its first error, so one is all there is.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!message_.empty()) return;
    line_ = line + 1;
    column_ = column + 1;
    message_ = message;
  }

  std::string Describe() const {
    if (message_.empty()) return "not a valid ServerConfig";
    return absl::StrCat("line ", line_, ", column ", column_, ": ", message_);
  }

 private:
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

}  // namespace

absl::StatusOr<v1::ServerConfig> ParseServerConfig(absl::string_view text,
                                                   absl::string_view path) {
  v1::ServerConfig config;
  FirstError error;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(std::string(text), &config)) {
    // "--config /etc/gs.textproto:4:3: line 4, column 3: Message type
    // "gpustream.v1.Tenant" has no field named "nmae"."
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, ": ", error.Describe()));
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
  // A directory opens without error and reads as nothing, which would
  // parse as a config without tenants: no authentication at all.
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, " is not a regular file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::NotFoundError(
        absl::StrCat("--config ", path, " cannot be read"));
  }
  return ParseServerConfig(text.str(), path);
}

}  // namespace gpustream::config
