#include "server/metrics/metrics.h"

#include <prometheus/text_serializer.h>

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/stats_collector.h"

namespace gpustream::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Text(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

TEST(MetricsTest, CountsCallsByMethodAndCodeAndTimesUnaryOnes) {
  Metrics metrics("1.2.3");
  Metrics::Method* open =
      metrics.ForMethod("/gpustream.v1.GpuStream/OpenSession");
  metrics.RecordRpc(open, 0, true, absl::Microseconds(300));
  metrics.RecordRpc(open, 0, true, absl::Milliseconds(3));
  metrics.RecordRpc(open, 16, true, absl::Microseconds(40));
  metrics.RecordRpc(metrics.ForMethod("/gpustream.v1.GpuStream/Submit"), 1,
                    false, absl::Seconds(5));
  metrics.RecordRpc(metrics.ForMethod("/gpustream.v1.Admin/GetStats"), 7, true,
                    absl::Milliseconds(1));
  metrics.RecordRpc(metrics.ForMethod("/grpc.health.v1.Health/Check"), 0, true,
                    absl::Microseconds(80));
  const std::string text = Text(metrics.registry()->Collect());
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="OK",method="OpenSession",service="gpustream.v1.GpuStream"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="UNAUTHENTICATED",method="OpenSession",service="gpustream.v1.GpuStream"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="CANCELLED",method="Submit",service="gpustream.v1.GpuStream"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_duration_seconds_count{method="OpenSession",service="gpustream.v1.GpuStream"} 3)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_duration_seconds_bucket{method="OpenSession",service="gpustream.v1.GpuStream",le="0.0005"} 2)"));
  // Streams are counted, not timed.
  EXPECT_THAT(text,
              Not(HasSubstr(
                  R"(gpustream_rpc_duration_seconds_count{method="Submit")")));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="PERMISSION_DENIED",method="GetStats",service="gpustream.v1.Admin"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="OK",method="Check",service="grpc.health.v1.Health"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gpustream_build_info{version="1.2.3"} 1)"));
}

TEST(MetricsTest, InventedMethodNamesShareOneSeries) {
  Metrics metrics("v");
  for (int i = 0; i < 100; ++i) {
    const std::string name = "/evil.Service/M" + std::to_string(i);
    metrics.RecordRpc(metrics.ForMethod(name.c_str()), 12, true,
                      absl::Microseconds(10));
  }
  metrics.RecordRpc(metrics.ForMethod(nullptr), 99, true, absl::ZeroDuration());
  const std::string text = Text(metrics.registry()->Collect());
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="UNIMPLEMENTED",method="unknown",service="unknown"} 100)"));
  // An out-of-range code counts as UNKNOWN.
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_rpc_requests_total{code="UNKNOWN",method="unknown",service="unknown"} 1)"));
  EXPECT_THAT(text, Not(HasSubstr("M7")));
}

TEST(MetricsTest, SubmitStreamsAndCommands) {
  Metrics metrics("v");
  metrics.SubmitStreamOpened();
  metrics.SubmitStreamOpened();
  metrics.SubmitStreamClosed();
  metrics.SubmitRequest();
  for (int i = 0; i < 5; ++i) metrics.SubmitCommandDone(0);
  metrics.SubmitCommandDone(5);
  metrics.NotificationStreamOpened();
  const std::string text = Text(metrics.registry()->Collect());
  EXPECT_THAT(text, HasSubstr("gpustream_submit_streams_total 2"));
  EXPECT_THAT(text, HasSubstr("gpustream_submit_streams_open 1"));
  EXPECT_THAT(text, HasSubstr("gpustream_submit_requests_total 1"));
  EXPECT_THAT(text,
              HasSubstr(R"(gpustream_submit_commands_total{code="OK"} 5)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpustream_submit_commands_total{code="NOT_FOUND"} 1)"));
  EXPECT_THAT(text, HasSubstr("gpustream_notification_streams_open 1"));
}

TEST(StatsCollectorTest, TenantsDevicesAndQuotaUse) {
  v1::GetStatsResponse stats;
  v1::TenantStats* t = stats.add_tenants();
  t->set_tenant("alice");
  t->set_weight(2);
  t->set_sessions(1);
  t->set_memory_bytes(256);
  t->set_commands_completed(42);
  t->set_busy_seconds(1.5);
  t->mutable_quota()->set_device_memory_bytes(1024);
  t->set_sm_count(80);
  v1::TenantStats* bob = stats.add_tenants();
  bob->set_tenant("bob");
  v1::DeviceStats* d = stats.add_devices();
  d->set_device_id(0);
  d->set_backend("cpu");
  d->set_sharing("weighted_fair_queuing");
  d->set_memory_total_bytes(4096);
  d->set_memory_used_bytes(256);
  const std::string text = Text(StatsCollector::Families(stats));
  EXPECT_THAT(text, HasSubstr(R"(gpustream_tenant_weight{tenant="alice"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_tenant_commands_completed_total{tenant="alice"} 42)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpustream_tenant_busy_seconds_total{tenant="alice"} 1.5)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_tenant_quota_limit{tenant="alice",resource="memory_bytes"} 1024)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_tenant_quota_usage_ratio{tenant="alice",resource="memory_bytes"} 0.25)"));
  // Limits that are not set do not appear.
  EXPECT_THAT(text, Not(HasSubstr(R"(resource="sessions")")));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_device_memory_used_bytes{device="0",backend="cpu"} 256)"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE gpustream_device_busy_seconds_total counter"));
  // SMs only for tenants with a partition.
  EXPECT_THAT(text,
              HasSubstr(R"(gpustream_tenant_sm_count{tenant="alice"} 80)"));
  EXPECT_THAT(text,
              Not(HasSubstr(R"(gpustream_tenant_sm_count{tenant="bob"})")));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpustream_device_tenant_contexts{device="0",backend="cpu",sharing="weighted_fair_queuing"} 0)"));
}

}  // namespace
}  // namespace gpustream::metrics
