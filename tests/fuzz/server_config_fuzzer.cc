// Fuzz target: the --config file, as the daemon reads it at start-up and on
// SIGHUP: config::ParseServerConfig, then tenants::TenantRegistry::Create
// (what the config means) and Reload.
//
// Invariants: parse errors are INVALID_ARGUMENT with the documented message;
// a parsed config prints and parses back to itself; a registry refusal is
// INVALID_ARGUMENT naming what is wrong; an accepted config authenticates
// each tenant by its TLS subjects and reloads onto itself removing nobody.
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/config/config_file.h"
#include "server/tenants/tenant_registry.h"

namespace gpustream::fuzz {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "server_config_fuzzer: INVARIANT VIOLATED: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

void CheckRegistry(const v1::ServerConfig& config) {
  auto registry = tenants::TenantRegistry::Create(config);
  if (!registry.ok()) {
    if (registry.status().code() != absl::StatusCode::kInvalidArgument ||
        registry.status().message().empty()) {
      Fail(absl::StrCat("TenantRegistry::Create: ",
                        registry.status().ToString()));
    }
    return;
  }
  if ((*registry)->configured() != (config.tenants_size() > 0)) {
    Fail("configured() disagrees with the config's tenants");
  }
  for (const v1::Tenant& tenant : config.tenants()) {
    for (const std::string& subject : tenant.tls_subject()) {
      auto who = (*registry)->Authenticate({std::nullopt, subject});
      if (!who.ok() || who->name() != tenant.name()) {
        Fail(absl::StrCat("tls_subject '", subject, "' of tenant '",
                          tenant.name(), "' does not authenticate it: ",
                          who.ok() ? who->name() : who.status().ToString()));
      }
    }
  }
  auto removed = (*registry)->Reload(config);
  if (!removed.ok() || !removed->empty()) {
    Fail(absl::StrCat("reloading the same config: ",
                      removed.ok() ? absl::StrCat(removed->size(), " removed")
                                   : removed.status().ToString()));
  }
}

}  // namespace
}  // namespace gpustream::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The text parser reports each syntax error on the protobuf log.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpustream;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = config::ParseServerConfig(text, "fuzz.textproto");
  if (!config.ok()) {
    // Always INVALID_ARGUMENT naming the file and the position.
    if (config.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StartsWith(config.status().message(),
                          "--config fuzz.textproto: line ")) {
      fuzz::Fail(
          absl::StrCat("ParseServerConfig: ", config.status().ToString()));
    }
    return 0;
  }
  std::string printed;
  if (!google::protobuf::TextFormat::PrintToString(*config, &printed)) {
    fuzz::Fail("a parsed config does not print");
  }
  auto again = config::ParseServerConfig(printed, "printed");
  if (!again.ok() ||
      again->SerializeAsString() != config->SerializeAsString()) {
    fuzz::Fail("a printed config does not parse back to itself: " + printed);
  }
  fuzz::CheckRegistry(*config);
  return 0;
}
