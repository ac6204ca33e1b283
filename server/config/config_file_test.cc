// Tests of reading and parsing the --config file.
#include "server/config/config_file.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpustream::config {
namespace {

TEST(ConfigFileTest, ParsesTextFormat) {
  auto config = ParseServerConfig(
      "backend: \"cpu\"\n"
      "limits { max_sessions: 3 }\n"
      "tenants { name: \"a\" tls_subject: \"CN=a\" admin: true }\n",
      "c.textproto");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->backend(), "cpu");
  EXPECT_EQ(config->limits().max_sessions(), 3u);
  ASSERT_EQ(config->tenants_size(), 1);
  EXPECT_TRUE(config->tenants(0).admin());
}

// Every error names the file, the line and column (1-based) and what is
// wrong there, the field or token included.
TEST(ConfigFileTest, RefusesWhatIsNotAServerConfigSayingWhere) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"backend: cpu_without_quotes",
            "--config bad.textproto: line 1, column 10: Expected string, got: "
            "cpu_without_quotes"},
           {"backend: \"cpu\"\nnope: 1",
            "--config bad.textproto: line 2, column 5: Message type "
            "\"gpustream.v1.ServerConfig\" has no field named \"nope\"."},
           {"limits {\n  max_sessions: -1 }",
            "--config bad.textproto: line 2, column 17: Expected integer, got: "
            "-"},
           {"tenants {\n  name: \"a\"\n  admn: true\n}",
            "--config bad.textproto: line 3, column 7: Message type "
            "\"gpustream.v1.Tenant\" has no field named \"admn\"."},
           {"tenants {",
            "--config bad.textproto: line 1, column 10: Expected identifier, "
            "got: "}}) {
    auto config = ParseServerConfig(c.text, "bad.textproto");
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(config.status().message()), c.message);
  }
}

TEST(ConfigFileTest, EmptyPathIsTheEmptyConfig) {
  auto config = LoadServerConfig("");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->ByteSizeLong(), 0u);
}

TEST(ConfigFileTest, LoadsAFileAndNamesAMissingOne) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/gpustreamd.textproto";
  std::ofstream(path) << "listen: \"unix:/tmp/x.sock\"\n";
  auto config = LoadServerConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen(0), "unix:/tmp/x.sock");

  // A directory is no config (it would read as one without tenants).
  auto directory = LoadServerConfig(std::getenv("TEST_TMPDIR"));
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("is not a regular file"),
            std::string::npos);

  auto missing = LoadServerConfig(path + ".missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "--config " + path + ".missing cannot be read");
}

}  // namespace
}  // namespace gpustream::config
