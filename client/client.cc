// Connecting, discovery and session opening.
#include "client/client.h"

#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connect_failure.h"
#include "client/wire.h"

namespace gpustream::client {

Client::Client(std::shared_ptr<grpc::Channel> channel, std::string token,
               uint32_t version,
               std::shared_ptr<const KernelSignatures> signatures)
    : channel_(std::move(channel)),
      stub_(v1::GpuStream::NewStub(channel_)),
      token_(std::move(token)),
      version_(version),
      signatures_(std::move(signatures)) {}

std::unique_ptr<grpc::ClientContext> Client::NewContext() const {
  return NewClientContext(token_);
}

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad() || text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, " (missing or empty)"));
  }
  return text;
}

}  // namespace

absl::StatusOr<TlsOptions> TlsOptions::FromFiles(const std::string& ca_path,
                                                 const std::string& cert_path,
                                                 const std::string& key_path) {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key and a key its certificate");
  }
  TlsOptions tls;
  for (auto [path, field] : {std::pair{&ca_path, &tls.root_certificates},
                             std::pair{&cert_path, &tls.certificate_chain},
                             std::pair{&key_path, &tls.private_key}}) {
    absl::StatusOr<std::string> pem = ReadPem(*path);
    if (!pem.ok()) return pem.status();
    *field = *std::move(pem);
  }
  return tls;
}

std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target,
                                           const ConnectOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (options.tls.has_value()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls->root_certificates;
    ssl.pem_cert_chain = options.tls->certificate_chain;
    ssl.pem_private_key = options.tls->private_key;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

namespace {

// The version handshake on `channel`. Without wait-for-ready: a daemon that
// is not there fails at once, with gRPC's reason, instead of after
// `options.timeout`.
absl::StatusOr<uint32_t> Handshake(grpc::Channel& channel,
                                   const std::string& target,
                                   const ConnectOptions& options) {
  auto stub = v1::GpuStream::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  auto context = NewClientContext(options.token);
  context->set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
  v1::GetVersionRequest request;
  request.set_min_version(Client::kMinVersion);
  request.set_max_version(Client::kMaxVersion);
  v1::GetVersionResponse response;
  grpc::Status status = stub->GetVersion(context.get(), request, &response);
  if (!status.ok()) {
    return ExplainConnectFailure(target, options.tls.has_value(),
                                 options.timeout, status);
  }
  return response.version();
}

}  // namespace

absl::StatusOr<Client> Client::Connect(const std::string& target,
                                       const ConnectOptions& options) {
  ConnectOptions resolved = options;
  resolved.token = ResolveToken(options.token);
  const std::string address = ResolveTarget(target);
  return Establish(OpenChannel(address, resolved), address, resolved);
}

absl::StatusOr<Client> Client::Connect(std::shared_ptr<grpc::Channel> channel,
                                       const ConnectOptions& options) {
  return Establish(std::move(channel), "the channel given", options);
}

absl::StatusOr<Client> Client::Establish(std::shared_ptr<grpc::Channel> channel,
                                         const std::string& target,
                                         const ConnectOptions& options) {
  auto version = Handshake(*channel, target, options);
  if (!version.ok()) return version.status();
  auto stub = v1::GpuStream::NewStub(channel);
  auto signatures =
      KernelSignatures::Fetch(*stub, options.token, options.timeout);
  return Client(std::move(channel), options.token, *version,
                std::move(signatures));
}

absl::StatusOr<v1::GetServerInfoResponse> Client::server_info() const {
  v1::GetServerInfoResponse response;
  grpc::Status s = stub_->GetServerInfo(NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::StatusOr<std::vector<v1::Device>> Client::list_devices() const {
  v1::ListDevicesResponse response;
  grpc::Status s = stub_->ListDevices(NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  return std::vector<v1::Device>(response.devices().begin(),
                                 response.devices().end());
}

absl::StatusOr<std::vector<v1::Module>> Client::list_modules() const {
  v1::ListModulesResponse response;
  grpc::Status s = stub_->ListModules(NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  return std::vector<v1::Module>(response.modules().begin(),
                                 response.modules().end());
}

absl::StatusOr<std::unique_ptr<Session>> Client::open_session(
    const SessionOptions& options) const {
  v1::OpenSessionRequest request;
  request.set_device_id(options.device_id);
  request.set_client_name(options.client_name);
  request.set_lease_seconds(options.lease_seconds);
  v1::OpenSessionResponse response;
  grpc::Status s = stub_->OpenSession(NewContext().get(), request, &response);
  if (!s.ok()) return FromGrpc(s);
  return std::make_unique<Session>(std::make_shared<SessionCore>(
      channel_, token_, response.session_id(), response.default_queue_id(),
      response.public_id(), signatures_, options.enqueue_timeout));
}

}  // namespace gpustream::client
