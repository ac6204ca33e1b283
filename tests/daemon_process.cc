// Child-process management for end-to-end tests.
#include "tests/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace gpustream::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What of a daemon's log (its text format, the default) a failed test
// prints: its warnings and errors from the start (the polls that follow a
// failure often log an info line every few milliseconds), then its last
// lines, each part at most 16 KiB.
std::string FailureExcerpt(const std::string& log) {
  constexpr size_t kPart = 16 << 10;
  std::string warnings;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const bool notable = absl::StrContains(line, " level=warning ") ||
                         absl::StrContains(line, " level=error ");
    if (notable && warnings.size() + line.size() < kPart) {
      absl::StrAppend(&warnings, line, "\n");
    }
  }
  return absl::StrCat("gpustreamd's warnings and errors:\n", warnings,
                      "gpustreamd's log, its last ", kPart, " bytes:\n",
                      absl::string_view(log).substr(
                          log.size() > kPart ? log.size() - kPart : 0),
                      "\n");
}

}  // namespace

pid_t StartProcess(const std::vector<std::string>& argv,
                   const std::string& log_path) {
  // Daemons under test check their lock order even in optimized builds
  // (util::UseReleaseMutexes). Set once, before the first spawn.
  static const bool check_lock_order = [] {
    return setenv("GPUSTREAM_CHECK_LOCK_ORDER", "1", 1) == 0;
  }();
  (void)check_lock_order;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) !=
      0) {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int WaitForExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

std::string TempPath(const std::string& suffix) {
  // Tests may run side by side in PID namespaces sharing /tmp: getpid() is
  // no unique name, mkdtemp is. Short, as unix socket paths must fit in 108
  // bytes. Removed at exit once its files are gone.
  struct Dir {
    Dir() {
      char name[] = "/tmp/gpustream-XXXXXX";
      path = mkdtemp(name) != nullptr ? name : "/tmp";
    }
    ~Dir() { rmdir(path.c_str()); }
    std::string path;
  };
  static Dir dir;
  static std::atomic<int> counter{0};
  return absl::StrCat(dir.path, "/", counter++, suffix);
}

int64_t ProcStatusValue(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) ||
        !absl::ConsumePrefix(&rest, ":")) {
      continue;
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(rest, ' ', absl::SkipWhitespace());
    int64_t value = 0;
    if (!words.empty() && absl::SimpleAtoi(words[0], &value)) return value;
  }
  return -1;
}

std::string RunfilePath(const std::string& relative) {
  const char* root = std::getenv("TEST_SRCDIR");
  return absl::StrCat(root != nullptr ? root : ".", "/gpustream/", relative);
}

int RunCommand(const std::vector<std::string>& argv, std::string* output,
               absl::Duration timeout) {
  const std::string log = TempPath(".out");
  pid_t pid = StartProcess(argv, log);
  if (pid < 0) return -1;
  int status = WaitForExit(pid, timeout);
  if (status == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  if (output != nullptr) *output = ReadFile(log);
  unlink(log.c_str());
  return status;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const std::vector<std::string>& extra_args) {
  auto daemon = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  daemon->socket_path_ = TempPath(".sock");
  daemon->ready_path_ = TempPath(".ready");
  daemon->log_path_ = TempPath(".log");
  std::vector<std::string> argv = {
      RunfilePath("server/gpustreamd"),
      absl::StrCat("--listen=unix:", daemon->socket_path_, ",127.0.0.1:0"),
      absl::StrCat("--ready_file=", daemon->ready_path_)};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  daemon->pid_ = StartProcess(argv, daemon->log_path_);
  if (daemon->pid_ < 0) return absl::InternalError("cannot spawn gpustreamd");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    int status;
    if (waitpid(daemon->pid_, &status, WNOHANG) == daemon->pid_) {
      daemon->pid_ = -1;
      return absl::InternalError(
          absl::StrCat("gpustreamd exited at start: ", daemon->log()));
    }
    std::vector<std::string> lines =
        absl::StrSplit(ReadFile(daemon->ready_path_), '\n', absl::SkipEmpty());
    if (lines.size() == 2) {
      daemon->unix_target_ = lines[0];
      daemon->tcp_target_ = lines[1];
      return daemon;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError("gpustreamd did not become ready");
}

std::string DaemonProcess::log() const { return ReadFile(log_path_); }

bool DaemonProcess::Freeze() {
  if (pid_ < 0 || kill(pid_, SIGSTOP) != 0) return false;
  const std::string tasks = absl::StrCat("/proc/", pid_, "/task");
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    bool all_stopped = true;
    for (const auto& task : std::filesystem::directory_iterator(tasks)) {
      // The state follows the ")" that ends the command name.
      const std::string stat = ReadFile(task.path().string() + "/stat");
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size() ||
          stat[paren + 2] != 'T') {
        all_stopped = false;
        break;
      }
    }
    if (all_stopped) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

int DaemonProcess::Stop(int signal) {
  if (pid_ < 0) return -1;
  kill(pid_, signal);
  int status = WaitForExit(pid_, absl::Seconds(30));
  if (status != -1) {
    pid_ = -1;
    // A report made while shutting down fails the test too.
    if (const std::string text = log(); absl::StrContains(text, "Sanitizer")) {
      ADD_FAILURE() << "gpustreamd reported a sanitizer error; its log:\n"
                    << text;
    }
  }
  return status;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    int status = 0;
    bool died = waitpid(pid_, &status, WNOHANG) == pid_;
    if (died) {
      status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (!died && absl::StrContains(log(), "Sanitizer")) {
      // A report is being written (the sanitizers abort once it is done):
      // killing now would cut off the stack that says where.
      status = WaitForExit(pid_, absl::Seconds(20));
      died = status != -1;
    }
    if (!died) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    // A daemon that went away on its own (a crash, a sanitizer report under
    // halt_on_error) or reported a sanitizer error fails the test, whatever
    // the test's own calls saw; its log says why and is about to go.
    const std::string text = log();
    if (!died && ::testing::Test::HasFailure()) {
      // The test failed for a reason of its own: what the daemon saw may say
      // why. (A daemon shared by a suite is stopped outside any test, and
      // prints nothing here.)
      std::printf("%s", FailureExcerpt(text).c_str());
    }
    if (died || absl::StrContains(text, "Sanitizer")) {
      ADD_FAILURE() << "gpustreamd "
                    << (died ? absl::StrCat("exited on its own (status ",
                                            status, ")")
                             : "reported a sanitizer error")
                    << "; its log:\n"
                    << text;
    }
  }
  unlink(socket_path_.c_str());
  unlink(ready_path_.c_str());
  unlink(log_path_.c_str());
}

}  // namespace gpustream::testing
