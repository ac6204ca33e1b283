// The demo job: drives a running gpustreamd through the C++ client and
// checks every result it reads back. Exit status 0 means all checks passed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "client/gpustream.h"
#include "server/usage.h"
#include "server/version.h"

ABSL_FLAG(std::string, target, "",
          "The daemon: unix:/path or host:port (empty: $GPUSTREAM_TARGET, "
          "else unix:/tmp/gpustreamd.sock)");
ABSL_FLAG(uint64_t, n, 1 << 20, "Elements per vector");
ABSL_FLAG(std::string, token, "",
          "Bearer token, where the daemon requires one (or GPUSTREAM_TOKEN)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the CA that signed the daemon's certificate: turns on "
          "TLS");
ABSL_FLAG(std::string, tls_cert, "", "Client certificate (PEM), for mTLS");
ABSL_FLAG(std::string, tls_key, "", "Client certificate's key (PEM)");

namespace gs = gpustream::client;

namespace {

#define CHECK_OK(expr)                                     \
  do {                                                     \
    if (auto _s = (expr); !_s.ok()) {                      \
      std::fprintf(stderr, "demo: %s failed: %s\n", #expr, \
                   _s.ToString().c_str());                 \
      return 1;                                            \
    }                                                      \
  } while (0)

const char* KindName(int kind) {
  return gpustream::v1::ParamKind_Name(kind).c_str() + sizeof("PARAM_KIND_") -
         1;
}

int Run() {
  const uint64_t n = absl::GetFlag(FLAGS_n);
  const uint32_t kBlock = 256;
  const gs::Dim3 grid{static_cast<uint32_t>((n + kBlock - 1) / kBlock)};
  const gs::Dim3 block{kBlock};

  gs::ConnectOptions options;
  options.token = absl::GetFlag(FLAGS_token);
  if (const char* env = std::getenv("GPUSTREAM_TOKEN");
      options.token.empty() && env != nullptr) {
    options.token = env;
  }
  if (!absl::GetFlag(FLAGS_tls_ca).empty() ||
      !absl::GetFlag(FLAGS_tls_cert).empty()) {
    auto tls = gs::TlsOptions::FromFiles(absl::GetFlag(FLAGS_tls_ca),
                                         absl::GetFlag(FLAGS_tls_cert),
                                         absl::GetFlag(FLAGS_tls_key));
    CHECK_OK(tls.status());
    options.tls = *std::move(tls);
  }
  auto client = gs::Client::Connect(absl::GetFlag(FLAGS_target), options);
  CHECK_OK(client.status());
  auto info = client->server_info();
  CHECK_OK(info.status());
  std::printf("connected: gpustreamd %s, protocol v%u, backends [%s]\n",
              info->server_version().c_str(), client->protocol_version(),
              absl::StrJoin(info->backends(), ", ").c_str());
  auto devices = client->list_devices();
  CHECK_OK(devices.status());
  for (const auto& d : *devices) {
    std::printf("device %u: %s (%s, %s), %llu MiB free of %llu MiB\n", d.id(),
                d.name().c_str(), d.backend().c_str(), d.arch().c_str(),
                static_cast<unsigned long long>(d.free_memory_bytes() >> 20),
                static_cast<unsigned long long>(d.total_memory_bytes() >> 20));
  }
  auto modules = client->list_modules();
  CHECK_OK(modules.status());
  for (const auto& m : *modules) {
    for (const auto& k : m.kernels()) {
      std::vector<std::string> params;
      for (int p : k.params()) params.push_back(KindName(p));
      std::printf("kernel %s.%s(%s)\n", m.name().c_str(), k.name().c_str(),
                  absl::StrJoin(params, ", ").c_str());
    }
  }

  auto session = client->open_session({.client_name = "demo"});
  CHECK_OK(session.status());
  gs::Session& s = **session;
  std::printf("session %s opened\n", s.public_id().c_str());

  // 1. Two producer queues fill a and b; the consumer waits on both events,
  //    adds, then runs saxpy: y = 0.5 * c + y.
  auto a = s.allocate(n * 4), b = s.allocate(n * 4), c = s.allocate(n * 4);
  CHECK_OK(a.status());
  CHECK_OK(b.status());
  CHECK_OK(c.status());
  gs::Queue qa = s.create_queue(), qb = s.create_queue();
  gs::Queue& consumer = s.default_queue();
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  qa.launch("samples", "fill_u32", grid, block, {*a, bits(1.5f), n});
  qb.launch("samples", "fill_u32", grid, block, {*b, bits(2.25f), n});
  gs::Event a_ready = qa.record_event(), b_ready = qb.record_event();
  consumer.wait_for(a_ready);
  consumer.wait_for(b_ready);
  gs::Event start = consumer.record_event(/*enable_timing=*/true);
  consumer.launch("samples", "vector_add_f32", grid, block, {*a, *b, *c, n});
  consumer.launch("samples", "saxpy_f32", grid, block, {0.5f, *c, *a, n});
  gs::Event end = consumer.record_event(/*enable_timing=*/true);
  CHECK_OK(consumer.synchronize());
  auto result = consumer.read<float>(*a, n);
  CHECK_OK(result.status());
  const float want = 0.5f * (1.5f + 2.25f) + 1.5f;
  size_t wrong = 0;
  for (float v : *result) wrong += v != want;
  auto ms = end.elapsed_ms_since(start);
  CHECK_OK(ms.status());
  std::printf(
      "vector_add + saxpy on %llu floats: a[0] = %g (want %g), %zu "
      "wrong, %.3f ms on the device\n",
      static_cast<unsigned long long>(n), (*result)[0], want, wrong, *ms);
  if (wrong != 0) return 1;

  // 2. A completion flag gates work: the counter must not move until the
  //    host signals, then moves exactly once.
  auto counter = s.allocate(8);
  CHECK_OK(counter.status());
  gs::Flag go = s.create_flag();
  gs::Queue gated = s.create_queue();
  gated.wait_for_host_value(go, 1);
  gated.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{42}});
  gs::Flag done = s.create_flag();
  gated.write_flag(done, 7);
  CHECK_OK(s.flush());
  auto before = consumer.read<uint64_t>(*counter, 1);
  CHECK_OK(before.status());
  CHECK_OK(go.signal(1));
  auto seen = done.wait(7, gs::WaitCondition::kEqual, absl::Seconds(10));
  CHECK_OK(seen.status());
  auto after = gated.read<uint64_t>(*counter, 1);
  CHECK_OK(after.status());
  std::printf("flag-gated add_u64: counter %llu before signal, %llu after\n",
              static_cast<unsigned long long>((*before)[0]),
              static_cast<unsigned long long>((*after)[0]));
  if ((*before)[0] != 0 || (*after)[0] != 42) return 1;

  // 3. A host function runs between two kernels of a queue.
  std::vector<std::string> log;
  gated.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
  gated.enqueue_host_func([&] { log.push_back("host function ran"); });
  gated.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
  CHECK_OK(gated.synchronize());
  auto final_count = gated.read<uint64_t>(*counter, 1);
  CHECK_OK(final_count.status());
  std::printf("%s; counter now %llu\n",
              log.empty() ? "host function MISSING" : log[0].c_str(),
              static_cast<unsigned long long>((*final_count)[0]));
  if (log.size() != 1 || (*final_count)[0] != 44) return 1;

  // 4. Bad input is rejected with a clear error and nothing breaks.
  consumer.launch("samples", "fill_u32", grid, block, {*a, 1.0f, n});
  absl::Status bad = consumer.synchronize();
  std::printf("a launch with a wrong argument kind: %s\n",
              bad.ToString().c_str());
  if (bad.code() != absl::StatusCode::kInvalidArgument) return 1;
  CHECK_OK(consumer.synchronize());

  CHECK_OK(s.close());
  std::printf("demo: all checks passed\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gpustream::SetUsage(
      "demo",
      "runs the demo job against a running gpustreamd and checks every "
      "result.\nUsage: demo [--target=unix:/tmp/gpustreamd.sock]");
  absl::ParseCommandLine(argc, argv);
  return Run();
}
