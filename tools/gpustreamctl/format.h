// Human-readable renderings of the numbers gpustreamctl prints in tables:
// byte sizes, durations, "used/limit" pairs, and cells safe to print on a
// terminal.
#ifndef GPUSTREAM_TOOLS_GPUSTREAMCTL_FORMAT_H_
#define GPUSTREAM_TOOLS_GPUSTREAMCTL_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace gpustream::ctl {

// Binary units without a space, so a cell stays one word: "512B", "1.0KiB",
// "1.5MiB", "64.0GiB". One decimal from KiB up.
std::string FormatBytes(uint64_t bytes);

// A duration given in milliseconds, in the largest fitting unit: "850ms",
// "1.2s" (under a minute: one decimal, rounded down so a counter never
// reads ahead of itself), "3m04s", "2h03m", "1d02h".
std::string FormatMillis(uint64_t ms);

// The same for fractional seconds (busy times); negative or NaN reads "0ms".
std::string FormatSeconds(double seconds);

// "used/limit" with both rendered by `render`; a `limit` of 0 means no
// limit and reads "-": "1.0MiB/64.0MiB", "3/-".
std::string FormatUsage(uint64_t used, uint64_t limit,
                        std::string (*render)(uint64_t));
// The plain decimal count, for FormatUsage.
std::string FormatCount(uint64_t n);

// `text` made safe and visible in a table cell: control characters (which
// a client could put in its client_name to drive an admin's terminal) are
// replaced by '?', and an empty string reads "-".
std::string Cell(absl::string_view text);

// How many columns `text` (UTF-8) takes on a terminal: two for each East
// Asian Wide or Fullwidth character (CJK, Hangul, fullwidth forms, emoji),
// none for combining marks and zero-width characters, one for anything
// else (a malformed byte included). Unicode 14's tables
// (char_width.cc).
size_t DisplayWidth(absl::string_view text);

}  // namespace gpustream::ctl

#endif  // GPUSTREAM_TOOLS_GPUSTREAMCTL_FORMAT_H_
