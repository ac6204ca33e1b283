// The command table and helpers the commands share.
#include "tools/gpustreamctl/commands.h"

namespace gpustream::ctl {

const std::vector<Command>& AllCommands() {
  static const auto* commands = new std::vector<Command>{
      {"version", "", 0, 0,
       "gpustreamctl's version and the daemon's (server version, protocol)",
       &RunVersion},
      {"health", "", 0, 0,
       "the daemon's gRPC health status: SERVING (exit 0) or NOT_SERVING "
       "(exit 5)",
       &RunHealth},
      {"devices", "", 0, 0, "the devices the daemon serves", &RunDevices},
      {"modules", "", 0, 0, "the loaded kernel modules: one row per kernel",
       &RunModules},
      {"sessions", "", 0, 0, "every live session of every tenant (admin)",
       &RunSessions},
      {"kill", "PUBLIC_ID", 1, 1,
       "end a session by its public id; its owner's next call gets ABORTED "
       "(admin)",
       &RunKill},
      {"stats", "", 0, 0,
       "usage and quotas per tenant, usage per device "
       "(admin)",
       &RunStats},
  };
  return *commands;
}

const Command* FindCommand(absl::string_view name) {
  for (const Command& command : AllCommands()) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::StatusOr<Verdict> EmitJson(const absl::StatusOr<std::string>& json,
                                 std::string* out) {
  if (!json.ok()) return json.status();
  *out = *json + "\n";
  return Verdict::kOk;
}

}  // namespace gpustream::ctl
