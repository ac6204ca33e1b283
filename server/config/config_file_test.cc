// Tests of reading and parsing the --config file.
#include "server/config/config_file.h"

#include <cstdio>
#include <fstream>
#include <string>

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

TEST(ConfigFileTest, RefusesWhatIsNotAServerConfig) {
  for (const char* text : {"backend: cpu_without_quotes", "nope: 1",
                           "limits { max_sessions: -1 }", "tenants {"}) {
    auto config = ParseServerConfig(text, "bad.textproto");
    ASSERT_FALSE(config.ok()) << text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(config.status().message(),
              "--config bad.textproto is not a valid ServerConfig");
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

  auto missing = LoadServerConfig(path + ".missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "--config " + path + ".missing cannot be read");
}

}  // namespace
}  // namespace gpustream::config
