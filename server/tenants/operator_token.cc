// The operator token file: drawn, written 0600, removed at exit.
#include "server/tenants/operator_token.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpustream::tenants {
namespace {

// Whether the file at `path` holds what Write writes: 64 hex digits and a
// newline. Anything else at the path (a mistyped flag naming a key file)
// is never replaced.
bool IsStaleToken(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  char text[66];
  const ssize_t size = read(fd, text, sizeof(text));
  close(fd);
  if (size != 65 || text[64] != '\n') return false;
  for (int i = 0; i < 64; ++i) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(text[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

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
  // Only a file this daemon's user could have written before (a daemon
  // that died): a regular file of ours with no group or other bits. Never
  // another user's file, a symlink, a socket or anything else.
  struct stat there;
  if (lstat(path.c_str(), &there) == 0) {
    if (!S_ISREG(there.st_mode) || there.st_uid != geteuid() ||
        (there.st_mode & 077) != 0 || !IsStaleToken(path)) {
      errno = EEXIST;
      return failed(
          "something else is there (not an operator token file of this "
          "user); remove it or choose another --operator_token_file");
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return failed("cannot remove the stale file");
    }
  } else if (errno != ENOENT) {
    return failed("cannot inspect the path");
  }
  // O_EXCL|O_NOFOLLOW: another user racing to plant a file or symlink
  // here makes this fail rather than receive the token.
  const int fd = open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return failed("cannot create it");
  struct stat created;
  const bool stated = fstat(fd, &created) == 0;
  const std::string text = token + "\n";
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_errno = errno;
  close(fd);
  errno = write_errno;
  if (!stated || !written) {
    unlink(path.c_str());
    return failed("cannot write it");
  }
  return OperatorTokenFile(path, created.st_dev, created.st_ino);
}

OperatorTokenFile::OperatorTokenFile(OperatorTokenFile&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      device_(other.device_),
      inode_(other.inode_) {}

OperatorTokenFile::~OperatorTokenFile() {
  if (path_.empty()) return;
  // Only the file written at start: if another process has put its own
  // there since, it stays.
  struct stat there;
  if (lstat(path_.c_str(), &there) == 0 && there.st_dev == device_ &&
      there.st_ino == inode_) {
    unlink(path_.c_str());
  }
}

}  // namespace gpustream::tenants
