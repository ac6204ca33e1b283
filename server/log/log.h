// Structured logs: one line per event on stderr, `key=value` text or JSON,
// with a level threshold (--log_level, --log_format).
//
// Backed by spdlog (Debian's libspdlog 1.10): it gives thread-safe sinks, a
// runtime level, UTC timestamps and a per-line pattern, so the daemon's
// lines are machine-parsable without a second formatting layer. glog was the
// alternative; its fixed "I1201 05:00:00.000000 1234 file.cc:12]" prefix
// cannot be made key=value or JSON, and it brings its own gflags flags and
// signal handlers into a process that parses absl flags.
//
//   log::Info("session_opened").Str("tenant", t).Str("client", c).Num("device",
//   0);
//
// writes, when destroyed at the end of the statement,
//
//   ts=2026-12-01T05:00:00.123Z level=info event=session_opened tenant=alice
//   client=demo device=0
//   {"ts":"2026-12-01T05:00:00.123Z","level":"info","event":"session_opened","tenant":"alice",...}
//
// Contract: events never carry a bearer token or a secret session id.
// Sessions are named by their public id; the statuses of calls go through
// CallStatus(), which masks anything shaped like a session id in their
// messages (a caller's message may echo the id it sent).
//
// Thread safety: Init once, before other threads log; events from any
// thread after that. Before Init, events go out at info level as text.
#ifndef GPUSTREAM_SERVER_LOG_LOG_H_
#define GPUSTREAM_SERVER_LOG_LOG_H_

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpustream::log {

enum class Level { kDebug, kInfo, kWarning, kError };
enum class Format { kText, kJson };

// "debug" | "info" | "warning" | "error"; INVALID_ARGUMENT naming the value.
absl::StatusOr<Level> ParseLevel(absl::string_view text);
// "text" | "json".
absl::StatusOr<Format> ParseFormat(absl::string_view text);

// Logs go to stderr, or with `file` appended to that file (created if
// missing; benchmarks keep the daemon's lines out of their figures).
void Init(Level level, Format format, const std::string& file = "");
bool Enabled(Level level);

// `message` with every run of 32 or more hex digits (the shape of a session
// id) replaced by "<redacted>".
std::string Redact(absl::string_view message);

// One event, written as one line when the Event is destroyed. Fields keep
// the order they were added in. Does nothing (not even formatting) below
// the level threshold.
class Event {
 public:
  Event(Level level, absl::string_view name);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Event& Str(absl::string_view key, absl::string_view value);
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> &&
                                                    !std::is_same_v<T, bool>>>
  Event& Num(absl::string_view key, T value) {
    if (enabled_) AddNumber(key, Render(value));
    return *this;
  }
  Event& Bool(absl::string_view key, bool value);
  // code=<CANONICAL_CODE> error=<message>: the daemon's own errors (start
  // up, devices, config), whose messages name files and devices.
  Event& Status(const absl::Status& status);
  // The same with the message through Redact(): a status answered to a
  // caller, whose message may quote the session id it sent.
  Event& CallStatus(const absl::Status& status);

 private:
  static std::string Render(double value);
  static std::string Render(int64_t value);
  static std::string Render(uint64_t value);
  template <typename T>
  static std::string Render(T value) {
    if constexpr (std::is_floating_point_v<T>) {
      return Render(static_cast<double>(value));
    } else if constexpr (std::is_signed_v<T>) {
      return Render(static_cast<int64_t>(value));
    } else {
      return Render(static_cast<uint64_t>(value));
    }
  }
  void AddNumber(absl::string_view key, const std::string& value);

  const bool enabled_;
  const Level level_;
  std::string line_;  // The event name and fields, in the output format.
};

inline Event Debug(absl::string_view name) { return {Level::kDebug, name}; }
inline Event Info(absl::string_view name) { return {Level::kInfo, name}; }
inline Event Warning(absl::string_view name) { return {Level::kWarning, name}; }
inline Event Error(absl::string_view name) { return {Level::kError, name}; }

}  // namespace gpustream::log

#endif  // GPUSTREAM_SERVER_LOG_LOG_H_
