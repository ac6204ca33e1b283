// gpustreamd: the GPU stream daemon. See README.md and --help.
#include <google/protobuf/text_format.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/gpustream/v1/server_config.pb.h"
#include "server/backend/backend_factory.h"
#include "server/rpc/grpc_server.h"
#include "server/session/server_core.h"

ABSL_FLAG(std::vector<std::string>, listen, {},
          "Addresses to serve, comma-separated or repeated: unix:/path or "
          "host:port (port 0 picks a free one). Default: "
          "unix:/tmp/gpustreamd.sock,127.0.0.1:50051");
ABSL_FLAG(std::string, backend, "",
          "auto | cpu | cuda | hip. auto (default) picks a GPU backend whose "
          "driver loads, else the embedded CPU backend");
ABSL_FLAG(std::vector<std::string>, modules, {},
          "Folders of extra kernel modules (CPU: *.so exporting "
          "gpustream_cpu_module, see kernels/cpu/gpustream_cpu_module.h). "
          "The samples module is always loaded");
ABSL_FLAG(std::string, config, "",
          "A gpustream.v1.ServerConfig in protobuf text format "
          "(proto/gpustream/v1/server_config.proto); flags override it");
ABSL_FLAG(std::string, cuda_driver, "",
          "The CUDA driver library the cuda backend loads: a file name "
          "searched as dlopen does, or a path (default libcuda.so.1; tests "
          "point it at the fake driver)");
ABSL_FLAG(uint64_t, cpu_memory_bytes, 0,
          "Device memory of the CPU backend (default 1 GiB)");
ABSL_FLAG(uint32_t, lease_seconds, 0, "Default session lease (default 60 s)");
ABSL_FLAG(std::string, ready_file, "",
          "Once serving, write the bound addresses to this file, one a line "
          "(for scripts and tests that pick port 0)");

namespace gpustream {
namespace {

// "--listen a --listen b" would keep only b: join repeats into one list.
std::vector<char*> MergeRepeatedListen(int argc, char** argv,
                                       std::string& merged) {
  std::vector<char*> out;
  std::vector<std::string> values;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      values.push_back(argv[++i]);
    } else if (arg.rfind("--listen=", 0) == 0) {
      values.push_back(arg.substr(9));
    } else {
      out.push_back(argv[i]);
    }
  }
  if (!values.empty()) {
    merged = "--listen=" + absl::StrJoin(values, ",");
    out.push_back(merged.data());
  }
  return out;
}

absl::StatusOr<v1::ServerConfig> LoadConfig(const std::string& path) {
  v1::ServerConfig config;
  if (path.empty()) return config;
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("--config ", path, " cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, " is not a valid ServerConfig"));
  }
  return config;
}

template <typename T>
T Or(T value, T fallback) {
  return value != T{} ? value : fallback;
}

int Run(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpustreamd: serves GPU streams, events, completion flags, memory and "
      "kernels over gRPC (gpustream.v1.GpuStream).\n"
      "Usage: gpustreamd [--listen=unix:/path,host:port] [--backend=auto] "
      "[--modules=DIR] [--config=FILE]");
  std::string merged;
  std::vector<char*> args = MergeRepeatedListen(argc, argv, merged);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  auto config = LoadConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::fprintf(stderr, "gpustreamd: %s\n",
                 config.status().ToString().c_str());
    return 2;
  }
  std::vector<std::string> listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty())
    listen.assign(config->listen().begin(), config->listen().end());
  if (listen.empty()) listen = {"unix:/tmp/gpustreamd.sock", "127.0.0.1:50051"};
  std::vector<std::string> module_folders = absl::GetFlag(FLAGS_modules);
  if (module_folders.empty()) {
    module_folders.assign(config->modules().begin(), config->modules().end());
  }

  backend::BackendOptions backend_options;
  backend_options.backend = Or(absl::GetFlag(FLAGS_backend),
                               Or(config->backend(), std::string("auto")));
  backend_options.cuda_driver =
      Or(absl::GetFlag(FLAGS_cuda_driver), std::string("libcuda.so.1"));
  backend_options.cpu.memory_limit_bytes =
      Or(absl::GetFlag(FLAGS_cpu_memory_bytes),
         Or<uint64_t>(config->cpu_memory_bytes(), uint64_t{1} << 30));

  const v1::ServerLimits& limits = config->limits();
  session::ManagerOptions options;
  options.max_sessions = Or(limits.max_sessions(), 256u);
  options.session_limits.max_queues = Or(limits.max_queues_per_session(), 64u);
  options.session_limits.max_objects =
      Or(limits.max_objects_per_session(), 65536u);
  options.default_lease_seconds = Or(absl::GetFlag(FLAGS_lease_seconds),
                                     Or(limits.default_lease_seconds(), 60u));
  options.max_lease_seconds = Or(limits.max_lease_seconds(), 3600u);
  const int max_message_bytes =
      static_cast<int>(Or(limits.max_message_bytes(), 256u << 20));

  // Handle SIGINT/SIGTERM on this thread: block them before any thread
  // starts, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto devices = backend::CreateDevices(backend_options);
  if (!devices.ok()) {
    std::fprintf(stderr, "gpustreamd: %s\n",
                 devices.status().ToString().c_str());
    return 2;
  }
  if (!devices->fallback_reason.empty()) {
    std::fprintf(stderr,
                 "gpustreamd: --backend=auto: no GPU backend (%s); serving the "
                 "CPU backend\n",
                 devices->fallback_reason.c_str());
  }
  std::vector<session::TokenGrant> tokens;
  for (const auto& t : config->tokens()) {
    tokens.push_back({t.token(), t.tenant(), t.admin()});
  }
  auto core = session::ServerCore::Create(std::move(devices->devices),
                                          module_folders, options, tokens);
  if (!core.ok()) {
    std::fprintf(stderr, "gpustreamd: %s\n", core.status().ToString().c_str());
    return 2;
  }
  for (const absl::Status& refused : (*core)->RefusedModules()) {
    std::fprintf(stderr, "gpustreamd: module refused: %s\n",
                 std::string(refused.message()).c_str());
  }
  auto server = rpc::GrpcServer::Start(**core, listen, max_message_bytes);
  if (!server.ok()) {
    std::fprintf(stderr, "gpustreamd: %s\n",
                 server.status().ToString().c_str());
    return 2;
  }
  v1::ListDevicesResponse devs;
  (void)(*core)->ListDevices({}, &devs);
  for (const auto& d : devs.devices()) {
    std::fprintf(stderr, "gpustreamd: device %u: %s [%s], %llu bytes\n", d.id(),
                 d.name().c_str(), d.backend().c_str(),
                 static_cast<unsigned long long>(d.total_memory_bytes()));
  }
  v1::ListModulesResponse modules;
  (void)(*core)->ListModules({}, &modules);
  for (const auto& m : modules.modules()) {
    std::fprintf(stderr, "gpustreamd: module %s [%s], %d kernels\n",
                 m.name().c_str(), m.backend().c_str(), m.kernels_size());
  }
  for (const auto& address : (*server)->addresses()) {
    std::fprintf(stderr, "gpustreamd: listening on %s\n", address.c_str());
  }
  if (const std::string ready = absl::GetFlag(FLAGS_ready_file);
      !ready.empty()) {
    const std::string tmp = ready + ".tmp";
    std::ofstream(tmp) << absl::StrJoin((*server)->addresses(), "\n") << "\n";
    std::rename(tmp.c_str(), ready.c_str());  // Atomic: readers see it whole.
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "gpustreamd: signal %d, shutting down\n", signal_number);
  // Refuse new work, release every parked wait, then stop the transport.
  (*core)->BeginShutdown();
  (*core)->sessions().CloseAll();
  (*server)->Shutdown(absl::Seconds(2));
  return 0;
}

}  // namespace
}  // namespace gpustream

int main(int argc, char** argv) { return gpustream::Run(argc, argv); }
