// Option resolution and the channel to the daemon.
#include "tools/gpustreamctl/connection.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/session_core.h"
#include "server/tenants/operator_token_path.h"

namespace gpustream::ctl {
namespace {

// The token in a token file: the file's text without surrounding
// whitespace (editors and `echo` add a newline).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file ", path, " cannot be read"));
  }
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file ", path, " cannot be read"));
  }
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file ", path, " is empty"));
  }
  return token;
}

// gRPC accepts only printable ASCII in a text header value; anything else
// would fail every call with an unhelpful error. `source` names where the
// token came from (never the token itself).
absl::Status CheckToken(const std::string& token, const std::string& source) {
  for (char c : token) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the token from ", source,
          " has characters a bearer token cannot carry (printable ASCII "
          "only)"));
    }
  }
  return absl::OkStatus();
}

// The operator token of the daemon on `socket_path`, if this user may use
// it: a regular file beside the socket, not a symlink, FIFO or device, of
// mode 0600 (no group or other bits), owned by the socket's owner, who is
// this user (or this user is root), at most 256 bytes. Anything else (a
// file another user planted, a socket of another user's) is not read:
// this user then goes on without a token.
std::optional<std::string> ReadOperatorToken(const std::string& socket_path) {
  struct stat socket_stat;
  if (lstat(socket_path.c_str(), &socket_stat) != 0 ||
      !S_ISSOCK(socket_stat.st_mode)) {
    return std::nullopt;
  }
  const uid_t me = geteuid();
  if (socket_stat.st_uid != me && me != 0) return std::nullopt;
  const std::string path = tenants::OperatorTokenPath(socket_path);
  const int fd = open(
      path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat file;
  char text[257];
  ssize_t size = -1;
  if (fstat(fd, &file) == 0 && S_ISREG(file.st_mode) &&
      (file.st_mode & 077) == 0 && file.st_uid == socket_stat.st_uid &&
      file.st_size <= 256) {
    size = read(fd, text, sizeof(text));
  }
  close(fd);
  if (size <= 0 || size > 256) return std::nullopt;
  std::string token(absl::StripAsciiWhitespace(absl::string_view(text, size)));
  if (token.empty()) return std::nullopt;
  return token;
}

}  // namespace

absl::StatusOr<Options> ResolveOptions(const RawOptions& raw) {
  Options options;
  options.json = raw.json;
  options.target = !raw.target.empty()       ? raw.target
                   : !raw.env_target.empty() ? raw.env_target
                                             : kDefaultTarget;

  if (!raw.token.empty() && !raw.token_file.empty()) {
    return absl::InvalidArgumentError(
        "--token and --token_file are exclusive: give one");
  }
  std::string source;
  if (!raw.token.empty()) {
    options.token = raw.token;
    source = "--token";
  } else if (!raw.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(raw.token_file);
    if (!token.ok()) return token.status();
    options.token = *std::move(token);
    source = "--token_file";
  } else if (!raw.env_token.empty()) {
    options.token = raw.env_token;
    source = "$GPUSTREAM_TOKEN";
  } else if (absl::StartsWith(options.target, "unix:")) {
    // The local operator: the daemon's operator token beside its socket,
    // when this user is the daemon's (or root).
    const std::string socket(absl::StripPrefix(options.target, "unix:"));
    if (std::optional<std::string> token = ReadOperatorToken(socket)) {
      options.token = *std::move(token);
      source = tenants::OperatorTokenPath(socket);
    }
  }
  if (absl::Status s = CheckToken(options.token, source); !s.ok()) return s;

  if (!raw.tls_ca.empty() || !raw.tls_cert.empty() || !raw.tls_key.empty()) {
    // The daemon serves unix sockets in plaintext only; TLS there could
    // never connect, and would look like an unreachable daemon (exit 3).
    if (absl::StartsWith(options.target, "unix:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_ca, --tls_cert and --tls_key need a TCP target (host:port); "
          "unix: sockets are plaintext, and the target is ",
          options.target));
    }
    absl::StatusOr<client::TlsOptions> tls =
        client::TlsOptions::FromFiles(raw.tls_ca, raw.tls_cert, raw.tls_key);
    if (!tls.ok()) return absl::InvalidArgumentError(tls.status().message());
    options.tls = *std::move(tls);
  }

  if (raw.timeout <= absl::ZeroDuration() ||
      raw.timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout must be positive and finite, not ",
                     absl::FormatDuration(raw.timeout)));
  }
  options.timeout = raw.timeout;
  return options;
}

Connection::Connection(Options options) : options_(std::move(options)) {
  client::ConnectOptions connect;
  connect.token = options_.token;
  connect.tls = options_.tls;
  channel_ = client::OpenChannel(options_.target, connect);
  gpustream_ = v1::GpuStream::NewStub(channel_);
  admin_ = v1::Admin::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

std::unique_ptr<grpc::ClientContext> Connection::NewContext() const {
  auto context = client::NewClientContext(options_.token);
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return context;
}

}  // namespace gpustream::ctl
