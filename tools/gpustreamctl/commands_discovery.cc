// The commands any caller may run: version, health, devices, modules.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "server/version.h"
#include "tools/gpustreamctl/commands.h"
#include "tools/gpustreamctl/format.h"
#include "tools/gpustreamctl/json_output.h"
#include "tools/gpustreamctl/table.h"

namespace gpustream::ctl {
namespace {

using Align = Table::Align;
using HealthResponse = grpc::health::v1::HealthCheckResponse;

// gpustreamctl is built from the same tree as gpustreamd and carries its
// version.
constexpr const char* kCtlVersion = gpustream::kServerVersion;

// A parameter kind the way a kernel signature reads: "f32", "buffer";
// "bytes(16)" with the size the layout gives; "kind(N)" for a value this
// build does not know (a newer daemon).
std::string ParamName(int kind, const v1::Kernel& kernel, int index) {
  std::string name;
  if (v1::ParamKind_IsValid(kind)) {
    name = absl::AsciiStrToLower(absl::StripPrefix(
        v1::ParamKind_Name(static_cast<v1::ParamKind>(kind)), "PARAM_KIND_"));
  } else {
    name = absl::StrCat("kind(", kind, ")");
  }
  if (kind == v1::PARAM_KIND_BYTES && index < kernel.layout_size() &&
      kernel.layout(index).size_bytes() > 0) {
    absl::StrAppend(&name, "(", kernel.layout(index).size_bytes(), ")");
  }
  return name;
}

}  // namespace

absl::StatusOr<Verdict> RunVersion(const Invocation& in) {
  const Connection& c = in.connection;
  v1::GetVersionRequest request;
  request.set_min_version(client::Client::kMinVersion);
  request.set_max_version(client::Client::kMaxVersion);
  v1::GetVersionResponse negotiated;
  grpc::Status s =
      c.gpustream().GetVersion(c.NewContext().get(), request, &negotiated);
  if (!s.ok()) return FromGrpc(s);
  v1::GetServerInfoResponse info;
  s = c.gpustream().GetServerInfo(c.NewContext().get(), {}, &info);
  if (!s.ok()) return FromGrpc(s);

  if (c.options().json) {
    absl::StatusOr<std::string> server = ToJson(info);
    if (!server.ok()) return server.status();
    return EmitJson(
        absl::StrCat("{\"client\":{\"name\":\"gpustreamctl\",\"version\":",
                     JsonQuote(kCtlVersion),
                     ",\"minProtocolVersion\":", client::Client::kMinVersion,
                     ",\"maxProtocolVersion\":", client::Client::kMaxVersion,
                     "},\"server\":", *server,
                     ",\"negotiatedProtocolVersion\":", negotiated.version(),
                     "}"),
        in.out);
  }
  Table table({{"COMPONENT"}, {"VERSION"}, {"PROTOCOL"}});
  table.AddRow({"gpustreamctl", kCtlVersion,
                absl::StrCat(client::Client::kMinVersion, "..",
                             client::Client::kMaxVersion)});
  table.AddRow({"gpustreamd", Cell(info.server_version()),
                absl::StrCat(info.protocol_version())});
  *in.out = absl::StrCat(
      table.Render(), "\nnegotiated protocol: ", negotiated.version(),
      "\nbackends: ", Cell(absl::StrJoin(info.backends(), ",")),
      "\nfeatures: ", Cell(absl::StrJoin(info.features(), ",")), "\n");
  return Verdict::kOk;
}

absl::StatusOr<Verdict> RunHealth(const Invocation& in) {
  const Connection& c = in.connection;
  // The empty service name asks about the server as a whole.
  grpc::health::v1::HealthCheckRequest request;
  HealthResponse response;
  grpc::Status s = c.health().Check(c.NewContext().get(), request, &response);
  if (!s.ok()) return FromGrpc(s);
  if (c.options().json) {
    absl::StatusOr<Verdict> emitted = EmitJson(ToJson(response), in.out);
    if (!emitted.ok()) return emitted;
  } else {
    std::string name = HealthResponse::ServingStatus_Name(response.status());
    if (name.empty()) name = absl::StrCat("STATUS_", response.status());
    *in.out = name + "\n";
  }
  return response.status() == HealthResponse::SERVING ? Verdict::kOk
                                                      : Verdict::kNotServing;
}

absl::StatusOr<Verdict> RunDevices(const Invocation& in) {
  const Connection& c = in.connection;
  v1::ListDevicesResponse response;
  grpc::Status s =
      c.gpustream().ListDevices(c.NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  std::sort(
      response.mutable_devices()->begin(), response.mutable_devices()->end(),
      [](const v1::Device& a, const v1::Device& b) { return a.id() < b.id(); });
  if (c.options().json) return EmitJson(ToJson(response), in.out);
  Table table({{"ID", Align::kRight},
               {"BACKEND"},
               {"NAME"},
               {"ARCH"},
               {"UNITS", Align::kRight},
               {"FREE", Align::kRight},
               {"TOTAL", Align::kRight},
               {"PRIORITIES", Align::kRight},
               {"WAIT_VALUE"}});
  for (const v1::Device& d : response.devices()) {
    table.AddRow({absl::StrCat(d.id()), Cell(d.backend()), Cell(d.name()),
                  Cell(d.arch()), absl::StrCat(d.multiprocessor_count()),
                  FormatBytes(d.free_memory_bytes()),
                  FormatBytes(d.total_memory_bytes()),
                  absl::StrCat(d.priority_greatest(), "..", d.priority_least()),
                  Cell(d.wait_value_mode())});
  }
  *in.out = table.Render();
  return Verdict::kOk;
}

absl::StatusOr<Verdict> RunModules(const Invocation& in) {
  const Connection& c = in.connection;
  v1::ListModulesResponse response;
  grpc::Status s =
      c.gpustream().ListModules(c.NewContext().get(), {}, &response);
  if (!s.ok()) return FromGrpc(s);
  if (c.options().json) return EmitJson(ToJson(response), in.out);
  Table table({{"MODULE"},
               {"BACKEND"},
               {"KERNEL"},
               {"MAX_THREADS", Align::kRight},
               {"CHECKED"},
               {"PARAMS"}});
  for (const v1::Module& m : response.modules()) {
    for (const v1::Kernel& k : m.kernels()) {
      std::vector<std::string> params;
      for (int i = 0; i < k.params_size(); ++i) {
        params.push_back(ParamName(k.params(i), k, i));
      }
      table.AddRow({Cell(m.name()), Cell(m.backend()), Cell(k.name()),
                    k.max_threads_per_block() == 0
                        ? "-"
                        : absl::StrCat(k.max_threads_per_block()),
                    // Unchecked: a BUFFER param declares no extent.
                    k.checked() ? "yes" : "NO",
                    Cell(absl::StrJoin(params, ","))});
    }
  }
  *in.out = table.Render();
  return Verdict::kOk;
}

}  // namespace gpustream::ctl
