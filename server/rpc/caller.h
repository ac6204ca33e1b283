// Who is calling: the credentials a call presents, checked by the tenant
// registry behind ServerCore::Authenticate.
#ifndef GPUSTREAM_SERVER_RPC_CALLER_H_
#define GPUSTREAM_SERVER_RPC_CALLER_H_

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "server/session/server_core.h"
#include "server/tenants/tenant.h"

namespace gpustream::rpc {

// The token of "authorization: Bearer <token>" metadata. The scheme is
// matched without regard to case (RFC 7235) and blanks around the token are
// dropped. Any other value (another scheme, "Bearer" with no token) is
// passed on whole as the token rather than dropped: with tenants configured
// it then matches no token digest and the call is UNAUTHENTICATED ("invalid
// bearer token"), instead of a malformed header being silently ignored and
// the call authenticating by its client certificate alone; without tenants
// every caller is "default" anyway. Of repeated "authorization" entries the
// first counts. No "authorization" metadata: no token.
inline std::optional<std::string> BearerToken(
    const grpc::ServerContextBase& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "bearer ";
  if (absl::StartsWithIgnoreCase(value, kBearer)) {
    const absl::string_view token =
        absl::StripAsciiWhitespace(value.substr(kBearer.size()));
    if (!token.empty()) return std::string(token);
  }
  return std::string(value);
}

// The subject of the client certificate the peer presented on a TLS
// connection, in RFC 2253 form as OpenSSL prints it (gRPC's "x509_subject"
// property: most specific RDN first, comma-separated, no blanks, e.g.
// "CN=alice" or "CN=alice,O=Acme"; what `openssl x509 -noout -subject
// -nameopt RFC2253` shows after "subject="). Config tls_subject values must
// be written the same way: the registry compares them exactly.
//
// The daemon requests client certificates only in a verifying mode
// (GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY, see grpc_server.h), so
// a certificate that is present has been verified against --tls_client_ca:
// one that does not verify fails the handshake and no call is made. Plain
// connections (unix sockets, plaintext TCP) carry no subject, and neither
// does a TLS connection whose client sent no certificate.
inline std::optional<std::string> TlsSubject(
    const grpc::ServerContextBase& ctx) {
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return std::nullopt;
  // Only TLS puts x509 properties there; insist on it so no other transport
  // security (or an AuthMetadataProcessor) can claim a subject.
  const auto type =
      auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  if (type.empty() || type.front() != GRPC_SSL_TRANSPORT_SECURITY_TYPE) {
    return std::nullopt;
  }
  const auto subject =
      auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
  if (subject.empty()) return std::nullopt;
  const absl::string_view text = absl::StripAsciiWhitespace(
      absl::string_view(subject.front().data(), subject.front().size()));
  if (text.empty()) return std::nullopt;
  return std::string(text);
}

// What the call presents, for the tenant registry.
inline tenants::Credentials CallCredentials(
    const grpc::ServerContextBase& ctx) {
  tenants::Credentials credentials;
  credentials.bearer_token = BearerToken(ctx);
  credentials.tls_subject = TlsSubject(ctx);
  return credentials;
}

// The authenticated caller, or UNAUTHENTICATED saying what was missing or
// wrong.
inline absl::StatusOr<tenants::Principal> Caller(
    const session::ServerCore& core, grpc::CallbackServerContext* ctx) {
  return core.Authenticate(CallCredentials(*ctx));
}

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_CALLER_H_
