// The operator token: the local operator's admin credential on a daemon
// with or without tenants.
//
// At start the daemon draws a random token and writes it to a file only its
// own user can read (mode 0600; root reads it too). A caller that presents
// it as its bearer token is the tenant "local-operator", an admin. File
// permissions are the rule, as for the unix socket itself: whoever can read
// the file is the daemon's user or root. A new token each start, so a copy
// read once stops working when the daemon restarts. gpustreamctl reads the
// file by itself (operator_token_path.h).
#ifndef GPUSTREAM_SERVER_TENANTS_OPERATOR_TOKEN_H_
#define GPUSTREAM_SERVER_TENANTS_OPERATOR_TOKEN_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "server/tenants/operator_token_path.h"

namespace gpustream::tenants {

// Owns the token file: removes it when destroyed, if the file there is
// still the one it wrote (same device and inode). Not thread-safe (made and
// dropped by the daemon's main thread).
class OperatorTokenFile {
 public:
  // A fresh token (32 random bytes, 64 hex digits); nothing written yet.
  static std::string NewToken();

  // Writes `token` to `path`, created anew with mode 0600. A file already
  // there is replaced only if it is a regular mode-0600 file of this user
  // (one a daemon that died left behind); anything else there (another
  // user's file, a symlink) is an error and stays. Never writes through a
  // symlink or into a file it did not create. An error names the path and
  // what failed.
  static absl::StatusOr<OperatorTokenFile> Write(const std::string& path,
                                                 const std::string& token);

  OperatorTokenFile(OperatorTokenFile&& other) noexcept;
  OperatorTokenFile& operator=(OperatorTokenFile&&) = delete;
  ~OperatorTokenFile();

  const std::string& path() const { return path_; }

 private:
  OperatorTokenFile(std::string path, dev_t device, ino_t inode)
      : path_(std::move(path)), device_(device), inode_(inode) {}
  std::string path_;  // Empty once moved from.
  dev_t device_;
  ino_t inode_;
};

}  // namespace gpustream::tenants

#endif  // GPUSTREAM_SERVER_TENANTS_OPERATOR_TOKEN_H_
