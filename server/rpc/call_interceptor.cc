#include "server/rpc/call_interceptor.h"

#include <grpcpp/server_context.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/log/log.h"

namespace gpustream::rpc {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Whether `method` belongs to the daemon's own services, which are served on
// gRPC's callback API. There IsCancelled() reads a flag. On the synchronous
// API (reflection) it plucks the call's completion queue, and from inside a
// POST_RECV_CLOSE hook that finishes the same completion op again, which
// re-enters the hook without end: a stack overflow.
bool OnCallbackApi(const char* method) {
  if (method == nullptr) return false;
  static const std::string* const kPrefixes = new std::string[2]{
      absl::StrCat("/", v1::GpuStream::service_full_name(), "/"),
      absl::StrCat("/", v1::Admin::service_full_name(), "/")};
  return absl::StartsWith(method, kPrefixes[0]) ||
         absl::StartsWith(method, kPrefixes[1]);
}

bool DaemonAtFault(grpc::StatusCode code) {
  return code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::DATA_LOSS;
}

class CallInterceptor : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(grpc::experimental::ServerRpcInfo* info,
                  metrics::Metrics* metrics)
      : metrics_(metrics),
        method_(metrics != nullptr ? metrics->ForMethod(info->method())
                                   : nullptr),
        info_(info),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY),
        may_ask_cancelled_(OnCallbackApi(info->method())) {}

  ~CallInterceptor() override {
    if (metrics_ != nullptr) {
      metrics_->RecordRpc(method_,
                          cancelled_ ? grpc::StatusCode::CANCELLED : code_,
                          unary_, absl::Now() - start_);
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      code_ = status.error_code();
      if (!status.ok()) Log(status);
    }
    // The call's end: a client that cancelled, vanished or ran out of time
    // before the status reached it makes the call CANCELLED, whatever the
    // handler sends, before or after (a Submit or notification stream
    // finishes OK once it sees its client gone). The two hooks may run on
    // different threads; each writes its own field, and the destructor
    // runs after both. Only asked on the callback API (OnCallbackApi).
    if (may_ask_cancelled_ &&
        methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_CLOSE) &&
        info_->server_context() != nullptr &&
        info_->server_context()->IsCancelled()) {
      cancelled_ = true;
    }
    methods->Proceed();
  }

 private:
  void Log(const grpc::Status& status) const {
    const log::Level level = DaemonAtFault(status.error_code())
                                 ? log::Level::kError
                                 : log::Level::kDebug;
    if (!log::Enabled(level)) return;
    log::Event(level, "rpc_failed")
        .Str("method", info_->method() != nullptr ? info_->method() : "")
        .Num("ms", absl::ToDoubleMilliseconds(absl::Now() - start_))
        .CallStatus(
            absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                         status.error_message()));
  }

  metrics::Metrics* const metrics_;
  metrics::Metrics::Method* const method_;
  // Owns this interceptor, so it outlives it.
  grpc::experimental::ServerRpcInfo* const info_;
  const bool unary_;
  const bool may_ask_cancelled_;
  const absl::Time start_ = absl::Now();
  int code_ = grpc::StatusCode::CANCELLED;  // The status sent, if any.
  bool cancelled_ = false;                  // The client never got it.
};

}  // namespace

grpc::experimental::Interceptor*
CallInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new CallInterceptor(info, metrics_);
}

}  // namespace gpustream::rpc
