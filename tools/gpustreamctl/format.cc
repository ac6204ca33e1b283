// Number and text formatting for gpustreamctl's tables.
#include "tools/gpustreamctl/format.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpustream::ctl {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, "B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  // Move up while the value would print as 1024.0 or more in this unit.
  while (value >= 1023.95 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f%s", value, kUnits[unit]);
}

std::string FormatMillis(uint64_t ms) {
  if (ms < 1000) return absl::StrCat(ms, "ms");
  if (ms < 60'000) {
    return absl::StrFormat("%d.%ds", ms / 1000, (ms % 1000) / 100);
  }
  const uint64_t s = ms / 1000;
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatSeconds(double seconds) {
  if (!(seconds > 0)) return "0ms";
  const double ms = std::floor(seconds * 1000);
  // Beyond what uint64 milliseconds hold (half a billion years) is noise.
  if (ms >= 1.8e19) return FormatMillis(UINT64_MAX);
  return FormatMillis(static_cast<uint64_t>(ms));
}

std::string FormatCount(uint64_t n) { return absl::StrCat(n); }

std::string FormatUsage(uint64_t used, uint64_t limit,
                        std::string (*render)(uint64_t)) {
  return absl::StrCat(render(used), "/", limit == 0 ? "-" : render(limit));
}

std::string Cell(absl::string_view text) {
  if (text.empty()) return "-";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char u = static_cast<unsigned char>(text[i]);
    if (u < 0x20 || u == 0x7f) {
      out.push_back('?');
    } else if (u == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // U+0080..U+009F, the C1 controls (0x9b starts a terminal sequence
      // just as ESC [ does).
      out.push_back('?');
      ++i;
    } else if (u == 0xe2 && i + 2 < text.size() &&
               ((text[i + 1] == '\x80' &&
                 static_cast<unsigned char>(text[i + 2]) >= 0xaa &&
                 static_cast<unsigned char>(text[i + 2]) <= 0xae) ||
                (text[i + 1] == '\x81' &&
                 static_cast<unsigned char>(text[i + 2]) >= 0xa6 &&
                 static_cast<unsigned char>(text[i + 2]) <= 0xa9))) {
      // U+202A..U+202E and U+2066..U+2069, the bidirectional overrides
      // and isolates: a client name must not reorder the admin's row.
      out.push_back('?');
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace gpustream::ctl
