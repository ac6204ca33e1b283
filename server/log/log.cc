#include "server/log/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpustream::log {
namespace {

// The process's logger and format. Set by Init before other threads start;
// read-only afterwards (spdlog's logger is itself thread-safe).
std::shared_ptr<spdlog::logger>& Logger() {
  static auto* logger = new std::shared_ptr<spdlog::logger>();
  return *logger;
}
Format g_format = Format::kText;

spdlog::level::level_enum ToSpd(Level level) {
  switch (level) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarning:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger> MakeLogger(Level level, Format format,
                                           const std::string& file = "") {
  spdlog::sink_ptr sink;
  if (file.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file);
  }
  auto logger = std::make_shared<spdlog::logger>("gpustreamd", sink);
  // The event's name and fields come pre-rendered in %v; the pattern adds
  // the time (UTC, milliseconds) and the level.
  logger->set_pattern(format == Format::kJson
                          ? R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l",%v})"
                          : "ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l %v",
                      spdlog::pattern_time_type::utc);
  logger->set_level(ToSpd(level));
  // One line per write: a crash loses nothing already logged.
  logger->flush_on(spdlog::level::trace);
  return logger;
}

spdlog::logger& Current() {
  std::shared_ptr<spdlog::logger>& logger = Logger();
  if (logger == nullptr) logger = MakeLogger(Level::kInfo, Format::kText);
  return *logger;
}

// The code point starting at value[i] and its length in bytes; an invalid
// or truncated UTF-8 sequence is one byte of U+FFFD, so what callers send
// (client names, method paths) can never make a line invalid UTF-8.
std::pair<uint32_t, size_t> DecodeUtf8(absl::string_view value, size_t i) {
  constexpr std::pair<uint32_t, size_t> kInvalid = {0xFFFD, 1};
  const auto byte = [&](size_t k) {
    return static_cast<unsigned char>(value[k]);
  };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return {lead, 1};
  size_t length;
  uint32_t cp;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    cp = lead & 0x07;
  } else {
    return kInvalid;
  }
  if (i + length > value.size()) return kInvalid;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return kInvalid;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF.
  const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[length] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return kInvalid;
  }
  return {cp, length};
}

// A JSON string. Besides JSON's own escapes, C1 controls and the Unicode
// line separators (U+0085, U+2028, U+2029) are escaped too, so no reader
// splits an event in two.
void AppendJsonString(std::string& out, absl::string_view value) {
  out.push_back('"');
  for (size_t i = 0; i < value.size();) {
    const auto [cp, length] = DecodeUtf8(value, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 ||
            cp == 0x2029 || cp == 0xFFFD) {
          absl::StrAppendFormat(&out, "\\u%04x", cp);
        } else {
          out.append(value.data() + i, length);
        }
    }
    i += length;
  }
  out.push_back('"');
}

// Bare when plain printable ASCII without blanks, '=', quotes or
// backslashes; otherwise quoted as a JSON string, so a line splits on
// blanks and '=' without a parser.
void AppendTextValue(std::string& out, absl::string_view value) {
  bool bare = !value.empty();
  for (const char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7F || c == '=' || c == '"' || c == '\\') {
      bare = false;
      break;
    }
  }
  if (bare) {
    out.append(value.data(), value.size());
  } else {
    AppendJsonString(out, value);
  }
}

}  // namespace

absl::StatusOr<Level> ParseLevel(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug") return Level::kDebug;
  if (lower == "info") return Level::kInfo;
  if (lower == "warning" || lower == "warn") return Level::kWarning;
  if (lower == "error") return Level::kError;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level=", text, ": expected debug, info, warning or error"));
}

absl::StatusOr<Format> ParseFormat(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "text") return Format::kText;
  if (lower == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format=", text, ": expected text or json"));
}

void Init(Level level, Format format, const std::string& file) {
  g_format = format;
  Logger() = MakeLogger(level, format, file);
}

bool Enabled(Level level) { return Current().should_log(ToSpd(level)); }

std::string Redact(absl::string_view message) {
  constexpr size_t kSecretDigits = 32;
  std::string out;
  out.reserve(message.size());
  size_t i = 0;
  while (i < message.size()) {
    size_t j = i;
    while (j < message.size() && absl::ascii_isxdigit(message[j])) ++j;
    if (j - i >= kSecretDigits) {
      out += "<redacted>";
    } else {
      out.append(message.data() + i, j - i);
    }
    if (j < message.size()) out.push_back(message[j]);
    i = j + 1;
  }
  return out;
}

Event::Event(Level level, absl::string_view name)
    : enabled_(Enabled(level)), level_(level) {
  if (!enabled_) return;
  if (g_format == Format::kJson) {
    line_ = "\"event\":";
    AppendJsonString(line_, name);
  } else {
    line_ = "event=";
    AppendTextValue(line_, name);
  }
}

Event::~Event() {
  if (enabled_) Current().log(ToSpd(level_), "{}", line_);
}

Event& Event::Str(absl::string_view key, absl::string_view value) {
  if (!enabled_) return *this;
  if (g_format == Format::kJson) {
    line_.push_back(',');
    AppendJsonString(line_, key);
    line_.push_back(':');
    AppendJsonString(line_, value);
  } else {
    absl::StrAppend(&line_, " ", key, "=");
    AppendTextValue(line_, value);
  }
  return *this;
}

Event& Event::Bool(absl::string_view key, bool value) {
  if (enabled_) AddNumber(key, value ? "true" : "false");
  return *this;
}

Event& Event::Status(const absl::Status& status) {
  if (!enabled_) return *this;
  Str("code", absl::StatusCodeToString(status.code()));
  if (!status.ok()) Str("error", status.message());
  return *this;
}

Event& Event::CallStatus(const absl::Status& status) {
  if (!enabled_) return *this;
  Str("code", absl::StatusCodeToString(status.code()));
  if (!status.ok()) Str("error", Redact(status.message()));
  return *this;
}

std::string Event::Render(double value) {
  return absl::StrFormat("%.6g", value);
}
std::string Event::Render(int64_t value) { return absl::StrCat(value); }
std::string Event::Render(uint64_t value) { return absl::StrCat(value); }

void Event::AddNumber(absl::string_view key, const std::string& value) {
  if (g_format == Format::kJson) {
    line_.push_back(',');
    AppendJsonString(line_, key);
    absl::StrAppend(&line_, ":", value);
  } else {
    absl::StrAppend(&line_, " ", key, "=", value);
  }
}

}  // namespace gpustream::log
