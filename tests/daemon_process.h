// Runs gpustreamd as a real child process for end-to-end tests.
#ifndef GPUSTREAM_TESTS_DAEMON_PROCESS_H_
#define GPUSTREAM_TESTS_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpustream::testing {

// A fresh path in a directory of this test process's own, ending in
// `suffix` (short enough for a unix socket).
std::string TempPath(const std::string& suffix);

// The path of a file in the test's runfiles, e.g. "server/gpustreamd".
std::string RunfilePath(const std::string& relative);

// The first number of /proc/<pid>/status line `field` ("VmRSS" and "VmHWM"
// in kB, "Threads" a count); -1 if unreadable.
int64_t ProcStatusValue(pid_t pid, const std::string& field);
// The daemon's resident memory in bytes; 0 if unreadable.
inline uint64_t RssBytes(pid_t pid) {
  const int64_t kb = ProcStatusValue(pid, "VmRSS");
  return kb < 0 ? 0 : static_cast<uint64_t>(kb) * 1024;
}

// Whether this test runs under ASan or TSan, whose allocators keep freed
// memory resident on purpose (quarantine, shadow): RSS bounds do not apply.
inline bool UnderSanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return std::getenv("GPUSTREAM_TSAN") != nullptr;
#endif
}

// Starts `argv` with stdout and stderr sent to `log_path`; -1 on failure.
pid_t StartProcess(const std::vector<std::string>& argv,
                   const std::string& log_path);
// Waits for `pid` up to `timeout`; its exit status (128 + n when killed by
// signal n), or -1 if it still runs.
int WaitForExit(pid_t pid, absl::Duration timeout);

// Runs `argv` to completion (bounded by `timeout`), returning its exit code
// and, in `output`, what it wrote to stdout and stderr.
int RunCommand(const std::vector<std::string>& argv, std::string* output,
               absl::Duration timeout = absl::Seconds(30));

// One gpustreamd listening on a fresh unix socket and a free TCP port of
// 127.0.0.1. The destructor kills it if it still runs.
class DaemonProcess {
 public:
  // Starts the daemon with `extra_args` and waits (at most 30 s) until it
  // serves.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const std::vector<std::string>& extra_args = {});
  ~DaemonProcess();

  const std::string& unix_target() const { return unix_target_; }
  const std::string& tcp_target() const { return tcp_target_; }
  pid_t pid() const { return pid_; }
  // What the daemon wrote to stderr so far.
  std::string log() const;

  // Sends `signal` and waits (at most 30 s) for the exit; returns the exit
  // status (128 + n when killed by signal n, -1 on timeout).
  int Stop(int signal);
  // SIGSTOP, then waits (up to 5 s) until every thread of the daemon has
  // stopped: kill() returns before they do, and a thread already running
  // may still answer a request sent right after. Whether they all did.
  // Thaw with kill(pid(), SIGCONT).
  bool Freeze();

 private:
  DaemonProcess() = default;

  pid_t pid_ = -1;
  std::string unix_target_, tcp_target_, socket_path_, ready_path_, log_path_;
};

}  // namespace gpustream::testing

#endif  // GPUSTREAM_TESTS_DAEMON_PROCESS_H_
