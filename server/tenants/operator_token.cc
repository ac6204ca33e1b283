// The operator token file: drawn, written 0600, removed at exit.
#include "server/tenants/operator_token.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpustream::tenants {

std::string OperatorTokenFile::NewToken() {
  unsigned char bytes[32];
  // RAND_bytes reads the kernel's generator; it fails only when that has
  // no entropy to give, where no secret can be made at all.
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<OperatorTokenFile> OperatorTokenFile::Write(
    const std::string& path, const std::string& token) {
  auto failed = [&](const char* what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "operator token file ", path, ": ", what, ": ", std::strerror(errno)));
  };
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return failed("cannot remove the file there");
  }
  // O_EXCL|O_NOFOLLOW: another user racing to plant a file or symlink
  // here makes this fail rather than receive the token.
  const int fd = open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return failed("cannot create it");
  OperatorTokenFile file(path);
  const std::string text = token + "\n";
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_errno = errno;
  close(fd);
  errno = write_errno;
  if (!written) return failed("cannot write it");
  return file;
}

OperatorTokenFile::OperatorTokenFile(OperatorTokenFile&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

OperatorTokenFile::~OperatorTokenFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

}  // namespace gpustream::tenants
