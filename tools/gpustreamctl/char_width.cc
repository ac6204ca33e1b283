// How many terminal columns UTF-8 text takes (gpustreamctl's tables).
#include <cstddef>

#include "absl/strings/string_view.h"
#include "tools/gpustreamctl/format.h"

namespace gpustream::ctl {
namespace {

struct Range {
  char32_t first, last;
};

// kWide: drawn two columns wide (East Asian Wide and Fullwidth: CJK,
// Hangul syllables, fullwidth forms, emoji). kZeroWidth: drawn in none
// (combining marks, which go on the character before; format characters
// such as zero-width spaces, joiners and bidirectional marks).
#include "tools/gpustreamctl/char_width_tables.inc"

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
  // The second byte's range where it is narrower than 80..BF: no overlong
  // forms (E0, F0), no surrogates (ED), nothing past U+10FFFF (F4).
  const unsigned char second = byte(*i + 1);
  const unsigned char low = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;
  const unsigned char high = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
  if (second < low || second > high) {
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
