// fair_share_bench: the CPU device's fair shares, driven straight through
// the backend interface (no daemon, no gRPC), in two scenarios that keep
// every execution thread busy with spin_ns launches, and a third:
//   a. 8 tenants of equal weight, shaped differently: one with 8 queues in
//      one session, one with 4 sessions of one queue, six with one queue.
//      Each should get 1/8 of the device: the figure is the fastest
//      tenant's throughput over the slowest's (goal <= 1.05).
//   b. 2 tenants weighted 2:1, with the same queues each: the figure is
//      the heavy tenant's throughput over the light one's (goal 2.0 +- 0.1).
//   c. 1 tenant with 8 sessions: one of 8 queues, seven of one queue. Each
//      session should get 1/8: fastest session over slowest (goal <= 1.05).
// Then, for the cost of scheduling itself, the rate of noop launches
// straight into one queue and into 8 queues of 8 tenants.
//
// Each queue runs a chain: a launch, then a host function that counts it
// and enqueues the next pair (enqueueing never blocks), `--depth` chains
// per queue, so a queue never runs dry. Throughput is launches completed
// in the measured window, after a warm-up.
//
// The scheduler shares measured wall time (the "% of busy time" column is
// exact by construction); launches per second follow it only while a
// launch's wall time is its spin. Other processes preempting the execution
// threads inflate random launches and skew the launch counts: measure on a
// quiet machine, or raise the bench's priority (nice -n -15).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/work_account.h"
#include "server/usage.h"
#include "server/util/release_mutexes.h"
#include "server/version.h"

ABSL_FLAG(double, seconds, 4.0, "Measured seconds per fairness scenario");
ABSL_FLAG(double, warmup_seconds, 0.5, "Unmeasured seconds before each");
ABSL_FLAG(uint64_t, spin_us, 200, "Microseconds each spin_ns launch runs");
ABSL_FLAG(uint32_t, threads, 0,
          "Execution threads; 0: the hardware threads, at most 8 (with more "
          "threads than 8 one-queue tenants have queues, a fair share is "
          "more than one queue can use)");
ABSL_FLAG(int, depth, 2, "Launch chains kept going per queue");
ABSL_FLAG(int, noop_launches, 200000, "Launches per noop-rate figure");
ABSL_FLAG(std::string, samples_dir, "",
          "Where to write fair_share.json (each tenant's launches/s per "
          "100 ms of each scenario) for tools/plot_bench.py; empty: nowhere");

namespace gpustream::bench {
namespace {

// Exits naming the step that failed: a figure measured after a failure
// would mislead (as bench_util's Check, without its gRPC dependencies).
void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fair_share_bench: %s failed\n", what);
  std::exit(2);
}
void Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "fair_share_bench: %s: %s\n", what,
               status.ToString().c_str());
  std::exit(2);
}

using backend::CpuDevice;
using backend::Kernel;
using backend::Queue;
using backend::WorkAccount;

// A tenant's shape: its weight and how many queues each of its sessions
// has.
struct TenantSpec {
  std::string name;
  uint32_t weight = 1;
  std::vector<int> queues_per_session;
  // Rows naming the same account are sessions of one tenant (measured
  // apart); empty: a tenant of its own.
  std::string account;
};

struct Tenant {
  TenantSpec spec;
  std::shared_ptr<WorkAccount> account;
  std::vector<std::shared_ptr<Queue>> queues;
  std::atomic<uint64_t> launches{0};
};

// The state chains share; outlives every chain (they end before it goes).
struct Run {
  const Kernel* spin = nullptr;
  uint64_t spin_ns = 0;
  std::atomic<bool> stop{false};
};

void Chain(Run* run, Tenant* tenant, Queue* queue) {
  Check(queue->Launch(*run->spin, {{1}, {1}}, {run->spin_ns}), "launch");
  Check(queue->HostFunc([run, tenant, queue] {
    tenant->launches.fetch_add(1, std::memory_order_relaxed);
    if (!run->stop.load(std::memory_order_relaxed)) Chain(run, tenant, queue);
  }),
        "host function");
}

void Drain(Queue& queue) {
  absl::Notification idle;
  absl::Status status;
  queue.OnIdle([&](absl::Status s) {
    status = s;
    idle.Notify();
  });
  Check(idle.WaitForNotificationWithTimeout(absl::Minutes(1)),
        "draining a queue");
  Check(status, "queue status");
}

struct Share {
  std::string name;
  uint32_t weight;
  double launches_per_s;
  double busy_share;           // Of all busy time in the window.
  std::vector<double> series;  // Launches/s in each kInterval of the window.
};

// The time series' step.
constexpr absl::Duration kInterval = absl::Milliseconds(100);

// Runs the tenants' chains; each tenant's throughput in the window.
std::vector<Share> Measure(CpuDevice& device, const Kernel& spin,
                           const std::vector<TenantSpec>& specs) {
  Run run;
  run.spin = &spin;
  run.spin_ns = absl::GetFlag(FLAGS_spin_us) * 1000;
  std::vector<std::unique_ptr<Tenant>> tenants;
  absl::flat_hash_map<std::string, std::shared_ptr<WorkAccount>> accounts;
  uint64_t session_key = 0;
  for (const TenantSpec& spec : specs) {
    auto t = std::make_unique<Tenant>();
    t->spec = spec;
    std::shared_ptr<WorkAccount>& account =
        accounts[spec.account.empty() ? spec.name : spec.account];
    if (account == nullptr) {
      account = std::make_shared<WorkAccount>(spec.name, spec.weight);
    }
    t->account = account;
    for (size_t s = 0; s < spec.queues_per_session.size(); ++s) {
      ++session_key;
      for (int q = 0; q < spec.queues_per_session[s]; ++q) {
        backend::QueueOptions options;
        options.account = t->account;
        options.session_key = session_key;
        auto queue = device.CreateQueue(std::move(options));
        Check(queue.status(), "creating a queue");
        t->queues.push_back(*std::move(queue));
      }
    }
    tenants.push_back(std::move(t));
  }
  for (auto& t : tenants) {
    for (auto& q : t->queues) {
      for (int d = 0; d < absl::GetFlag(FLAGS_depth); ++d) {
        Chain(&run, t.get(), q.get());
      }
    }
  }
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_warmup_seconds)));
  std::vector<uint64_t> launches0, busy0;
  for (auto& t : tenants) {
    launches0.push_back(t->launches.load());
    busy0.push_back(t->account->busy_ns.load());
  }
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::vector<std::vector<double>> series(tenants.size());
  std::vector<uint64_t> last = launches0;
  for (absl::Time tick = start; tick < end;) {
    const absl::Time next = std::min(tick + kInterval, end);
    absl::SleepFor(next - absl::Now());
    const absl::Time now = absl::Now();
    const double step = absl::ToDoubleSeconds(now - tick);
    tick = now;
    // A last sliver of an interval would give a noisy rate: left out of
    // the series (the window's totals still count it).
    const bool sample = step >= absl::ToDoubleSeconds(kInterval) / 2;
    for (size_t i = 0; i < tenants.size(); ++i) {
      const uint64_t launched = tenants[i]->launches.load();
      if (sample) series[i].push_back((launched - last[i]) / step);
      last[i] = launched;
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<Share> shares;
  double busy_total = 0;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const double busy =
        static_cast<double>(tenants[i]->account->busy_ns.load() - busy0[i]);
    busy_total += busy;
    shares.push_back(
        {tenants[i]->spec.name, tenants[i]->spec.weight,
         static_cast<double>(tenants[i]->launches.load() - launches0[i]) /
             seconds,
         busy, std::move(series[i])});
  }
  for (Share& s : shares) s.busy_share /= busy_total;
  run.stop.store(true);
  for (auto& t : tenants) {
    for (auto& q : t->queues) Drain(*q);
  }
  for (auto& t : tenants) {
    Check(t->account->inflight_commands.load() == 0, "inflight back to 0");
  }
  return shares;
}

// `busy`: each row is a tenant of its own, whose busy time is its own.
void PrintShares(const std::vector<Share>& shares, bool busy = true) {
  for (const Share& s : shares) {
    std::printf("  %-26s weight %u  %9.1f launches/s", s.name.c_str(), s.weight,
                s.launches_per_s);
    if (busy) std::printf("  %5.1f%% of busy time", 100 * s.busy_share);
    std::printf("\n");
  }
}

// The fastest row's launches over the slowest's.
double Spread(const std::vector<Share>& shares) {
  const auto [slow, fast] = std::minmax_element(
      shares.begin(), shares.end(), [](const Share& x, const Share& y) {
        return x.launches_per_s < y.launches_per_s;
      });
  return fast->launches_per_s / slow->launches_per_s;
}

// Launches/s of noops over `queues` queues, one tenant each, enqueued
// from one thread, until all have run.
double NoopRate(CpuDevice& device, const Kernel& noop, int queues, int n) {
  std::vector<std::shared_ptr<Queue>> qs;
  for (int i = 0; i < queues; ++i) {
    backend::QueueOptions options;
    options.account = std::make_shared<WorkAccount>(absl::StrCat("noop", i));
    qs.push_back(*device.CreateQueue(std::move(options)));
  }
  const absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    Check(qs[i % queues]->Launch(noop, {}, {}), "noop launch");
  }
  for (auto& q : qs) Drain(*q);
  return n / absl::ToDoubleSeconds(absl::Now() - start);
}

// fair_share.json for tools/plot_bench.py: per scenario, each tenant's
// launches/s over time.
void WriteSeries(
    const std::vector<std::pair<std::string, std::vector<Share>>>& runs) {
  const std::string dir = absl::GetFlag(FLAGS_samples_dir);
  if (dir.empty()) return;
  std::string json = absl::StrFormat("{\"interval_s\": %.3f, \"scenarios\": {",
                                     absl::ToDoubleSeconds(kInterval));
  for (size_t r = 0; r < runs.size(); ++r) {
    absl::StrAppend(&json, r == 0 ? "" : ", ", "\"", runs[r].first, "\": {");
    for (size_t i = 0; i < runs[r].second.size(); ++i) {
      const Share& s = runs[r].second[i];
      std::string values;
      for (size_t k = 0; k < s.series.size(); ++k) {
        absl::StrAppendFormat(&values, "%s%.1f", k == 0 ? "" : ",",
                              s.series[k]);
      }
      absl::StrAppend(&json, i == 0 ? "" : ", ", "\"", s.name, " (weight ",
                      s.weight, ")\": [", values, "]");
    }
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "}}\n");
  const std::string path = absl::StrCat(dir, "/fair_share.json");
  std::FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr && std::fputs(json.c_str(), f) >= 0 && std::fclose(f) == 0,
        "writing fair_share.json");
}

int Main() {
  uint32_t threads = absl::GetFlag(FLAGS_threads);
  if (threads == 0) {
    threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  }
  backend::CpuDeviceOptions options;
  options.threads = threads;
  CpuDevice device(options);
  auto modules = device.BuiltinModules();
  Check(!modules.empty(), "the built-in samples module");
  const Kernel& spin = **modules.front()->FindKernel("spin_ns");
  const Kernel& noop = **modules.front()->FindKernel("noop");

  std::printf(
      "fair_share_bench: CPU device, %u execution threads (%ld cores), "
      "spin_ns launches of %lu us, %d chains per queue, %.1f s measured "
      "after %.1f s\n\n",
      threads, sysconf(_SC_NPROCESSORS_ONLN),
      static_cast<unsigned long>(absl::GetFlag(FLAGS_spin_us)),
      absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_seconds),
      absl::GetFlag(FLAGS_warmup_seconds));

  std::vector<TenantSpec> a = {{"8 queues, 1 session", 1, {8}},
                               {"4 sessions of 1 queue", 1, {1, 1, 1, 1}}};
  for (int i = 0; i < 6; ++i) {
    a.push_back({absl::StrCat("1 queue #", i + 1), 1, {1}});
  }
  std::printf("a. 8 tenants, equal weights\n");
  std::vector<Share> shares = Measure(device, spin, a);
  const std::vector<Share> shares_a = shares;
  PrintShares(shares);
  const double spread = Spread(shares);
  std::printf("  fastest / slowest tenant: %.3f (goal <= 1.05: %s)\n\n", spread,
              spread <= 1.05 ? "met" : "MISSED");

  const int per_tenant = static_cast<int>(threads);
  std::vector<TenantSpec> b = {{"heavy", 2, {per_tenant}},
                               {"light", 1, {per_tenant}}};
  std::printf("b. 2 tenants, weights 2:1, %d queues each\n", per_tenant);
  shares = Measure(device, spin, b);
  PrintShares(shares);
  const double ratio = shares[0].launches_per_s / shares[1].launches_per_s;
  std::printf("  heavy / light: %.3f (goal 2.0 +- 0.1: %s)\n\n", ratio,
              ratio >= 1.9 && ratio <= 2.1 ? "met" : "MISSED");
  WriteSeries({{"8 tenants, equal weights", shares_a},
               {"2 tenants, weights 2:1", shares}});

  // Sessions of one tenant share its time equally, however many queues
  // each has (docs/architecture.md).
  std::vector<TenantSpec> c = {{"session of 8 queues", 1, {8}, "one"}};
  for (int i = 0; i < 7; ++i) {
    c.push_back({absl::StrCat("session of 1 queue #", i + 1), 1, {1}, "one"});
  }
  std::printf("c. 1 tenant, 8 sessions\n");
  shares = Measure(device, spin, c);
  PrintShares(shares, /*busy=*/false);
  const double session_spread = Spread(shares);
  std::printf("  fastest / slowest session: %.3f (goal <= 1.05: %s)\n\n",
              session_spread, session_spread <= 1.05 ? "met" : "MISSED");

  const int n = absl::GetFlag(FLAGS_noop_launches);
  std::printf("d. scheduling cost\n");
  std::printf("  %-40s %12.0f launches/s\n", "noop launches, 1 queue",
              NoopRate(device, noop, 1, n));
  std::printf("  %-40s %12.0f launches/s\n",
              "noop launches, 8 queues of 8 tenants",
              NoopRate(device, noop, 8, n));
  return spread <= 1.05 && ratio >= 1.9 && ratio <= 2.1 &&
                 session_spread <= 1.05
             ? 0
             : 1;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::util::UseReleaseMutexes();
  gpustream::SetUsage("fair_share_bench",
                      "the CPU device's fair shares between tenants.\nUsage: "
                      "fair_share_bench [flags]");
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Main();
}
