// Units, durations, usage pairs, cell sanitizing and table alignment.
#include "tools/gpustreamctl/format.h"

#include <string>

#include "gtest/gtest.h"
#include "tools/gpustreamctl/table.h"

namespace gpustream::ctl {
namespace {

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0B");
  EXPECT_EQ(FormatBytes(1023), "1023B");
  EXPECT_EQ(FormatBytes(1024), "1.0KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5KiB");
  EXPECT_EQ(FormatBytes(64ull << 20), "64.0MiB");
  // Never "1024.0KiB": the next unit takes over.
  EXPECT_EQ(FormatBytes((1ull << 20) - 1), "1.0MiB");
  EXPECT_EQ(FormatBytes(141ull << 30), "141.0GiB");
  EXPECT_EQ(FormatBytes(UINT64_MAX), "16.0EiB");
}

TEST(FormatTest, Durations) {
  EXPECT_EQ(FormatMillis(0), "0ms");
  EXPECT_EQ(FormatMillis(999), "999ms");
  EXPECT_EQ(FormatMillis(1250), "1.2s");
  EXPECT_EQ(FormatMillis(59'999), "59.9s");
  EXPECT_EQ(FormatMillis(184'000), "3m04s");
  EXPECT_EQ(FormatMillis(7'380'000), "2h03m");
  EXPECT_EQ(FormatMillis(93'600'000), "1d02h");
  EXPECT_EQ(FormatSeconds(0.0125), "12ms");
  EXPECT_EQ(FormatSeconds(1.25), "1.2s");
  EXPECT_EQ(FormatSeconds(-1), "0ms");
}

TEST(FormatTest, Usage) {
  EXPECT_EQ(FormatUsage(1, 8, &FormatCount), "1/8");
  EXPECT_EQ(FormatUsage(3, 0, &FormatCount), "3/-");
  EXPECT_EQ(FormatUsage(1 << 20, 64 << 20, &FormatBytes), "1.0MiB/64.0MiB");
}

TEST(FormatTest, CellsAreSafeOnATerminal) {
  EXPECT_EQ(Cell(""), "-");
  EXPECT_EQ(Cell("a\x1b[2Jb\n"), "a?[2Jb?");
  // A right-to-left override (U+202E) and an isolate (U+2066).
  EXPECT_EQ(Cell("evil\xe2\x80\xae"
                 "gnp.\xe2\x81\xa6x"),
            "evil?gnp.?x");
  EXPECT_EQ(Cell("caf\xc3\xa9 \xe2\x80\x94"), "caf\xc3\xa9 \xe2\x80\x94");
  EXPECT_EQ(Cell("x\xc2\x9b"
                 "1m"),
            "x?1m");  // C1 CSI.
  EXPECT_EQ(Cell("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(DisplayWidth("caf\xc3\xa9"), 4u);
}

TEST(TableTest, AlignsColumns) {
  Table table({{"NAME"}, {"COUNT", Table::Align::kRight}, {"NOTE"}});
  table.AddRow({"a", "1", "x"});
  table.AddRow({"longer", "12345", "caf\xc3\xa9"});
  EXPECT_EQ(table.Render(),
            "NAME    COUNT  NOTE\n"
            "a           1  x\n"
            "longer  12345  caf\xc3\xa9\n");
}

TEST(FormatTest, WideAndZeroWidthCharactersTakeTheirColumns) {
  EXPECT_EQ(DisplayWidth("\xe6\xbc\xa2\xe5\xad\x97"), 4u);  // 漢字
  EXPECT_EQ(DisplayWidth("\xed\x95\x9c"), 2u);              // 한
  EXPECT_EQ(DisplayWidth("\xef\xbc\xa1"), 2u);              // Ａ, fullwidth
  EXPECT_EQ(DisplayWidth("\xef\xbd\xb6"), 1u);      // ｶ, halfwidth katakana
  EXPECT_EQ(DisplayWidth("\xf0\x9f\x98\x80"), 2u);  // 😀
  EXPECT_EQ(DisplayWidth("e\xcc\x81"), 1u);         // e + combining acute
  EXPECT_EQ(DisplayWidth("a\xe2\x80\x8b"
                         "b"),
            2u);  // a, zero-width space, b
  // Combining marks beyond Latin: Thai (ที่) and Devanagari (नमस्ते).
  EXPECT_EQ(DisplayWidth("\xe0\xb8\x97\xe0\xb8\xb5\xe0\xb9\x88"), 1u);
  EXPECT_EQ(DisplayWidth("\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5"
                         "\x8d\xe0\xa4\xa4\xe0\xa5\x87"),
            4u);
  EXPECT_EQ(DisplayWidth("\xc2\xad"), 1u);  // The soft hyphen shows.
  // Malformed bytes take a column each, and never read past the end.
  EXPECT_EQ(DisplayWidth("\xff\xc3"), 2u);
  EXPECT_EQ(DisplayWidth("x\xe6\xbc"), 3u);
  EXPECT_EQ(DisplayWidth("\xe0\x8c\x80"), 3u);      // Overlong U+0300.
  EXPECT_EQ(DisplayWidth("\xf0\x83\x80\x80"), 4u);  // Overlong U+3000.
  EXPECT_EQ(DisplayWidth("\xed\xa0\x80"), 3u);      // A surrogate.
  EXPECT_EQ(DisplayWidth("\xf4\x90\x80\x80"), 4u);  // Past U+10FFFF.
}

TEST(TableTest, AlignsWideCharacters) {
  Table table({{"CLIENT"}, {"QUEUES", Table::Align::kRight}});
  table.AddRow({"\xe6\xbc\xa2\xe5\xad\x97\xe5\xad\x97", "1"});  // 漢字字
  table.AddRow({"abc", "22"});
  EXPECT_EQ(table.Render(),
            "CLIENT  QUEUES\n"
            "\xe6\xbc\xa2\xe5\xad\x97\xe5\xad\x97       1\n"
            "abc         22\n");
}

TEST(TableTest, HeaderOnlyWhenEmpty) {
  Table table({{"A"}, {"B", Table::Align::kRight}});
  EXPECT_EQ(table.Render(), "A  B\n");
}

}  // namespace
}  // namespace gpustream::ctl
