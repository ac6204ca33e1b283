// Connecting, discovery and session opening.
#include "client/client.h"

#include "absl/time/clock.h"

namespace gpustream::client {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

}  // namespace

Client::Client(std::shared_ptr<grpc::Channel> channel, uint32_t version)
    : channel_(std::move(channel)),
      stub_(v1::GpuStream::NewStub(channel_)),
      version_(version) {}

absl::StatusOr<Client> Client::Connect(const std::string& target,
                                       absl::Duration timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return Connect(grpc::CreateCustomChannel(
                     target, grpc::InsecureChannelCredentials(), args),
                 timeout);
}

absl::StatusOr<Client> Client::Connect(std::shared_ptr<grpc::Channel> channel,
                                       absl::Duration timeout) {
  auto stub = v1::GpuStream::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context.set_wait_for_ready(true);  // Ride out a daemon still starting.
  v1::GetVersionRequest request;
  request.set_min_version(kMinVersion);
  request.set_max_version(kMaxVersion);
  v1::GetVersionResponse response;
  grpc::Status status = stub->GetVersion(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return Client(std::move(channel), response.version());
}

absl::StatusOr<v1::GetServerInfoResponse> Client::server_info() const {
  grpc::ClientContext context;
  v1::GetServerInfoResponse response;
  grpc::Status s = stub_->GetServerInfo(&context, {}, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::StatusOr<std::vector<v1::Device>> Client::list_devices() const {
  grpc::ClientContext context;
  v1::ListDevicesResponse response;
  grpc::Status s = stub_->ListDevices(&context, {}, &response);
  if (!s.ok()) return FromGrpc(s);
  return std::vector<v1::Device>(response.devices().begin(),
                                 response.devices().end());
}

absl::StatusOr<std::vector<v1::Module>> Client::list_modules() const {
  grpc::ClientContext context;
  v1::ListModulesResponse response;
  grpc::Status s = stub_->ListModules(&context, {}, &response);
  if (!s.ok()) return FromGrpc(s);
  return std::vector<v1::Module>(response.modules().begin(),
                                 response.modules().end());
}

absl::StatusOr<std::unique_ptr<Session>> Client::open_session(
    const SessionOptions& options) const {
  grpc::ClientContext context;
  v1::OpenSessionRequest request;
  request.set_device_id(options.device_id);
  request.set_client_name(options.client_name);
  request.set_lease_seconds(options.lease_seconds);
  v1::OpenSessionResponse response;
  grpc::Status s = stub_->OpenSession(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return std::make_unique<Session>(std::make_shared<SessionCore>(
      channel_, response.session_id(), response.default_queue_id()));
}

}  // namespace gpustream::client
