// gpustreamctl's commands: one function each, and the table main()
// dispatches on.
#ifndef GPUSTREAM_TOOLS_GPUSTREAMCTL_COMMANDS_H_
#define GPUSTREAM_TOOLS_GPUSTREAMCTL_COMMANDS_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/gpustreamctl/connection.h"

namespace gpustream::ctl {

// What a successful command found, beyond "it worked".
enum class Verdict {
  kOk,
  kNotServing,  // health: the daemon answered, and is not serving.
};

// One run of a command: its positional arguments (the command word
// excluded; their count already checked against the Command) and where
// its output goes.
struct Invocation {
  const Connection& connection;
  std::vector<std::string> args;
  // Receives the whole output on success (a table, or one JSON document
  // and a newline); nothing is written on failure.
  std::string* out;
};

// Contract of every command: the status is OK, or the status of the daemon
// call that failed (its gRPC code and message as the daemon sent them), and
// then *out is left empty.
using CommandFn = absl::StatusOr<Verdict> (*)(const Invocation&);

struct Command {
  const char* name;
  const char* args_usage;  // e.g. "PUBLIC_ID"; "" when it takes none.
  size_t min_args, max_args;
  const char* summary;
  CommandFn run;
};

// Every command, in the order `help` lists them.
const std::vector<Command>& AllCommands();
// The command named `name`, or null.
const Command* FindCommand(absl::string_view name);

// The commands (commands_discovery.cc, commands_admin.cc).
absl::StatusOr<Verdict> RunVersion(const Invocation& in);
absl::StatusOr<Verdict> RunHealth(const Invocation& in);
absl::StatusOr<Verdict> RunDevices(const Invocation& in);
absl::StatusOr<Verdict> RunModules(const Invocation& in);
absl::StatusOr<Verdict> RunSessions(const Invocation& in);
absl::StatusOr<Verdict> RunKill(const Invocation& in);
absl::StatusOr<Verdict> RunStats(const Invocation& in);

// A gRPC status as an absl::Status with the same code and message.
absl::Status FromGrpc(const grpc::Status& status);

// `json` (one document) followed by a newline, or `json`'s error.
absl::StatusOr<Verdict> EmitJson(const absl::StatusOr<std::string>& json,
                                 std::string* out);

}  // namespace gpustream::ctl

#endif  // GPUSTREAM_TOOLS_GPUSTREAMCTL_COMMANDS_H_
