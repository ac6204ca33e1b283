// gpustreamd: the GPU stream daemon. See README.md and --help.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/gpustream/v1/server_config.pb.h"
#include "server/backend/backend_factory.h"
#include "server/config/config_file.h"
#include "server/log/library_logs.h"
#include "server/log/log.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_server.h"
#include "server/metrics/stats_collector.h"
#include "server/rpc/grpc_server.h"
#include "server/session/server_core.h"
#include "server/tenants/operator_token.h"
#include "server/tenants/tenant_registry.h"
#include "server/usage.h"
#include "server/util/release_mutexes.h"
#include "server/version.h"

ABSL_FLAG(std::vector<std::string>, listen, {"unix:/tmp/gpustreamd.sock"},
          "Addresses to serve, comma-separated or repeated: unix:/path or "
          "host:port (port 0 picks a free one). A TCP listener, even on "
          "loopback, authenticates nobody unless tenants are configured "
          "(--config)");
ABSL_FLAG(std::string, backend, "auto",
          "auto | cpu | cuda | hip. auto tries CUDA, then HIP (where "
          "/dev/kfd exists or --hip_runtime is given), and takes the first "
          "whose driver loads and has a device, else the embedded CPU "
          "backend");
ABSL_FLAG(std::vector<std::string>, modules, {},
          "Folders of extra kernel modules (CPU: *.so exporting "
          "gpustream_cpu_module, see kernels/cpu/gpustream_cpu_module.h). "
          "The samples module is always loaded");
ABSL_FLAG(std::string, config, "",
          "A gpustream.v1.ServerConfig in protobuf text format "
          "(proto/gpustream/v1/server_config.proto); flags override it");
ABSL_FLAG(std::string, cuda_driver, "libcuda.so.1",
          "The CUDA driver library the cuda backend loads: a file name "
          "searched as dlopen does, or a path (tests point it at the fake "
          "driver)");
ABSL_FLAG(std::string, hip_runtime, "",
          "The HIP runtime library the hip backend loads: a file name "
          "searched as dlopen does, or a path (tests point it at the fake "
          "runtime); empty: libamdhip64.so.6, then libamdhip64.so.5");
ABSL_FLAG(std::string, gpu_sharing, "",
          "How tenants share a GPU: shared_context (one context, the "
          "default), context_per_tenant (a context of each tenant's own: "
          "faults stay in it) or sm_partitions (CUDA green contexts: SMs "
          "split by weight). Empty: the config's gpu_sharing. The CPU "
          "backend keeps its weighted fair queuing in every mode");
ABSL_FLAG(uint64_t, cpu_memory_bytes, uint64_t{1} << 30,
          "Device memory of the CPU backend, in bytes");
ABSL_FLAG(uint32_t, lease_seconds, 60,
          "Default session lease, in seconds (a session a client stops "
          "renewing ends after it)");
ABSL_FLAG(uint32_t, cpu_threads, 0,
          "Execution threads of the CPU backend, shared by every queue by "
          "weighted fair queuing; 0: one per core");
ABSL_FLAG(uint32_t, kernel_time_limit_ms, 60000,
          "CPU backend: a launch running longer is stopped and fails its "
          "queue with DEADLINE_EXCEEDED");
// Observability.
ABSL_FLAG(std::string, log_level, "info",
          "Least severe log events written: debug | info | warning | error. "
          "debug adds every failed call");
ABSL_FLAG(std::string, log_format, "text",
          "Log lines on stderr: text (ts=... level=... event=... key=value) "
          "or json (one object per line)");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on at /metrics over HTTP "
          "(e.g. 0.0.0.0:9400; port 0 picks one). Off when empty");

ABSL_FLAG(std::string, ready_file, "",
          "Once serving, write the bound addresses to this file, one a line "
          "(for scripts and tests that pick port 0)");

// Transport security: TLS on TCP listeners, permissions of unix sockets.
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file: the server's certificate chain (leaf first). With "
          "--tls_key, every TCP listener serves TLS only; unix: sockets stay "
          "plaintext (local; their file permissions guard them)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM file: the private key of --tls_cert (no passphrase)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM file of CA certificates (needs --tls_cert): TCP clients are "
          "asked for a certificate, and one that does not verify against "
          "these CAs fails the handshake. A verified certificate's subject, "
          "in RFC 2253 form (\"CN=alice\", \"CN=alice,O=Acme\" as `openssl "
          "x509 -noout -subject -nameopt RFC2253` prints it), authenticates "
          "the tenant whose tls_subject it is. A certificate is not required: "
          "a client without one authenticates with a bearer token");
ABSL_FLAG(bool, allow_insecure_tcp, false,
          "Serve plaintext TCP on addresses that are not loopback. Without "
          "it, listening on such an address (0.0.0.0, [::], a LAN address) "
          "without --tls_cert/--tls_key is refused: bearer tokens and data "
          "would cross the network in the clear");
ABSL_FLAG(std::string, unix_socket_mode, "0660",
          "Permission bits of unix: sockets, in octal (at most 0777): who may "
          "connect. 0660: the daemon's user and the socket's group "
          "(--unix_socket_group)");
ABSL_FLAG(std::string, operator_token_file, "",
          "Where to write the operator token, a random secret drawn at each "
          "start (mode 0600: the daemon's user and root read it) that makes "
          "its bearer an admin (tenant local-operator), tenants configured "
          "or not; removed at exit. gpustreamctl reads it by itself. "
          "Default: the first unix: socket's path + \".operator-token\"; "
          "\"none\": no operator token");
ABSL_FLAG(std::string, unix_socket_group, "",
          "Group (name or gid) given the unix: sockets, so its members may "
          "connect under the default mode 0660. The daemon's user must be "
          "a member (or root)");

ABSL_FLAG(std::string, share_socket, "auto",
          "Unix socket where clients on this host fetch HOST_SHARED "
          "buffers' memory (a memfd passed for a single-use ticket). "
          "\"auto\": beside the first unix: --listen socket (PATH.share), "
          "none without one; \"off\": no sharing (HOST_SHARED allocations "
          "are refused); else a path. It gets the unix sockets' mode and "
          "group");

namespace gpustream {
namespace {

using config::LoadServerConfig;

// "--listen a --listen b" would keep only b: join repeats into one list.
// Single or double dash, as absl takes them; the merged flag stands where
// the first one was (before any "--", after which nothing is a flag).
std::vector<char*> MergeRepeatedListen(int argc, char** argv,
                                       std::string& merged) {
  std::vector<char*> out;
  std::vector<std::string> values;
  size_t at = 0;
  bool flags_ended = false;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") flags_ended = true;
    const bool bare = arg == "--listen" || arg == "-listen";
    const size_t prefix = arg.rfind("--listen=", 0) == 0  ? 9
                          : arg.rfind("-listen=", 0) == 0 ? 8
                                                          : 0;
    if (!flags_ended && bare && i + 1 < argc) {
      if (values.empty()) at = out.size();
      values.push_back(argv[++i]);
    } else if (!flags_ended && prefix != 0) {
      if (values.empty()) at = out.size();
      values.push_back(arg.substr(prefix));
    } else {
      out.push_back(argv[i]);
    }
  }
  if (!values.empty()) {
    merged = "--listen=" + absl::StrJoin(values, ",");
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), merged.data());
  }
  return out;
}

// --- Transport security (TLS, the plaintext-TCP rule, unix sockets) ---

// --unix_socket_mode: octal digits only ("0660", "660"), at most 0777.
absl::StatusOr<mode_t> ParseSocketMode(const std::string& text) {
  const bool octal = !text.empty() && text.size() <= 4 &&
                     text.find_first_not_of("01234567") == std::string::npos;
  const mode_t mode =
      octal ? static_cast<mode_t>(std::stoul(text, nullptr, 8)) : ~mode_t{0};
  if (mode > 0777) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket_mode=", text,
                     ": want octal permission bits from 0 to 0777, e.g. 0660"));
  }
  return mode;
}

// The transport flags as server options for `listen`, checked now (files
// readable and valid, the plaintext-TCP rule, socket mode and group), so a
// bad flag stops the daemon before it brings up any device.
absl::StatusOr<rpc::ServerOptions> TransportOptionsFromFlags(
    const std::vector<std::string>& listen, int max_message_bytes,
    uint64_t max_pending_result_bytes) {
  rpc::ServerOptions options;
  options.listen = listen;
  options.max_message_bytes = max_message_bytes;
  options.max_pending_result_bytes = max_pending_result_bytes;
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.allow_insecure_tcp = absl::GetFlag(FLAGS_allow_insecure_tcp);
  auto mode = ParseSocketMode(absl::GetFlag(FLAGS_unix_socket_mode));
  if (!mode.ok()) return mode.status();
  options.unix_socket_mode = *mode;
  options.unix_socket_group = absl::GetFlag(FLAGS_unix_socket_group);
  const std::string share = absl::GetFlag(FLAGS_share_socket);
  if (share == "auto") {
    options.share_socket = rpc::DefaultShareSocket(listen);
  } else if (share != "off" && !share.empty()) {
    options.share_socket = share;
  }
  if (absl::Status s = rpc::CheckServerOptions(options); !s.ok()) return s;
  return options;
}

// "listening on ..." with how each listener is secured and who it lets
// in. Without tenants a TCP listener (TLS or not, loopback or not)
// authenticates nobody: any process that reaches it may open sessions and
// allocate device memory, which is worth a warning; a unix socket is
// guarded by its file permissions.
void LogListeners(const rpc::GrpcServer& server,
                  const rpc::ServerOptions& options, bool tenants_configured) {
  const auto& addresses = server.addresses();
  for (size_t i = 0; i < addresses.size(); ++i) {
    const bool unix_socket = rpc::IsUnixAddress(addresses[i]);
    const char* security = "plaintext";
    if (server.tls(i)) {
      security = options.tls_client_ca.empty()
                     ? "TLS"
                     : "TLS, client certificates verified";
    } else if (unix_socket) {
      security = "plaintext, local";
    }
    std::string authentication = "tenant tokens or certificates";
    if (!tenants_configured) {
      authentication =
          unix_socket
              ? absl::StrFormat("none: socket file permissions (mode %04o)",
                                options.unix_socket_mode)
              : "none";
    }
    log::Info("listening")
        .Str("address", addresses[i])
        .Str("security", security)
        .Str("authentication", authentication);
    if (i == 0 && !options.share_socket.empty()) {
      log::Info("share_socket").Str("path", options.share_socket);
    }
    if (!tenants_configured && !unix_socket) {
      log::Warning("unauthenticated_listener")
          .Str("address", addresses[i])
          .Str("meaning",
               "no tenants are configured: any process that can reach this "
               "address may open sessions and use the devices")
          .Str("action",
               "configure tenants (--config) or listen on a unix socket only");
    }
  }
}

// --operator_token_file as a path: the flag, else beside the first unix
// socket; empty for none.
std::string OperatorTokenPathFromFlags(const std::vector<std::string>& listen) {
  const std::string flag = absl::GetFlag(FLAGS_operator_token_file);
  if (flag == "none") return "";
  if (!flag.empty()) return flag;
  for (const std::string& address : listen) {
    if (rpc::IsUnixAddress(address)) {
      return tenants::OperatorTokenPath(rpc::UnixPath(address));
    }
  }
  return "";
}

// Writes the operator token and enables it: after the listeners are bound,
// so a daemon refused an address never touches a live one's file. A file
// that cannot be written leaves the daemon without an operator (warned):
// another user's file in a sticky /tmp must not stop it serving.
std::optional<tenants::OperatorTokenFile> EnableOperatorToken(
    session::ServerCore& core, const std::string& path) {
  if (path.empty()) return std::nullopt;
  const std::string token = tenants::OperatorTokenFile::NewToken();
  auto file = tenants::OperatorTokenFile::Write(path, token);
  if (!file.ok()) {
    log::Warning("no_operator_token")
        .Str("meaning", "no local operator: admin calls need an admin tenant")
        .Status(file.status());
    return std::nullopt;
  }
  core.EnableOperatorToken(token, path);
  log::Info("operator_token").Str("path", path);
  return *std::move(file);
}

// A tenant error of the config file (its message names the field, e.g.
// "tenants[1] ('ops').token_sha256[0] ..."), prefixed with the file.
absl::Status InConfig(const std::string& path, const absl::Status& status) {
  if (status.ok() || path.empty()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("--config ", path, ": ", status.message()));
}

// Warns of each tenant held to the least priority by `max_priority: 0`:
// before the field had presence, 0 meant "no limit", and configs copied
// from older examples carry it.
void WarnLeastPriorityOnly(const v1::ServerConfig& config) {
  for (const v1::Tenant& tenant : config.tenants()) {
    if (tenant.quota().has_max_priority() &&
        tenant.quota().max_priority() == 0) {
      log::Warning("tenant_least_priority_only")
          .Str("tenant", tenant.name())
          .Str("meaning",
               "quota.max_priority: 0 runs every queue of this tenant at the "
               "least priority; leave the field out for no limit");
    }
  }
}

// SIGHUP: rereads --config's tenants (weights, quotas, credentials). A
// config that no longer parses keeps the tenants served now.
void ReloadTenants(session::ServerCore& core, const std::string& path) {
  auto config = LoadServerConfig(path);
  absl::Status reloaded = config.ok()
                              ? InConfig(path, core.ReloadTenants(*config))
                              : config.status();
  if (reloaded.ok()) WarnLeastPriorityOnly(*config);
  if (!reloaded.ok()) {
    log::Error("tenants_not_reloaded")
        .Str("config", path)
        .Str("action", "keeping the current tenants")
        .Status(reloaded);
  }
}

// The exit status after a device failed and a reset could not recover it
// (docs/operations.md): restarting the process is what helps.
constexpr int kExitDeviceLost = 3;

// A start-up error: logged, and the daemon exits 2 (a bad flag, config or
// environment: restarting will not help).
int StartFailed(const absl::Status& status) {
  log::Error("start_failed").Status(status);
  return 2;
}

template <typename T>
T Or(T value, T fallback) {
  return value != T{} ? value : fallback;
}

// The names of the flags the command line gives ("--name", "--name=v",
// "--noname" also counts as "name"), so that a config value applies where
// no flag was given while every flag keeps its real default for --help.
absl::flat_hash_set<std::string> FlagsGiven(int argc, char** argv) {
  absl::flat_hash_set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      continue;
    }
    arg = arg.substr(0, arg.find('='));
    given.emplace(arg);
    if (absl::ConsumePrefix(&arg, "no")) given.emplace(arg);
  }
  return given;
}

int Run(int argc, char** argv) {
  // Read results and staged writes (up to a message, 256 MiB) are allocated
  // and freed per command. glibc raises its mmap threshold as large blocks
  // are freed, after which they stay in the heap: the daemon's RSS would
  // stay at the peak of a burst (a client that stopped reading) long after
  // the memory was freed. A fixed threshold hands every block of 1 MiB or
  // more back to the system when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // Descriptors: every connection, and every HOST_SHARED buffer whose
  // share ticket is outstanding, holds one; systemd's default soft limit
  // (1024) is far below what the hard limit allows.
  if (rlimit files; getrlimit(RLIMIT_NOFILE, &files) == 0 &&
                    files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  SetUsage("gpustreamd",
           "serves GPU streams, events, completion flags, memory and kernels "
           "over gRPC (gpustream.v1.GpuStream).\n"
           "Usage: gpustreamd [--listen=unix:/path,host:port] [--backend=auto] "
           "[--modules=DIR] [--config=FILE] "
           "[--tls_cert=PEM --tls_key=PEM [--tls_client_ca=PEM]] "
           "[--allow_insecure_tcp] [--unix_socket_mode=0660] "
           "[--unix_socket_group=GROUP] [--share_socket=auto|off|PATH]");
  const absl::flat_hash_set<std::string> given = FlagsGiven(argc, argv);
  // Flags from these would not count as given, and the config would
  // silently win over them.
  for (const char* indirect : {"flagfile", "fromenv", "tryfromenv"}) {
    if (given.contains(indirect)) {
      return StartFailed(absl::InvalidArgumentError(
          absl::StrCat("--", indirect,
                       " is not supported: give flags on the command line "
                       "or settings in --config")));
    }
  }
  // A flag given wins; else the config's value where it sets one; else the
  // flag's default.
  auto flag_or_config = [&](const char* name, auto flag_value,
                            decltype(flag_value) config_value) {
    return given.contains(name) ? flag_value : Or(config_value, flag_value);
  };
  std::string merged;
  std::vector<char*> args = MergeRepeatedListen(argc, argv, merged);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  auto level = log::ParseLevel(absl::GetFlag(FLAGS_log_level));
  auto format = log::ParseFormat(absl::GetFlag(FLAGS_log_format));
  if (!level.ok() || !format.ok()) {
    return StartFailed(!level.ok() ? level.status() : format.status());
  }
  log::Init(*level, *format);
  log::CaptureLibraryLogs();
  log::Info("starting").Str("version", kServerVersion).Num("pid", getpid());

  auto config = LoadServerConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) return StartFailed(config.status());
  // The default is the unix socket only: its file permissions decide who
  // may connect. TCP, where any local user can connect, only when asked for.
  std::vector<std::string> listen = absl::GetFlag(FLAGS_listen);
  if (!given.contains("listen") && !config->listen().empty()) {
    listen.assign(config->listen().begin(), config->listen().end());
  }
  std::vector<std::string> module_folders = absl::GetFlag(FLAGS_modules);
  if (module_folders.empty()) {
    module_folders.assign(config->modules().begin(), config->modules().end());
  }

  backend::BackendOptions backend_options;
  backend_options.backend = flag_or_config(
      "backend", absl::GetFlag(FLAGS_backend), config->backend());
  backend_options.cuda_driver = absl::GetFlag(FLAGS_cuda_driver);
  backend_options.hip_runtime = absl::GetFlag(FLAGS_hip_runtime);
  backend_options.cpu.memory_limit_bytes =
      flag_or_config("cpu_memory_bytes", absl::GetFlag(FLAGS_cpu_memory_bytes),
                     config->cpu_memory_bytes());
  backend_options.cpu.threads =
      flag_or_config("cpu_threads", absl::GetFlag(FLAGS_cpu_threads),
                     config->limits().cpu_threads());
  // Priorities as CUDA's usual range, so that a session's queues can be
  // ordered on the CPU backend too.
  backend_options.cpu.priority_greatest = -5;
  const uint32_t kernel_limit_ms = flag_or_config(
      "kernel_time_limit_ms", absl::GetFlag(FLAGS_kernel_time_limit_ms),
      config->limits().kernel_time_limit_ms());
  backend_options.cpu.kernel_time_limit = absl::Milliseconds(kernel_limit_ms);

  const v1::ServerLimits& limits = config->limits();
  session::ManagerOptions options;
  options.max_sessions = Or(limits.max_sessions(), 256u);
  options.session_limits.max_queues = Or(limits.max_queues_per_session(), 64u);
  options.session_limits.max_objects =
      Or(limits.max_objects_per_session(), 65536u);
  options.default_lease_seconds =
      flag_or_config("lease_seconds", absl::GetFlag(FLAGS_lease_seconds),
                     limits.default_lease_seconds());
  options.max_lease_seconds = Or(limits.max_lease_seconds(), 3600u);
  options.gpu_sharing = config->gpu_sharing();
  if (const std::string sharing = absl::GetFlag(FLAGS_gpu_sharing);
      !sharing.empty()) {
    // The enum's names without their prefix, in lower case.
    const std::string name =
        absl::AsciiStrToUpper(absl::StrCat("GPU_SHARING_", sharing));
    if (absl::AsciiStrToLower(name) != absl::StrCat("gpu_sharing_", sharing) ||
        !v1::GpuSharing_Parse(name, &options.gpu_sharing)) {
      return StartFailed(absl::InvalidArgumentError(absl::StrCat(
          "--gpu_sharing=", sharing,
          ": want shared_context, context_per_tenant or sm_partitions")));
    }
  }
  // 0 given on the command line is no default: a lease of 0 would end
  // every session at once, a limit of 0 would stop every launch.
  for (auto [name, value] :
       {std::pair<const char*, uint64_t>{"lease_seconds",
                                         options.default_lease_seconds},
        {"cpu_memory_bytes", backend_options.cpu.memory_limit_bytes},
        {"kernel_time_limit_ms", kernel_limit_ms}}) {
    if (value == 0) {
      return StartFailed(absl::InvalidArgumentError(
          absl::StrCat("--", name, "=0: want a positive value")));
    }
  }
  const int max_message_bytes =
      static_cast<int>(Or(limits.max_message_bytes(), 256u << 20));
  auto transport = TransportOptionsFromFlags(
      listen, max_message_bytes,
      Or<uint64_t>(limits.max_pending_result_bytes(), uint64_t{256} << 20));
  if (!transport.ok()) return StartFailed(transport.status());

  // Handle SIGINT/SIGTERM on this thread: block them before any thread
  // starts, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto devices = backend::CreateDevices(backend_options);
  if (!devices.ok()) return StartFailed(devices.status());
  if (!devices->fallback_reason.empty()) {
    if (devices->devices.front()->info().backend == "cpu") {
      log::Warning("no_gpu_backend")
          .Str("reason", devices->fallback_reason)
          .Str("action", "serving the CPU backend");
    } else {
      log::Info("gpu_backend_skipped")
          .Str("reason", devices->fallback_reason)
          .Str("action", absl::StrCat("serving the ",
                                      devices->devices.front()->info().backend,
                                      " backend"));
    }
  }
  auto tenants = tenants::TenantRegistry::Create(*config);
  if (!tenants.ok()) {
    return StartFailed(InConfig(absl::GetFlag(FLAGS_config), tenants.status()));
  }
  const bool tenants_configured = (*tenants)->configured();
  WarnLeastPriorityOnly(*config);
  if (tenants_configured) {
    log::Info("tenants").Num("configured", (*tenants)->All().size());
  } else {
    log::Warning("no_tenants")
        .Str("meaning",
             "every caller is the tenant 'default' (not an admin); no "
             "authentication beyond unix socket permissions");
  }
  auto core =
      session::ServerCore::Create(std::move(devices->devices), module_folders,
                                  options, *std::move(tenants));
  if (!core.ok()) return StartFailed(core.status());
  log::Info("gpu_sharing")
      .Str("mode",
           absl::AsciiStrToLower(absl::StripPrefix(
               v1::GpuSharing_Name(options.gpu_sharing), "GPU_SHARING_")));
  for (const absl::Status& refused : (*core)->RefusedModules()) {
    log::Error("module_refused").Status(refused);
  }
  // Kernels without declared extents can reach past their buffers.
  v1::ListModulesResponse listed;
  if ((*core)->ListModules(v1::ListModulesRequest(), &listed).ok()) {
    for (const v1::Module& m : listed.modules()) {
      std::vector<std::string> unchecked;
      for (const v1::Kernel& k : m.kernels()) {
        if (!k.checked()) unchecked.push_back(k.name());
      }
      if (unchecked.empty()) continue;
      log::Warning("module_unchecked_kernels")
          .Str("module", m.name())
          .Str("backend", m.backend())
          .Str("kernels", absl::StrJoin(unchecked, ","))
          .Str("meaning",
               tenants_configured
                   ? "a BUFFER param declares no extent: only tenants with "
                     "allow_unchecked_kernels may launch these"
                   : "a BUFFER param declares no extent: a launch can reach "
                     "past its buffers");
    }
  }

  // Metrics first, so a busy --metrics_listen port stops the daemon before
  // it accepts any call.
  std::unique_ptr<metrics::Metrics> metrics;
  std::shared_ptr<metrics::StatsCollector> stats;
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (const std::string at = absl::GetFlag(FLAGS_metrics_listen); !at.empty()) {
    metrics = std::make_unique<metrics::Metrics>(kServerVersion);
    session::ServerCore* served = core->get();
    stats = std::make_shared<metrics::StatsCollector>(
        [served](v1::GetStatsResponse* out) { served->Stats(out); });
    auto started =
        metrics::MetricsServer::Start(at, {metrics->registry(), stats});
    if (!started.ok()) return StartFailed(started.status());
    metrics_server = *std::move(started);
    transport->metrics = metrics.get();
    log::Info("metrics_listening")
        .Str("address", metrics_server->address())
        .Str("path", "/metrics");
  }
  // A device that a reset cannot bring back needs a new process: stop as
  // on SIGTERM (draining every session), then exit kExitDeviceLost so that
  // systemd or Kubernetes restarts the daemon.
  static std::atomic<bool> device_lost{false};
  (*core)->SetDeviceLostHandler([](uint32_t, const absl::Status&) {
    if (!device_lost.exchange(true)) kill(getpid(), SIGTERM);
  });
  auto server = rpc::GrpcServer::Start(**core, *transport);
  if (!server.ok()) return StartFailed(server.status());
  v1::ListDevicesResponse devs;
  (void)(*core)->ListDevices({}, &devs);
  for (const auto& d : devs.devices()) {
    log::Info("device")
        .Num("device", d.id())
        .Str("name", d.name())
        .Str("backend", d.backend())
        .Num("memory_bytes", d.total_memory_bytes());
  }
  v1::ListModulesResponse modules;
  (void)(*core)->ListModules({}, &modules);
  for (const auto& m : modules.modules()) {
    log::Info("module")
        .Str("module", m.name())
        .Str("backend", m.backend())
        .Num("kernels", m.kernels_size());
  }
  LogListeners(**server, *transport, tenants_configured);
  std::optional<tenants::OperatorTokenFile> operator_token =
      EnableOperatorToken(**core, OperatorTokenPathFromFlags(listen));
  if (const std::string ready = absl::GetFlag(FLAGS_ready_file);
      !ready.empty()) {
    const std::string tmp = ready + ".tmp";
    std::ofstream(tmp) << absl::StrJoin((*server)->addresses(), "\n") << "\n";
    std::rename(tmp.c_str(), ready.c_str());  // Atomic: readers see it whole.
  }

  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    ReloadTenants(**core, absl::GetFlag(FLAGS_config));
  }
  log::Info("shutting_down").Num("signal", signal_number);
  // Health checks answer NOT_SERVING from now on (load balancers and
  // Kubernetes stop routing here), then refuse new work, release every
  // parked wait, and stop the transport.
  if (auto* health = (*server)->server().GetHealthCheckService()) {
    health->Shutdown();
  }
  (*core)->BeginShutdown();
  (*core)->sessions().CloseAll();
  (*server)->Shutdown(absl::Seconds(2));
  metrics_server.reset();  // Before what it reads goes away.
  if (device_lost.load()) {
    log::Error("stopped")
        .Num("exit_status", kExitDeviceLost)
        .Str("reason", "a device could not be recovered; restart the daemon");
    return kExitDeviceLost;
  }
  log::Info("stopped");
  return 0;
}

}  // namespace
}  // namespace gpustream

int main(int argc, char** argv) {
  gpustream::util::UseReleaseMutexes();
  return gpustream::Run(argc, argv);
}
