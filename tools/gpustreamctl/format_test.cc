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

TEST(TableTest, HeaderOnlyWhenEmpty) {
  Table table({{"A"}, {"B", Table::Align::kRight}});
  EXPECT_EQ(table.Render(), "A  B\n");
}

}  // namespace
}  // namespace gpustream::ctl
