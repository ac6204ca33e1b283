// Tenant and device figures for /metrics, read from the daemon's own
// accounting (what Admin.GetStats answers) at every scrape, so the two
// never disagree and nothing is sampled in between.
//
//   gpustream_tenant_weight{tenant}                        gauge
//   gpustream_tenant_sessions{tenant}                      gauge
//   gpustream_tenant_queues{tenant}                        gauge
//   gpustream_tenant_memory_bytes{tenant}                  gauge
//   gpustream_tenant_inflight_commands{tenant}             gauge
//   gpustream_tenant_staged_bytes{tenant}                  gauge
//   gpustream_tenant_commands_completed_total{tenant}      counter
//   gpustream_tenant_busy_seconds_total{tenant}            counter
//   gpustream_tenant_quota_limit{tenant,resource}          gauge
//   gpustream_tenant_quota_usage_ratio{tenant,resource}    gauge (use/limit)
//   gpustream_device_memory_used_bytes{device,backend}     gauge
//   gpustream_device_memory_total_bytes{device,backend}    gauge
//   gpustream_device_busy_seconds_total{device,backend}    counter
//
// `resource` is one of memory_bytes, sessions, queues, inflight_commands,
// staged_bytes; only limits that are set (non-zero) appear.
#ifndef GPUSTREAM_SERVER_METRICS_STATS_COLLECTOR_H_
#define GPUSTREAM_SERVER_METRICS_STATS_COLLECTOR_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <vector>

#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::metrics {

class StatsCollector : public prometheus::Collectable {
 public:
  // `read` fills a GetStatsResponse; called on the HTTP server's threads,
  // so it must be thread-safe.
  explicit StatsCollector(std::function<void(v1::GetStatsResponse*)> read)
      : read_(std::move(read)) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

  // The families for `stats` (Collect without the read), for tests.
  static std::vector<prometheus::MetricFamily> Families(
      const v1::GetStatsResponse& stats);

 private:
  const std::function<void(v1::GetStatsResponse*)> read_;
};

}  // namespace gpustream::metrics

#endif  // GPUSTREAM_SERVER_METRICS_STATS_COLLECTOR_H_
