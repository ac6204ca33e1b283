// A binary's --help text and --version line, the same way in every binary
// of the project.
#ifndef GPUSTREAM_SERVER_USAGE_H_
#define GPUSTREAM_SERVER_USAGE_H_

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#include "server/version.h"

namespace gpustream {

// Sets the --help text and the --version line ("PROGRAM 0.1.0"). absl
// prints "PROGRAM: " before `usage`, so `usage` starts with what the
// program does, not its name. Call first thing in main, once.
inline void SetUsage(const char* program, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.version_string = [program] {
    return absl::StrCat(program, " ", kServerVersion, "\n");
  };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace gpustream

#endif  // GPUSTREAM_SERVER_USAGE_H_
