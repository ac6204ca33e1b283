#include "server/metrics/metrics.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"

namespace gpustream::metrics {
namespace {

// gRPC's built-in services (their descriptors are not linked in).
constexpr std::pair<const char*, const char*> kBuiltinMethods[] = {
    {"grpc.health.v1.Health", "Check"},
    {"grpc.health.v1.Health", "Watch"},
    {"grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo"},
};

// Latency from 50 µs (a unary call on a unix socket) to a minute (a
// synchronize that waits for long work).
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3,
          10e-3, 25e-3,  50e-3,  100e-3, 250e-3, 500e-3, 1,
          2.5,   5,      10,     30,     60};
}

std::string CodeLabel(int code) {
  static const char* const kNames[kCodes] = {"OK",
                                             "CANCELLED",
                                             "UNKNOWN",
                                             "INVALID_ARGUMENT",
                                             "DEADLINE_EXCEEDED",
                                             "NOT_FOUND",
                                             "ALREADY_EXISTS",
                                             "PERMISSION_DENIED",
                                             "RESOURCE_EXHAUSTED",
                                             "FAILED_PRECONDITION",
                                             "ABORTED",
                                             "OUT_OF_RANGE",
                                             "UNIMPLEMENTED",
                                             "INTERNAL",
                                             "UNAVAILABLE",
                                             "DATA_LOSS",
                                             "UNAUTHENTICATED"};
  return kNames[code];
}

int ClampCode(int code) { return code >= 0 && code < kCodes ? code : 2; }

}  // namespace

Metrics::Metrics(const std::string& version)
    : registry_(std::make_shared<prometheus::Registry>()),
      rpc_requests_(prometheus::BuildCounter()
                        .Name("gpustream_rpc_requests_total")
                        .Help("gRPC calls finished, by method and status code "
                              "(a stream counts once, when it ends)")
                        .Register(*registry_)),
      rpc_duration_(prometheus::BuildHistogram()
                        .Name("gpustream_rpc_duration_seconds")
                        .Help("Time from a unary call's arrival to its status")
                        .Register(*registry_)),
      submit_streams_(prometheus::BuildCounter()
                          .Name("gpustream_submit_streams_total")
                          .Help("Submit streams opened")
                          .Register(*registry_)
                          .Add({})),
      submit_streams_open_(prometheus::BuildGauge()
                               .Name("gpustream_submit_streams_open")
                               .Help("Submit streams open now")
                               .Register(*registry_)
                               .Add({})),
      submit_requests_(prometheus::BuildCounter()
                           .Name("gpustream_submit_requests_total")
                           .Help("SubmitRequest messages read")
                           .Register(*registry_)
                           .Add({})),
      submit_commands_family_(
          prometheus::BuildCounter()
              .Name("gpustream_submit_commands_total")
              .Help("Submit commands answered, by status code")
              .Register(*registry_)),
      submit_result_bytes_pending_(
          prometheus::BuildGauge()
              .Name("gpustream_submit_result_bytes_pending")
              .Help("Bytes of read results admitted on Submit streams and "
                    "not yet sent")
              .Register(*registry_)
              .Add({})),
      notification_streams_open_(
          prometheus::BuildGauge()
              .Name("gpustream_notification_streams_open")
              .Help("WatchNotifications streams open now")
              .Register(*registry_)
              .Add({})) {
  prometheus::BuildGauge()
      .Name("gpustream_build_info")
      .Help("The daemon's version")
      .Register(*registry_)
      .Add({{"version", version}})
      .Set(1);
  // The commonest outcome exists from the start, so a rate() over it has a
  // zero to start from.
  submit_commands_[0] = &submit_commands_family_.Add({{"code", "OK"}});

  auto add = [this](absl::string_view service, absl::string_view method) {
    auto entry = std::make_unique<Method>();
    entry->service = std::string(service);
    entry->name = std::string(method);
    methods_.emplace(absl::StrCat("/", service, "/", method), std::move(entry));
  };
  // Every service of the API's proto file (GpuStream, Admin), from its
  // generated descriptor: a new RPC is counted without touching this file.
  const google::protobuf::FileDescriptor* api =
      v1::GetStatsRequest::descriptor()->file();
  for (int s = 0; s < api->service_count(); ++s) {
    const google::protobuf::ServiceDescriptor* service = api->service(s);
    for (int i = 0; i < service->method_count(); ++i) {
      add(service->full_name(), service->method(i)->name());
    }
  }
  for (const auto& [service, method] : kBuiltinMethods) add(service, method);
  unknown_.service = "unknown";
  unknown_.name = "unknown";
}

Metrics::Method* Metrics::ForMethod(const char* full_method) {
  if (full_method == nullptr) return &unknown_;
  auto it = methods_.find(absl::string_view(full_method));
  return it == methods_.end() ? &unknown_ : it->second.get();
}

prometheus::Counter& Metrics::Requests(Method& method, int code) {
  std::atomic<prometheus::Counter*>& slot = method.requests[code];
  if (prometheus::Counter* c = slot.load(std::memory_order_acquire)) return *c;
  absl::MutexLock lock(&create_mu_);
  if (prometheus::Counter* c = slot.load(std::memory_order_acquire)) return *c;
  prometheus::Counter* c = &rpc_requests_.Add({{"service", method.service},
                                               {"method", method.name},
                                               {"code", CodeLabel(code)}});
  slot.store(c, std::memory_order_release);
  return *c;
}

prometheus::Histogram& Metrics::Duration(Method& method) {
  if (prometheus::Histogram* h =
          method.duration.load(std::memory_order_acquire))
    return *h;
  absl::MutexLock lock(&create_mu_);
  if (prometheus::Histogram* h =
          method.duration.load(std::memory_order_acquire))
    return *h;
  prometheus::Histogram* h = &rpc_duration_.Add(
      {{"service", method.service}, {"method", method.name}}, LatencyBuckets());
  method.duration.store(h, std::memory_order_release);
  return *h;
}

void Metrics::RecordRpc(Method* method, int code, bool unary,
                        absl::Duration elapsed) {
  Requests(*method, ClampCode(code)).Increment();
  if (unary) Duration(*method).Observe(absl::ToDoubleSeconds(elapsed));
}

void Metrics::SubmitStreamOpened() {
  submit_streams_.Increment();
  submit_streams_open_.Increment();
}

void Metrics::SubmitStreamClosed() { submit_streams_open_.Decrement(); }

void Metrics::SubmitResultBytes(int64_t bytes) {
  submit_result_bytes_pending_.Increment(static_cast<double>(bytes));
}

void Metrics::SubmitRequest() { submit_requests_.Increment(); }

void Metrics::SubmitCommandDone(int code) {
  code = ClampCode(code);
  prometheus::Counter* counter = submit_commands_[0];
  if (code != 0) {
    // Failures only (OK was made in the constructor): the lock stays off
    // the path of every successful command.
    absl::MutexLock lock(&create_mu_);
    if (submit_commands_[code] == nullptr) {
      submit_commands_[code] =
          &submit_commands_family_.Add({{"code", CodeLabel(code)}});
    }
    counter = submit_commands_[code];
  }
  counter->Increment();
}

void Metrics::NotificationStreamOpened() {
  notification_streams_open_.Increment();
}

void Metrics::NotificationStreamClosed() {
  notification_streams_open_.Decrement();
}

}  // namespace gpustream::metrics
