// Discovery RPCs and session lookup.
#include "server/session/server_core.h"

#include <set>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/log/log.h"

namespace gpustream::session {

absl::StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(
    std::vector<std::unique_ptr<backend::Device>> devices,
    const std::vector<std::string>& module_folders, ManagerOptions options,
    std::unique_ptr<tenants::TenantRegistry> tenants) {
  auto core = std::unique_ptr<ServerCore>(new ServerCore());
  if (tenants == nullptr) {
    auto none = tenants::TenantRegistry::Create({});
    if (!none.ok()) return none.status();
    tenants = *std::move(none);
  }
  core->tenants_ = std::move(tenants);
  core->sharing_mode_ = options.gpu_sharing;
  std::vector<DeviceSlot> slots;
  const TenantWeights weights = core->Weights();
  for (auto& device : devices) {
    auto registry = modules::ModuleRegistry::Create(*device, module_folders);
    if (!registry.ok()) return registry.status();
    auto sharing =
        DeviceSharing::Create(options.gpu_sharing, device.get(),
                              registry->get(), module_folders, weights);
    if (!sharing.ok()) {
      return absl::Status(sharing.status().code(),
                          absl::StrCat("device ", core->devices_.size(), ": ",
                                       sharing.status().message()));
    }
    slots.push_back({sharing->get()});
    core->registries_.push_back(*std::move(registry));
    core->devices_.push_back(std::move(device));
    core->sharing_.push_back(*std::move(sharing));
  }
  options.share_tickets = &core->share_tickets_;
  core->sessions_ = std::make_unique<SessionManager>(
      std::move(slots), &core->timer_, core->tenants_.get(), options);
  for (uint32_t i = 0; i < core->devices_.size(); ++i) {
    core->devices_[i]->SetFatalErrorHandler(
        [core = core.get(), i](const backend::DeviceFailure& failure) {
          core->OnDeviceFailure(i, nullptr, failure);
        });
    core->sharing_[i]->SetContextFailureHandler(
        [core = core.get(), i](const backend::Device* context,
                               const backend::DeviceFailure& failure) {
          core->OnDeviceFailure(i, context, failure);
        });
  }
  return core;
}

TenantWeights ServerCore::Weights() const {
  TenantWeights weights;
  // Not the local operator's: an administrator's credential should not
  // take a share of the SMs from every tenant.
  for (const auto& tenant : tenants_->All()) {
    weights.emplace_back(tenant->name(), tenant->weight());
  }
  absl::c_sort(weights);  // By name: one order to compare splits by.
  return weights;
}

ServerCore::~ServerCore() {
  for (auto& device : devices_) device->SetFatalErrorHandler(nullptr);
  for (auto& sharing : sharing_) sharing->SetContextFailureHandler(nullptr);
}

std::vector<absl::Status> ServerCore::RefusedModules() const {
  std::vector<absl::Status> out;
  for (const auto& registry : registries_) {
    out.insert(out.end(), registry->refused().begin(),
               registry->refused().end());
  }
  return out;
}

void ServerCore::OnDeviceFailure(uint32_t device_id,
                                 const backend::Device* context,
                                 const backend::DeviceFailure& failure) {
  const absl::Status& cause = failure.cause;
  // On one shared context the device cannot tell whose kernel faulted,
  // only whose kernels were running: with one such session it is that
  // session's; with several, one of theirs.
  const size_t with_kernels = failure.sessions_with_kernels.size();
  std::vector<std::string> running =
      sessions_->DescribeSessions(device_id, failure.sessions_with_kernels);
  if (running.size() < with_kernels) {
    running.push_back(absl::StrCat(with_kernels - running.size(),
                                   " session(s) that ended meanwhile"));
  }
  std::string caused_by =
      with_kernels == 0 ? "unknown (no session had a kernel running)"
      : with_kernels == 1
          ? running.front()
          : absl::StrCat("one of: ", absl::StrJoin(running, ", "));
  if (context != nullptr) {
    // A tenant's own context: only its sessions end; the context is out of
    // service already and goes with its last session.
    log::Error("tenant_context_failed")
        .Num("device", device_id)
        .Status(cause)
        .Num("sessions_with_kernels", with_kernels)
        .Str("caused_by", caused_by)
        .Str("action",
             "aborting the sessions on that tenant context; the other "
             "tenants' run on");
    sessions_->AbortDevice(
        device_id, context,
        absl::AbortedError(absl::StrCat(
            "the tenant's context on device ", device_id, " failed (",
            cause.message(), "); the session was ended, open a new one")),
        [] {});
    return;
  }
  log::Error("device_failed")
      .Num("device", device_id)
      .Status(cause)
      .Num("sessions_with_kernels", with_kernels)
      .Str("caused_by", caused_by)
      .Str("action", devices_[device_id]->info().faults_recoverable
                         ? "aborting its sessions and resetting it"
                         : "aborting its sessions (its context cannot be "
                           "reset in this process)");
  const absl::Status reason = absl::AbortedError(
      absl::StrCat("device ", device_id, " failed (", cause.message(),
                   "); the session was ended, open a new one"));
  sessions_->AbortDevice(device_id, nullptr, reason, [this, device_id] {
    absl::Status recovered = devices_[device_id]->Recover();
    if (recovered.ok()) {
      // The old split belongs to the context that was reset (a session
      // opened before this would split again itself).
      if (absl::Status s = sharing_[device_id]->RefreshIfStale(); !s.ok()) {
        log::Error("sm_partition_failed").Num("device", device_id).Status(s);
      }
      log::Info("device_recovered").Num("device", device_id);
    } else {
      log::Error("device_unrecoverable")
          .Num("device", device_id)
          .Status(recovered)
          .Str("action",
               on_device_lost_ ? "stopping the daemon" : "keeping it failed");
      if (on_device_lost_) on_device_lost_(device_id, recovered);
    }
  });
}

absl::Status ServerCore::GetVersion(const v1::GetVersionRequest& req,
                                    v1::GetVersionResponse* resp) {
  // An unset max means "any"; an unset min means 1.
  const uint32_t min = std::max(req.min_version(), 1u);
  const uint32_t max = req.max_version() == 0 ? UINT32_MAX : req.max_version();
  if (min > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_version ", min, " is greater than max_version ", max));
  }
  if (max < kMinProtocolVersion || min > kMaxProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("no common protocol version: client supports [", min, ", ",
                     req.max_version(), "], server supports [",
                     kMinProtocolVersion, ", ", kMaxProtocolVersion, "]"));
  }
  resp->set_version(std::min(max, kMaxProtocolVersion));
  return absl::OkStatus();
}

absl::Status ServerCore::GetServerInfo(const v1::GetServerInfoRequest&,
                                       v1::GetServerInfoResponse* resp) {
  resp->set_server_version(kServerVersion);
  resp->set_protocol_version(kMaxProtocolVersion);
  std::set<std::string> backends;
  for (const auto& d : devices_) backends.insert(d->info().backend);
  for (const auto& b : backends) resp->add_backends(b);
  for (const char* f : {"submit_stream", "client_minted_ids", "wait_value",
                        "host_func", "event_timing", "notifications",
                        "notification_resume", "health", "reflection"}) {
    resp->add_features(f);
  }
  if (std::string share = share_tickets_.socket_path(); !share.empty()) {
    resp->add_features("host_shared");
    resp->set_share_socket(std::move(share));
  }
  return absl::OkStatus();
}

absl::Status ServerCore::ListDevices(const v1::ListDevicesRequest&,
                                     v1::ListDevicesResponse* resp) {
  for (size_t i = 0; i < devices_.size(); ++i) {
    const backend::DeviceInfo& info = devices_[i]->info();
    const backend::MemoryInfo memory = devices_[i]->memory();
    v1::Device* d = resp->add_devices();
    d->set_id(i);
    d->set_backend(info.backend);
    d->set_name(info.name);
    d->set_total_memory_bytes(memory.total_bytes);
    d->set_free_memory_bytes(memory.free_bytes);
    d->set_arch(info.arch);
    d->set_multiprocessor_count(info.multiprocessor_count);
    d->set_priority_least(info.priority_least);
    d->set_priority_greatest(info.priority_greatest);
    d->set_supports_wait_value(info.supports_wait_value);
    d->set_supports_host_func(info.supports_host_func);
    d->set_supports_timing(info.supports_timing);
    for (auto [dim, src] :
         {std::pair{d->mutable_max_grid(), info.max_grid},
          std::pair{d->mutable_max_block(), info.max_block}}) {
      dim->set_x(src.x);
      dim->set_y(src.y);
      dim->set_z(src.z);
    }
    d->set_max_threads_per_block(info.max_threads_per_block);
    d->set_max_shared_memory_bytes(info.max_shared_memory_bytes);
    d->set_wait_value_mode(info.supports_wait_value && info.native_wait_value
                               ? "native"
                               : "daemon");
    d->set_faults_recoverable(info.faults_recoverable);
    d->set_max_cluster_size(info.max_cluster_size);
    d->set_supports_cooperative_launch(info.supports_cooperative_launch);
    d->set_supports_graphs(info.supports_graphs);
  }
  return absl::OkStatus();
}

absl::Status ServerCore::ListModules(const v1::ListModulesRequest&,
                                     v1::ListModulesResponse* resp) {
  // Devices of one backend load the same modules: list each backend once.
  std::set<std::string> seen_backends;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const std::string& backend = devices_[i]->info().backend;
    if (!seen_backends.insert(backend).second) continue;
    for (const backend::ModuleInfo* info : registries_[i]->List()) {
      v1::Module* m = resp->add_modules();
      m->set_name(info->name);
      m->set_backend(backend);
      for (const auto& sig : info->kernels) {
        v1::Kernel* k = m->add_kernels();
        k->set_name(sig.name);
        for (backend::ParamKind p : sig.params) {
          k->add_params(static_cast<v1::ParamKind>(p));
        }
        for (const backend::ParamLayout& l : sig.layout) {
          v1::ParamLayout* out = k->add_layout();
          out->set_size_bytes(l.size);
          out->set_offset_bytes(l.offset);
        }
        k->set_max_threads_per_block(sig.limits.max_threads_per_block);
        k->set_static_shared_memory_bytes(
            sig.limits.static_shared_memory_bytes);
        k->set_max_dynamic_shared_memory_bytes(
            sig.limits.max_dynamic_shared_memory_bytes);
        k->set_checked(sig.checked());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ServerCore::OpenSession(const Principal& who,
                                     const v1::OpenSessionRequest& req,
                                     v1::OpenSessionResponse* resp) {
  if (shutting_down()) return absl::UnavailableError("daemon shutting down");
  return sessions_->Open(who, req, resp);
}

void ServerCore::CloseSession(const Principal& who,
                              const v1::CloseSessionRequest& req,
                              v1::CloseSessionResponse*, Session::Done done) {
  sessions_->Close(who.name(), req.session_id(), std::move(done));
}

absl::Status ServerCore::KeepAlive(const Principal& who,
                                   const v1::KeepAliveRequest& req,
                                   v1::KeepAliveResponse* resp) {
  return sessions_->KeepAlive(who.name(), req, resp);
}

absl::Status ServerCore::ReloadTenants(const v1::ServerConfig& config) {
  // New weights or tenants get a new split first (SM_PARTITIONS): a config
  // whose tenants do not fit the SMs is refused, as it is at start, and the
  // old tenants and split stay. The split is served only once the tenants
  // are reloaded.
  TenantWeights after;
  for (const v1::Tenant& t : config.tenants()) {
    after.emplace_back(t.name(), std::max<uint32_t>(t.weight(), 1));
  }
  if (after.empty()) after.emplace_back("default", 1);
  absl::c_sort(after);
  std::vector<DeviceSharing::PendingSplit> splits;
  for (size_t i = 0; i < sharing_.size(); ++i) {
    auto split = sharing_[i]->PrepareSplit(after);
    if (!split.ok()) {
      return absl::Status(split.status().code(),
                          absl::StrCat("gpu_sharing SM_PARTITIONS: device ", i,
                                       ": ", split.status().message()));
    }
    splits.push_back(*std::move(split));
  }
  auto removed = tenants_->Reload(config);
  if (!removed.ok()) return removed.status();
  for (size_t i = 0; i < sharing_.size(); ++i) {
    sharing_[i]->CommitSplit(std::move(splits[i]));
  }
  for (const std::string& tenant : *removed) sessions_->EndTenant(tenant);
  if (config.gpu_sharing() != sharing_mode_) {
    log::Warning("gpu_sharing_unchanged")
        .Str("meaning",
             "gpu_sharing is read at start only: restart the daemon to "
             "change it");
  }
  log::Info("tenants_reloaded")
      .Num("tenants", tenants_->All().size())
      .Num("removed", removed->size());
  return absl::OkStatus();
}

// The admin check, with a log line for every refusal: an operator wants to
// see who probed the Admin service.
absl::Status ServerCore::RequireAdmin(const Principal& who,
                                      absl::string_view action) const {
  absl::Status allowed = tenants_->RequireAdmin(who, action);
  if (!allowed.ok()) {
    log::Warning("admin_denied")
        .Str("tenant", who.name())
        .Str("action", action);
  }
  return allowed;
}

absl::Status ServerCore::ListSessions(const Principal& who,
                                      const v1::ListSessionsRequest&,
                                      v1::ListSessionsResponse* resp) {
  if (auto s = RequireAdmin(who, "ListSessions"); !s.ok()) return s;
  log::Info("admin_list_sessions").Str("tenant", who.name());
  sessions_->List(resp);
  return absl::OkStatus();
}

absl::Status ServerCore::KillSession(const Principal& who,
                                     const v1::KillSessionRequest& req,
                                     v1::KillSessionResponse*) {
  if (auto s = RequireAdmin(who, "KillSession"); !s.ok()) return s;
  absl::Status killed = sessions_->Kill(req.public_id(), who.name());
  log::Event(killed.ok() ? log::Level::kInfo : log::Level::kWarning,
             "admin_kill_session")
      .Str("tenant", who.name())
      // What the admin typed: the secret id, by mistake, is masked too.
      .Str("session", log::Redact(req.public_id()))
      .CallStatus(killed);
  return killed;
}

absl::Status ServerCore::GetStats(const Principal& who,
                                  const v1::GetStatsRequest&,
                                  v1::GetStatsResponse* resp) {
  if (auto s = RequireAdmin(who, "GetStats"); !s.ok()) return s;
  log::Info("admin_get_stats").Str("tenant", who.name());
  Stats(resp);
  return absl::OkStatus();
}

void ServerCore::Stats(v1::GetStatsResponse* resp) const {
  auto tenants = tenants_->All();
  if (auto local_operator = tenants_->Operator(); local_operator != nullptr) {
    tenants.push_back(std::move(local_operator));
  }
  for (const auto& tenant : tenants) {
    v1::TenantStats* t = resp->add_tenants();
    tenant->Describe(t);
    uint32_t sms = 0;
    for (const auto& sharing : sharing_) sms += sharing->SmCount(t->tenant());
    t->set_sm_count(sms);
  }
  for (uint32_t i = 0; i < devices_.size(); ++i) {
    const backend::MemoryInfo memory = devices_[i]->memory();
    v1::DeviceStats* d = resp->add_devices();
    d->set_device_id(i);
    d->set_backend(devices_[i]->info().backend);
    d->set_memory_total_bytes(memory.total_bytes);
    d->set_memory_used_bytes(memory.total_bytes - memory.free_bytes);
    uint64_t busy_ns = 0;
    for (const auto& tenant : tenants) busy_ns += tenant->busy_ns(i);
    d->set_busy_seconds(static_cast<double>(busy_ns) / 1e9);
    d->set_sharing(sharing_[i]->sharing());
    d->set_tenant_contexts(sharing_[i]->TenantContexts());
  }
}

absl::StatusOr<std::shared_ptr<Session>> ServerCore::FindSession(
    const Principal& who, const std::string& session_id) {
  if (shutting_down()) return absl::UnavailableError("daemon shutting down");
  return sessions_->Find(who.name(), session_id);
}

}  // namespace gpustream::session
