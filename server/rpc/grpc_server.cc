// gRPC server construction.
#include "server/rpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace gpustream::rpc {
namespace {

// gRPC fails to bind over a socket file left by a daemon that died.
void RemoveStaleSocket(const std::string& address) {
  if (!absl::StartsWith(address, "unix:")) return;
  const std::string path = address.substr(5);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    unlink(path.c_str());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    session::ServerCore& core, const std::vector<std::string>& listen,
    int max_message_bytes, const std::vector<grpc::Service*>& extra_services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto server = std::unique_ptr<GrpcServer>(new GrpcServer(core));
  grpc::ServerBuilder builder;
  builder.RegisterService(&server->service_);
  for (grpc::Service* service : extra_services)
    builder.RegisterService(service);
  // Ping idle connections so a client that vanished without closing (a
  // partition, a dead host) stops holding its session's lease: its streams
  // end within about 40 s and the lease clock starts.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  std::vector<int> ports(listen.size(), 0);
  for (size_t i = 0; i < listen.size(); ++i) {
    RemoveStaleSocket(listen[i]);
    builder.AddListeningPort(listen[i], grpc::InsecureServerCredentials(),
                             &ports[i]);
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on --listen=", absl::StrJoin(listen, ",")));
  }
  for (size_t i = 0; i < listen.size(); ++i) {
    if (ports[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot listen on ", listen[i]));
    }
    if (absl::StartsWith(listen[i], "unix:")) {
      server->addresses_.push_back(listen[i]);
    } else {
      const std::string host = listen[i].substr(0, listen[i].rfind(':'));
      server->addresses_.push_back(absl::StrCat(host, ":", ports[i]));
    }
  }
  return server;
}

std::shared_ptr<grpc::Channel> GrpcServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return server_->InProcessChannel(args);
}

void GrpcServer::Shutdown(absl::Duration grace) {
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace gpustream::rpc
