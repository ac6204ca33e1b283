// What idle sessions cost a daemon: 1,000 sessions × 4 queues on the CPU
// backend, measured on a real gpustreamd process (its RSS and threads from
// /proc), and what they do to a busy session's synchronize latency (p50 and
// p99, before and after they are opened).
//
//   bazel build //server:gpustreamd //bench:idle_sessions_bench
//   bazel-bin/bench/idle_sessions_bench --daemon=bazel-bin/server/gpustreamd
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "client/gpustream.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/usage.h"
#include "server/version.h"

ABSL_FLAG(std::string, daemon, "bazel-bin/server/gpustreamd",
          "The gpustreamd binary to measure");
ABSL_FLAG(int, sessions, 1000, "Idle sessions to open");
ABSL_FLAG(int, queues, 4, "Queues per idle session (the default one counts)");
ABSL_FLAG(int, syncs, 3000, "Synchronize round trips per latency figure");

namespace gpustream::bench {
namespace {

// A /proc/<pid>/status field in kB (VmRSS) or as a count (Threads).
long ProcStatus(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::stol(line.substr(key.size() + 1));
    }
  }
  return -1;
}

struct Daemon {
  pid_t pid = -1;
  std::string target;
};

Daemon StartDaemon(const std::string& binary, int max_sessions) {
  const std::string base = absl::StrCat("/tmp/gs-idle-bench-", getpid());
  const std::string config = base + ".txtpb";
  std::ofstream(config) << "limits { max_sessions: " << max_sessions
                        << " max_lease_seconds: 3600 }\n";
  const std::string ready = base + ".ready";
  std::remove(ready.c_str());
  Daemon d;
  d.target = "unix:" + base + ".sock";
  // The daemon's log lines go to a file, not among the figures.
  const std::string log = base + ".log";
  std::printf("(daemon log: %s)\n", log.c_str());
  std::fflush(stdout);
  d.pid = fork();
  Check(d.pid >= 0, "fork");
  if (d.pid == 0) {
    const int fd =
        open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) dup2(fd, STDERR_FILENO);
    execl(binary.c_str(), binary.c_str(), ("--listen=" + d.target).c_str(),
          "--backend=cpu", ("--config=" + config).c_str(),
          ("--ready_file=" + ready).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (access(ready.c_str(), F_OK) != 0) {
    Check(absl::Now() < deadline, "daemon start (see its log)");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return d;
}

struct Percentiles {
  double p50_us, p99_us;
};

// `n` synchronize round trips on the busy session's queue, each after one
// launch, so that each measures real work's completion.
Percentiles SyncLatency(client::Queue& queue, int n) {
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    const absl::Time start = absl::Now();
    queue.launch("samples", "noop", {1}, {1}, {});
    Check(queue.synchronize(), "synchronize");
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

int Run() {
  const int sessions = absl::GetFlag(FLAGS_sessions);
  const int queues = absl::GetFlag(FLAGS_queues);
  const int syncs = absl::GetFlag(FLAGS_syncs);
  Daemon d = StartDaemon(absl::GetFlag(FLAGS_daemon), sessions + 16);

  auto busy_client = client::Client::Connect(d.target);
  Check(busy_client.status(), "connect");
  auto busy = busy_client->open_session({.client_name = "busy"});
  Check(busy.status(), "open busy session");
  client::Queue queue = (*busy)->create_queue();
  SyncLatency(queue, syncs / 10);  // Warm-up.
  const Percentiles idle_daemon = SyncLatency(queue, syncs);
  const long rss_before_kb = ProcStatus(d.pid, "VmRSS");
  const long threads_before = ProcStatus(d.pid, "Threads");

  // Idle sessions through raw unary calls: nothing client-side lingers.
  auto stub = v1::GpuStream::NewStub(
      grpc::CreateChannel(d.target, grpc::InsecureChannelCredentials()));
  std::vector<std::string> ids;
  for (int s = 0; s < sessions; ++s) {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest open;
    open.set_client_name("idle");
    open.set_lease_seconds(3600);
    v1::OpenSessionResponse opened;
    Check(stub->OpenSession(&ctx, open, &opened).ok(), "open idle session");
    for (int q = 1; q < queues; ++q) {
      grpc::ClientContext qctx;
      v1::CreateQueueRequest create;
      create.set_session_id(opened.session_id());
      v1::CreateQueueResponse created;
      Check(stub->CreateQueue(&qctx, create, &created).ok(), "create queue");
    }
    ids.push_back(opened.session_id());
  }
  absl::SleepFor(absl::Milliseconds(500));  // Let allocator caches settle.
  const long rss_after_kb = ProcStatus(d.pid, "VmRSS");
  const long threads_after = ProcStatus(d.pid, "Threads");
  const Percentiles crowded = SyncLatency(queue, syncs);

  const double per_session_kib =
      static_cast<double>(rss_after_kb - rss_before_kb) / sessions;
  std::printf("idle sessions: %d x %d queues\n", sessions, queues);
  std::printf(
      "  daemon RSS          %8ld KiB -> %8ld KiB: %.1f KiB per "
      "session (goal <= 64)\n",
      rss_before_kb, rss_after_kb, per_session_kib);
  std::printf("  daemon threads      %8ld     -> %8ld\n", threads_before,
              threads_after);
  std::printf("busy session's synchronize (launch + synchronize), %d each:\n",
              syncs);
  std::printf("  idle daemon         p50 %7.1f us  p99 %7.1f us\n",
              idle_daemon.p50_us, idle_daemon.p99_us);
  std::printf(
      "  with idle sessions  p50 %7.1f us  p99 %7.1f us: p99 %.2fx "
      "(goal <= 2)\n",
      crowded.p50_us, crowded.p99_us, crowded.p99_us / idle_daemon.p99_us);

  busy->reset();
  kill(d.pid, SIGTERM);
  int status = 0;
  waitpid(d.pid, &status, 0);
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::SetUsage("idle_sessions_bench",
                      "what 1,000 idle sessions cost a gpustreamd "
                      "process.\nUsage: idle_sessions_bench [flags]");
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
