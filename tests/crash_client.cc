// A client that takes resources on a daemon, parks work on flags nobody
// will signal, says READY, and waits to be killed (crash_reclaim_test).
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/gpustream.h"
#include "server/usage.h"
#include "server/version.h"

ABSL_FLAG(std::string, target, "", "The daemon");
ABSL_FLAG(uint64_t, megabytes, 8, "Memory to hold");
ABSL_FLAG(std::string, token, "", "Bearer token");
ABSL_FLAG(bool, copying, false,
          "Also keep large copies (half the buffer) in flight on a third "
          "queue until killed");

namespace gs = gpustream::client;

int main(int argc, char** argv) {
  gpustream::SetUsage(
      "crash_client",
      "takes resources on a daemon, parks work, says READY and waits to be "
      "killed (for crash_reclaim_test).\nUsage: crash_client --target=ADDR");
  absl::ParseCommandLine(argc, argv);
  auto client = gs::Client::Connect(absl::GetFlag(FLAGS_target),
                                    {.token = absl::GetFlag(FLAGS_token)});
  if (!client.ok()) return 1;
  auto session =
      client->open_session({.client_name = "crash", .lease_seconds = 1});
  if (!session.ok()) return 1;
  gs::Session& s = **session;
  auto buffer = s.allocate(absl::GetFlag(FLAGS_megabytes) << 20);
  auto pinned = s.allocate(1 << 20, gs::MemoryKind::kHostPinned);
  if (!buffer.ok() || !pinned.ok()) return 1;
  gs::Flag never = s.create_flag();
  gs::Queue a = s.create_queue(), b = s.create_queue();
  // Both queues stall on the flag with work (and the buffers) behind it.
  a.wait_for_host_value(never, 1);
  a.fill(*buffer, 0, 1024, 7);
  b.wait_for(a);
  b.copy(*buffer, 0, *pinned, 0, 1024);
  // A host wait parked in the Submit stream.
  std::thread([&] { (void)never.wait(1); }).detach();
  if (!s.flush().ok() || !a.is_idle().ok()) return 1;
  if (absl::GetFlag(FLAGS_copying)) {
    // Copies of half the buffer onto its other half, always a few queued.
    const uint64_t half = (absl::GetFlag(FLAGS_megabytes) << 20) / 2;
    gs::Queue c = s.create_queue();
    for (int i = 0; i < 4; ++i) c.copy(*buffer, 0, *buffer, half, half);
    if (!s.flush().ok()) return 1;
    // `buffer` lives in main, which sleeps until the client is killed.
    std::thread([c = std::move(c), &buffer = *buffer, half]() mutable {
      for (int i = 0; i < 100000; ++i) {  // Killed long before.
        c.copy(buffer, 0, buffer, half, half);
        if (!c.synchronize().ok()) return;
      }
    }).detach();
  }
  std::printf("READY\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(60));  // Killed before.
  return 3;
}
