#include "server/log/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpustream::log {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

// Runs `body` with stderr sent to a file; returns what it wrote.
template <typename F>
std::string CaptureStderr(F body) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/log_test_", getpid(), ".txt");
  std::fflush(stderr);
  const int saved = dup(2);
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(file, 2);
  close(file);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(LogTest, TextIsOneKeyValueLinePerEvent) {
  Init(Level::kInfo, Format::kText);
  const std::string out = CaptureStderr([] {
    Info("session_opened")
        .Str("tenant", "alice")
        .Str("client", "my job = 1")
        .Num("device", 0)
        .Num("busy_s", 1.5)
        .Bool("admin", false);
  });
  EXPECT_THAT(out, MatchesRegex("ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z "
                                "level=info event=session_opened tenant=alice "
                                "client=\"my job = 1\" device=0 busy_s=1.5 "
                                "admin=false\n"));
}

TEST(LogTest, JsonLinesParseAsObjects) {
  Init(Level::kInfo, Format::kJson);
  const std::string out = CaptureStderr([] {
    Warning("odd")
        .Str("quote", "a\"b\\c\nd")
        .Num("n", uint64_t{18446744073709551615u});
  });
  Init(Level::kInfo, Format::kText);
  EXPECT_THAT(out, MatchesRegex(R"(\{"ts":"[0-9T:.-]+Z","level":"warning",)"
                                R"("event":"odd","quote":"a\\"b\\\\c\\nd",)"
                                R"("n":18446744073709551615\}
)"));
}

TEST(LogTest, WhatCallersSendNeverBreaksALine) {
  Init(Level::kInfo, Format::kJson);
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an
  // overlong '/'), a C1 control and the Unicode line separators.
  const std::string nasty =
      "a\x80"
      "b\xe2\x82 c\xc0\xaf"
      "d\xc2\x85"
      "e\xe2\x80\xa8"
      "f\xe2\x80\xa9"
      "g\xc3\xa9";
  const std::string json = CaptureStderr([&] { Info("x").Str("v", nasty); });
  Init(Level::kInfo, Format::kText);
  EXPECT_THAT(json, HasSubstr(R"("v":"a\ufffdb\ufffd\ufffd c\ufffd\ufffdd)"
                              R"(\u0085e\u2028f\u2029g)"
                              "\xc3\xa9\""));
  const std::string text = CaptureStderr([&] { Info("x").Str("v", nasty); });
  EXPECT_THAT(text, HasSubstr(R"(v="a\ufffdb)"));
  EXPECT_THAT(text, Not(HasSubstr("\xe2\x80\xa8")));
  // Non-ASCII is quoted in text lines, whatever it is.
  EXPECT_THAT(CaptureStderr([] { Info("x").Str("v", "caf\xc3\xa9"); }),
              HasSubstr("v=\"caf\xc3\xa9\""));
}

TEST(LogTest, EventsBelowTheLevelAreDropped) {
  Init(Level::kWarning, Format::kText);
  const std::string out = CaptureStderr([] {
    Debug("d");
    Info("i");
    Warning("w");
    Error("e");
  });
  EXPECT_FALSE(Enabled(Level::kInfo));
  EXPECT_TRUE(Enabled(Level::kWarning));
  Init(Level::kInfo, Format::kText);
  EXPECT_THAT(out, Not(HasSubstr("event=d")));
  EXPECT_THAT(out, Not(HasSubstr("event=i")));
  EXPECT_THAT(out, HasSubstr("level=warning event=w"));
  EXPECT_THAT(out, HasSubstr("level=error event=e"));
}

TEST(LogTest, StatusesNeverShowASessionId) {
  Init(Level::kInfo, Format::kText);
  const std::string id = "0123456789abcdef0123456789ABCDEF";
  const std::string out = CaptureStderr([&] {
    Info("rpc_failed")
        .CallStatus(
            absl::NotFoundError(absl::StrCat("unknown session_id '", id, "'")));
  });
  EXPECT_THAT(out, Not(HasSubstr(id)));
  EXPECT_THAT(out, HasSubstr("code=NOT_FOUND error=\"unknown session_id "
                             "'<redacted>'\""));
  // The daemon's own errors keep their text (paths may hold hashes).
  const std::string path = "/cache/" + id + "/x.pem";
  EXPECT_THAT(CaptureStderr([&] {
                Error("start_failed").Status(absl::InvalidArgumentError(path));
              }),
              HasSubstr(path));
  // Shorter hex (public ids, queue ids) stays.
  EXPECT_EQ(Redact("s-0123abcd queue 12"), "s-0123abcd queue 12");
}

TEST(LogTest, FlagValuesAreChecked) {
  EXPECT_EQ(*ParseLevel("WARNING"), Level::kWarning);
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_THAT(ParseLevel("loud").status().message(),
              HasSubstr("--log_level=loud"));
  EXPECT_EQ(ParseFormat("xml").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpustream::log
