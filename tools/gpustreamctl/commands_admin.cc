// The Admin service's commands (admin tenants only): sessions, kill, stats.
#include <algorithm>
#include <string>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/gpustreamctl/commands.h"
#include "tools/gpustreamctl/format.h"
#include "tools/gpustreamctl/json_output.h"
#include "tools/gpustreamctl/table.h"

namespace gpustream::ctl {
namespace {

using Align = Table::Align;

}  // namespace

absl::StatusOr<Verdict> RunSessions(const Invocation& in) {
  const Connection& c = in.connection;
  v1::ListSessionsResponse response;
  grpc::Status s = c.admin().ListSessions(c.NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  // The daemon lists in no particular order; scripts and eyes want a
  // stable one.
  std::sort(response.mutable_sessions()->begin(),
            response.mutable_sessions()->end(),
            [](const v1::SessionInfo& a, const v1::SessionInfo& b) {
              return std::tie(a.tenant(), a.public_id()) <
                     std::tie(b.tenant(), b.public_id());
            });
  if (c.options().json) return EmitJson(ToJson(response), in.out);
  Table table({{"PUBLIC_ID"},
               {"TENANT"},
               {"CLIENT"},
               {"DEVICE", Align::kRight},
               {"AGE", Align::kRight},
               {"IDLE", Align::kRight},
               {"QUEUES", Align::kRight},
               {"MEMORY", Align::kRight},
               {"INFLIGHT", Align::kRight},
               {"STREAMS", Align::kRight}});
  for (const v1::SessionInfo& i : response.sessions()) {
    table.AddRow({Cell(i.public_id()), Cell(i.tenant()), Cell(i.client_name()),
                  absl::StrCat(i.device_id()), FormatMillis(i.age_ms()),
                  FormatMillis(i.idle_ms()), absl::StrCat(i.queues()),
                  FormatBytes(i.memory_bytes()),
                  absl::StrCat(i.inflight_commands()),
                  absl::StrCat(i.open_streams())});
  }
  *in.out = table.Render();
  return Verdict::kOk;
}

absl::StatusOr<Verdict> RunKill(const Invocation& in) {
  const Connection& c = in.connection;
  const std::string& public_id = in.args.at(0);
  v1::KillSessionRequest request;
  request.set_public_id(public_id);
  v1::KillSessionResponse response;
  grpc::Status s =
      c.admin().KillSession(c.NewContext().get(), request, &response);
  if (!s.ok()) {
    absl::Status status = FromGrpc(s);
    // The error must say which session, whatever words the daemon chose.
    if (!absl::StrContains(status.message(), public_id)) {
      status = absl::Status(
          status.code(),
          absl::StrCat("session ", public_id, ": ", status.message()));
    }
    return status;
  }
  if (c.options().json) {
    return EmitJson(absl::StrCat("{\"killed\":", JsonQuote(public_id), "}"),
                    in.out);
  }
  *in.out = absl::StrCat("killed ", Cell(public_id), "\n");
  return Verdict::kOk;
}

absl::StatusOr<Verdict> RunStats(const Invocation& in) {
  const Connection& c = in.connection;
  v1::GetStatsResponse response;
  grpc::Status s = c.admin().GetStats(c.NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  std::sort(response.mutable_tenants()->begin(),
            response.mutable_tenants()->end(),
            [](const v1::TenantStats& a, const v1::TenantStats& b) {
              return a.tenant() < b.tenant();
            });
  std::sort(response.mutable_devices()->begin(),
            response.mutable_devices()->end(),
            [](const v1::DeviceStats& a, const v1::DeviceStats& b) {
              return a.device_id() < b.device_id();
            });
  if (c.options().json) return EmitJson(ToJson(response), in.out);

  // Quota columns read "used/limit"; "-" where no limit applies.
  Table tenants({{"TENANT"},
                 {"WEIGHT", Align::kRight},
                 {"SESSIONS", Align::kRight},
                 {"QUEUES", Align::kRight},
                 {"MEMORY", Align::kRight},
                 {"INFLIGHT", Align::kRight},
                 {"STAGED", Align::kRight},
                 {"COMPLETED", Align::kRight},
                 {"BUSY", Align::kRight},
                 {"SMS", Align::kRight}});
  for (const v1::TenantStats& t : response.tenants()) {
    const v1::Quota& q = t.quota();
    tenants.AddRow(
        {Cell(t.tenant()), absl::StrCat(t.weight()),
         FormatUsage(t.sessions(), q.max_sessions(), &FormatCount),
         FormatUsage(t.queues(), q.max_queues(), &FormatCount),
         FormatUsage(t.memory_bytes(), q.device_memory_bytes(), &FormatBytes),
         FormatUsage(t.inflight_commands(), q.max_inflight_commands(),
                     &FormatCount),
         FormatUsage(t.staged_bytes(), q.max_staged_bytes(), &FormatBytes),
         absl::StrCat(t.commands_completed()), FormatSeconds(t.busy_seconds()),
         // SMs of its partitions (gpu_sharing SM_PARTITIONS).
         t.sm_count() == 0 ? std::string("-") : absl::StrCat(t.sm_count())});
  }
  Table devices({{"DEVICE", Align::kRight},
                 {"BACKEND"},
                 {"MEMORY", Align::kRight},
                 {"BUSY", Align::kRight},
                 {"SHARING"}});
  for (const v1::DeviceStats& d : response.devices()) {
    devices.AddRow({absl::StrCat(d.device_id()), Cell(d.backend()),
                    FormatUsage(d.memory_used_bytes(), d.memory_total_bytes(),
                                &FormatBytes),
                    FormatSeconds(d.busy_seconds()), Cell(d.sharing())});
  }
  *in.out = absl::StrCat(tenants.Render(), "\n", devices.Render());
  return Verdict::kOk;
}

}  // namespace gpustream::ctl
