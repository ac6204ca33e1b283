#include "server/metrics/stats_collector.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpustream::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily NewFamily(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void Add(MetricFamily& family, std::vector<ClientMetric::Label> labels,
         double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

}  // namespace

std::vector<MetricFamily> StatsCollector::Collect() const {
  v1::GetStatsResponse stats;
  read_(&stats);
  return Families(stats);
}

std::vector<MetricFamily> StatsCollector::Families(
    const v1::GetStatsResponse& stats) {
  MetricFamily weight =
      NewFamily("gpustream_tenant_weight", "The tenant's fair-share weight",
                MetricType::Gauge);
  MetricFamily sessions = NewFamily("gpustream_tenant_sessions",
                                    "Sessions open", MetricType::Gauge);
  MetricFamily queues = NewFamily(
      "gpustream_tenant_queues",
      "Queues held, destroyed ones still draining included", MetricType::Gauge);
  MetricFamily memory = NewFamily(
      "gpustream_tenant_memory_bytes",
      "Device and pinned host memory charged to the tenant", MetricType::Gauge);
  MetricFamily inflight =
      NewFamily("gpustream_tenant_inflight_commands",
                "Commands enqueued and not yet completed", MetricType::Gauge);
  MetricFamily staged =
      NewFamily("gpustream_tenant_staged_bytes",
                "Write data held before the device", MetricType::Gauge);
  MetricFamily waits =
      NewFamily("gpustream_tenant_host_waits",
                "Host waits pending (limit 8192 a tenant)", MetricType::Gauge);
  MetricFamily completed =
      NewFamily("gpustream_tenant_commands_completed_total",
                "Commands completed", MetricType::Counter);
  MetricFamily busy = NewFamily("gpustream_tenant_busy_seconds_total",
                                "Measured execution time of the tenant's work",
                                MetricType::Counter);
  MetricFamily limit =
      NewFamily("gpustream_tenant_quota_limit",
                "A quota limit that is set (the tenant's or the daemon's "
                "default)",
                MetricType::Gauge);
  MetricFamily ratio =
      NewFamily("gpustream_tenant_quota_usage_ratio",
                "Use of a quota that is set, 0..1", MetricType::Gauge);
  MetricFamily sms =
      NewFamily("gpustream_tenant_sm_count",
                "SMs of the tenant's partitions (gpu_sharing SM_PARTITIONS)",
                MetricType::Gauge);
  for (const v1::TenantStats& t : stats.tenants()) {
    const std::vector<ClientMetric::Label> who = {{"tenant", t.tenant()}};
    Add(weight, who, t.weight());
    Add(sessions, who, t.sessions());
    Add(queues, who, t.queues());
    Add(memory, who, static_cast<double>(t.memory_bytes()));
    Add(inflight, who, static_cast<double>(t.inflight_commands()));
    Add(staged, who, static_cast<double>(t.staged_bytes()));
    Add(waits, who, t.host_waits());
    Add(completed, who, static_cast<double>(t.commands_completed()));
    Add(busy, who, t.busy_seconds());
    if (t.sm_count() != 0) Add(sms, who, t.sm_count());
    const std::pair<const char*, std::pair<double, double>> quotas[] = {
        {"memory_bytes",
         {static_cast<double>(t.quota().device_memory_bytes()),
          static_cast<double>(t.memory_bytes())}},
        {"sessions", {t.quota().max_sessions(), t.sessions()}},
        {"queues", {t.quota().max_queues(), t.queues()}},
        {"inflight_commands",
         {static_cast<double>(t.quota().max_inflight_commands()),
          static_cast<double>(t.inflight_commands())}},
        {"staged_bytes",
         {static_cast<double>(t.quota().max_staged_bytes()),
          static_cast<double>(t.staged_bytes())}},
    };
    for (const auto& [resource, limit_and_use] : quotas) {
      const auto [cap, use] = limit_and_use;
      if (cap == 0) continue;
      std::vector<ClientMetric::Label> labels = who;
      labels.push_back({"resource", resource});
      Add(limit, labels, cap);
      Add(ratio, std::move(labels), use / cap);
    }
  }

  MetricFamily device_used =
      NewFamily("gpustream_device_memory_used_bytes",
                "Device memory in use, by anyone", MetricType::Gauge);
  MetricFamily device_total = NewFamily("gpustream_device_memory_total_bytes",
                                        "Device memory", MetricType::Gauge);
  MetricFamily device_busy =
      NewFamily("gpustream_device_busy_seconds_total",
                "Measured execution time on the device, all tenants",
                MetricType::Counter);
  MetricFamily contexts = NewFamily(
      "gpustream_device_tenant_contexts",
      "Tenant contexts open (gpu_sharing CONTEXT_PER_TENANT); the label "
      "sharing names the mode the device serves",
      MetricType::Gauge);
  for (const v1::DeviceStats& d : stats.devices()) {
    const std::vector<ClientMetric::Label> which = {
        {"device", absl::StrCat(d.device_id())}, {"backend", d.backend()}};
    std::vector<ClientMetric::Label> with_sharing = which;
    with_sharing.push_back({"sharing", d.sharing()});
    Add(contexts, std::move(with_sharing), d.tenant_contexts());
    Add(device_used, which, static_cast<double>(d.memory_used_bytes()));
    Add(device_total, which, static_cast<double>(d.memory_total_bytes()));
    Add(device_busy, which, d.busy_seconds());
  }
  std::vector<MetricFamily> out;
  for (MetricFamily* f :
       {&weight, &sessions, &queues, &memory, &inflight, &staged, &completed,
        &busy, &limit, &ratio, &sms, &device_used, &device_total, &device_busy,
        &contexts}) {
    out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace gpustream::metrics
