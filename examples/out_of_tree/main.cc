// A program built outside this repository against the installed C++ client
// (`bazel run //client:install -- PREFIX`, then `make` here; see README.md
// beside it): connects (the target from argv[1], else $GPUSTREAM_TARGET,
// else unix:/tmp/gpustreamd.sock), adds 41 and 1 to a counter on the
// default queue and prints it. Exit status 0 when it reads 42.
#include <cstdint>
#include <cstdio>

#include "client/gpustream.h"

namespace gs = gpustream::client;

int main(int argc, char** argv) {
  auto client = gs::Client::Connect(argc > 1 ? argv[1] : "");
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  auto session = client->open_session({.client_name = "out-of-tree"});
  if (!session.ok()) return 1;
  auto counter = (*session)->allocate(8);
  if (!counter.ok()) return 1;
  gs::Queue& q = (*session)->default_queue();
  q.fill(*counter, 0, 8, 0);
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 41});
  q.launch("samples", "add_u64", {1}, {1}, {*counter, 1u});
  auto value = q.read<uint64_t>(*counter, 1);
  if (!value.ok()) {
    std::fprintf(stderr, "%s\n", value.status().ToString().c_str());
    return 1;
  }
  std::printf("session %s: counter = %llu\n", (*session)->public_id().c_str(),
              static_cast<unsigned long long>((*value)[0]));
  return (*value)[0] == 42 ? 0 : 1;
}
