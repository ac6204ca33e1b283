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

namespace {

struct Range {
  char32_t first, last;
};

// Code points a terminal draws two columns wide: East Asian Wide and
// Fullwidth (Unicode's EastAsianWidth.txt, W and F), by block; emoji
// presentation symbols are W there too.
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},
    {0x23E9, 0x23EC},   {0x23F0, 0x23F0},   {0x23F3, 0x23F3},
    {0x25FD, 0x25FE},   {0x2614, 0x2615},   {0x2648, 0x2653},
    {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},
    {0x26CE, 0x26CE},   {0x26D4, 0x26D4},   {0x26EA, 0x26EA},
    {0x26F2, 0x26F3},   {0x26F5, 0x26F5},   {0x26FA, 0x26FA},
    {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},
    {0x2728, 0x2728},   {0x274C, 0x274C},   {0x274E, 0x274E},
    {0x2753, 0x2755},   {0x2757, 0x2757},   {0x2795, 0x2797},
    {0x27B0, 0x27B0},   {0x27BF, 0x27BF},   {0x2B1B, 0x2B1C},
    {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x2E80, 0x303E},
    {0x3041, 0x33FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},
    {0xA000, 0xA4CF},   {0xA960, 0xA97F},   {0xAC00, 0xD7A3},
    {0xF900, 0xFAFF},   {0xFE10, 0xFE19},   {0xFE30, 0xFE6F},
    {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4},
    {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004},
    {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A},
    {0x1F200, 0x1F251}, {0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF},
    {0x1F7E0, 0x1F7EB}, {0x1F90C, 0x1F9FF}, {0x1FA70, 0x1FAFF},
    {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

// Code points that take no column of their own: combining marks (drawn on
// the character before), zero-width spaces and joiners, variation
// selectors.
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A},
    {0x064B, 0x065F}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200F},
    {0x2060, 0x2064}, {0x20D0, 0x20FF}, {0x302A, 0x302F}, {0x3099, 0x309A},
    {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0xE0100, 0xE01EF},
};

template <size_t N>
bool In(const Range (&ranges)[N], char32_t c) {
  for (const Range& r : ranges) {
    if (c < r.first) return false;  // Sorted: nothing further matches.
    if (c <= r.last) return true;
  }
  return false;
}

// Decodes the UTF-8 code point at text[*i] and moves *i past it; a byte
// that does not start a well-formed sequence is taken alone (U+FFFD).
char32_t NextCodePoint(absl::string_view text, size_t* i) {
  const auto byte = [&](size_t k) {
    return static_cast<unsigned char>(text[k]);
  };
  const unsigned char lead = byte(*i);
  size_t extra;  // Continuation bytes the lead byte announces.
  if (lead < 0x80) {
    ++*i;
    return lead;
  } else if (lead >= 0xc2 && lead <= 0xdf) {
    extra = 1;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    extra = 2;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    extra = 3;
  } else {
    ++*i;
    return 0xFFFD;
  }
  if (text.size() - *i <= extra) {
    ++*i;
    return 0xFFFD;
  }
  char32_t c = lead & (0x7f >> (extra + 1));
  for (size_t k = 1; k <= extra; ++k) {
    if ((byte(*i + k) & 0xc0) != 0x80) {
      ++*i;
      return 0xFFFD;
    }
    c = (c << 6) | (byte(*i + k) & 0x3f);
  }
  *i += extra + 1;
  return c;
}

}  // namespace

size_t DisplayWidth(absl::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    const char32_t c = NextCodePoint(text, &i);
    width += In(kZeroWidth, c) ? 0 : In(kWide, c) ? 2 : 1;
  }
  return width;
}

}  // namespace gpustream::ctl
