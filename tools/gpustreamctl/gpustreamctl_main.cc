// gpustreamctl: the admin and operations command line of gpustreamd.
// Flags, dispatch and exit codes; the commands are in commands*.cc. The
// reference is docs/gpustreamctl.md.
#include <grpc/support/log.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/version.h"
#include "tools/gpustreamctl/commands.h"
#include "tools/gpustreamctl/connection.h"
#include "tools/gpustreamctl/exit_codes.h"

ABSL_FLAG(std::string, target, "",
          "The daemon: unix:/path or host:port (default $GPUSTREAM_TARGET, "
          "else unix:/tmp/gpustreamd.sock)");
ABSL_FLAG(std::string, token, "",
          "Bearer token (default $GPUSTREAM_TOKEN). Visible to other users "
          "in the process list: prefer --token_file or the environment");
ABSL_FLAG(std::string, token_file, "",
          "A file holding the bearer token (surrounding whitespace ignored)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file: the CA that signed the daemon's certificate (TLS on a "
          "host:port target; without it, the system roots)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file: a client certificate for mutual TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM file: the key of --tls_cert");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "Deadline of each call to the daemon, e.g. 5s, 500ms");
ABSL_FLAG(bool, json, false,
          "Print one JSON document (protobuf JSON, lowerCamel names)");

namespace gpustream::ctl {
namespace {

constexpr char kProgram[] = "gpustreamctl";

// The flags this program defines. Anything else (absl's own --flagfile,
// --helpfull, ...) is refused, so the command line means what it says.
const std::set<std::string>& KnownFlags() {
  static const auto* flags =
      new std::set<std::string>{"target",   "token",   "token_file", "tls_ca",
                                "tls_cert", "tls_key", "timeout",    "json"};
  return *flags;
}

// The boolean ones among them: "--json" alone is "--json=true", and they
// have a "--nojson" form.
const std::set<std::string>& BoolFlags() {
  static const auto* flags = new std::set<std::string>{"json"};
  return *flags;
}

std::string Usage() {
  std::string text =
      absl::StrCat("Usage: ", kProgram,
                   " [options] COMMAND [ARGS] [options]\n\n", "Commands:\n");
  for (const Command& c : AllCommands()) {
    absl::StrAppendFormat(&text, "  %-20s %s\n",
                          absl::StrCat(c.name, " ", c.args_usage), c.summary);
  }
  absl::StrAppend(
      &text, "  help                 this text\n\n", "Options:\n",
      "  --target=ADDR        unix:/path or host:port (default "
      "$GPUSTREAM_TARGET,\n",
      "                       else unix:/tmp/gpustreamd.sock)\n",
      "  --token=TOKEN        bearer token (default $GPUSTREAM_TOKEN)\n",
      "  --token_file=PATH    read the bearer token from a file\n",
      "  --tls_ca=PEM         TLS to a host:port target, trusting this CA\n",
      "  --tls_cert=PEM, --tls_key=PEM\n",
      "                       client certificate and key (mutual TLS)\n",
      "  --timeout=DURATION   deadline of each call (default 5s)\n",
      "  --json               one JSON document instead of a table\n",
      "  --version            print gpustreamctl's version and exit\n\n",
      "Exit codes: 0 ok; 1 the daemon answered with an error; 2 usage;\n",
      "3 daemon unreachable or timed out; 4 not authorized (UNAUTHENTICATED,\n",
      "PERMISSION_DENIED); 5 health: NOT_SERVING. See docs/gpustreamctl.md.\n");
  return text;
}

// What a look at the command line before absl parses it found.
enum class Precheck { kRun, kHelp, kVersion };

// absl::ParseCommandLine exits with status 1 on an unknown flag or a bad
// value, which scripts would read as "the daemon refused". So the flags are
// checked here first, with absl's own syntax (--name=value, --name value
// for non-bool flags, --name / --noname for bools, one or two dashes, "--"
// ends the flags), and every problem becomes a usage error (exit 2).
absl::StatusOr<Precheck> CheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // Positional ("-" too).
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const bool has_value = eq != absl::string_view::npos;
    std::string name(body.substr(0, eq));
    if (name == "help" || name == "h") return Precheck::kHelp;
    if (name == "version" && !has_value) return Precheck::kVersion;
    bool negated = false;
    if (KnownFlags().count(name) == 0 && absl::StartsWith(name, "no") &&
        BoolFlags().count(name.substr(2)) > 0) {
      negated = true;
      name = name.substr(2);
    }
    absl::CommandLineFlag* flag = KnownFlags().count(name) > 0
                                      ? absl::FindCommandLineFlag(name)
                                      : nullptr;
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag -", arg[1] == '-' ? "-" : "", body.substr(0, eq)));
    }
    if (negated && has_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("--no", name, " takes no value"));
    }
    if (BoolFlags().count(name) > 0 && !has_value) continue;
    std::string value;
    if (has_value) {
      value = std::string(body.substr(eq + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value"));
    }
    // Parsing into the flag itself is harmless: absl parses the same text
    // into it again below.
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      // Only --timeout and --json can fail here: string flags (the token
      // among them) take any text, so no token reaches this message.
      return absl::InvalidArgumentError(
          absl::StrCat("bad value for --", name, ": ", error));
    }
  }
  return Precheck::kRun;
}

int UsageError(absl::string_view command, absl::string_view message) {
  std::fprintf(stderr, "%s: %s%susage: %.*s\nRun '%s help' for usage.\n",
               kProgram, std::string(command).c_str(),
               command.empty() ? "" : ": ", static_cast<int>(message.size()),
               message.data(), kProgram);
  return kExitUsage;
}

void DiscardGrpcLog(gpr_log_func_args*) {}

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

int Main(int argc, char** argv) {
  // gRPC also logs transport failures (a failed TLS handshake) on stderr;
  // the status printed below carries the same reason, and stderr stays one
  // "gpustreamctl: ..." line per error. Setting GRPC_VERBOSITY or
  // GRPC_TRACE brings gRPC's own log back, for debugging.
  if (std::getenv("GRPC_VERBOSITY") == nullptr &&
      std::getenv("GRPC_TRACE") == nullptr) {
    gpr_set_log_function(&DiscardGrpcLog);
  }
  absl::StatusOr<Precheck> precheck = CheckFlags(argc, argv);
  if (!precheck.ok()) return UsageError("", precheck.status().message());
  if (*precheck == Precheck::kHelp) {
    std::fputs(Usage().c_str(), stdout);
    return kExitOk;
  }
  if (*precheck == Precheck::kVersion) {  // This binary's; no daemon asked.
    std::printf("%s %s\n", kProgram, kServerVersion);
    return kExitOk;
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) return UsageError("", "no command given");
  const std::string name = positional[1];
  const std::vector<std::string> args(positional.begin() + 2, positional.end());
  if (name == "help") {
    std::fputs(Usage().c_str(), stdout);
    return kExitOk;
  }
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    return UsageError("", absl::StrCat("unknown command '", name, "'"));
  }
  if (args.size() < command->min_args || args.size() > command->max_args) {
    return UsageError(
        name, command->max_args == 0
                  ? absl::StrCat("takes no arguments, got ", args.size())
                  : absl::StrCat("expects ", command->args_usage, ", got ",
                                 args.size(), " arguments"));
  }
  if (command->min_args > 0 && args[0].empty()) {
    return UsageError(name, absl::StrCat(command->args_usage, " is empty"));
  }

  RawOptions raw;
  raw.target = absl::GetFlag(FLAGS_target);
  raw.token = absl::GetFlag(FLAGS_token);
  raw.token_file = absl::GetFlag(FLAGS_token_file);
  raw.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  raw.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  raw.tls_key = absl::GetFlag(FLAGS_tls_key);
  raw.timeout = absl::GetFlag(FLAGS_timeout);
  raw.json = absl::GetFlag(FLAGS_json);
  raw.env_target = EnvOrEmpty("GPUSTREAM_TARGET");
  raw.env_token = EnvOrEmpty("GPUSTREAM_TOKEN");
  absl::StatusOr<Options> options = ResolveOptions(raw);
  if (!options.ok()) return UsageError(name, options.status().message());

  const Connection connection(*std::move(options));
  std::string out;
  absl::StatusOr<Verdict> verdict =
      command->run(Invocation{connection, args, &out});
  if (!verdict.ok()) {
    const absl::Status& s = verdict.status();
    std::string message(s.message());
    // "Unreachable" is about an address: say which one was tried.
    if (ExitCodeFor(s) == kExitUnreachable) {
      absl::StrAppend(&message, " (target ", connection.options().target, ")");
    }
    std::fprintf(stderr, "%s: %s: %s: %s\n", kProgram, name.c_str(),
                 absl::StatusCodeToString(s.code()).c_str(), message.c_str());
    return ExitCodeFor(s);
  }
  std::fputs(out.c_str(), stdout);
  return *verdict == Verdict::kNotServing ? kExitNotServing : kExitOk;
}

}  // namespace
}  // namespace gpustream::ctl

int main(int argc, char** argv) { return gpustream::ctl::Main(argc, argv); }
