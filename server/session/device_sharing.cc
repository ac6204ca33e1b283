// Placing sessions on a device's shared context, a tenant's own context or
// a tenant's SM partition.
#include "server/session/device_sharing.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log/log.h"

namespace gpustream::session {
namespace {

bool OnCpu(const backend::Device& device) {
  return device.info().backend == "cpu";
}

std::string SharingName(v1::GpuSharing mode, const backend::Device& device) {
  if (OnCpu(device)) return "weighted_fair_queuing";
  switch (mode) {
    case v1::GPU_SHARING_CONTEXT_PER_TENANT:
      return "context_per_tenant";
    case v1::GPU_SHARING_SM_PARTITIONS:
      return "sm_partitions";
    default:
      return "shared_context";
  }
}

std::vector<uint32_t> Weights(const TenantWeights& weights) {
  std::vector<uint32_t> out;
  for (const auto& [name, weight] : weights) out.push_back(weight);
  return out;
}

}  // namespace

// A tenant's context and the modules loaded into it. The modules go
// first (they unload from the context).
struct DeviceSharing::TenantContext {
  std::string tenant;
  std::unique_ptr<backend::Device> device;
  std::unique_ptr<modules::ModuleRegistry> modules;
};

DeviceSharing::DeviceSharing(v1::GpuSharing mode, backend::Device* device,
                             const modules::ModuleRegistry* modules,
                             std::vector<std::string> module_folders)
    : mode_(OnCpu(*device) ? v1::GPU_SHARING_SHARED_CONTEXT : mode),
      sharing_(SharingName(mode, *device)),
      device_(device),
      modules_(modules),
      module_folders_(std::move(module_folders)) {}

absl::StatusOr<std::unique_ptr<DeviceSharing>> DeviceSharing::Create(
    v1::GpuSharing mode, backend::Device* device,
    const modules::ModuleRegistry* modules,
    std::vector<std::string> module_folders, const TenantWeights& weights) {
  auto sharing = std::unique_ptr<DeviceSharing>(
      new DeviceSharing(mode, device, modules, std::move(module_folders)));
  switch (sharing->mode_) {
    case v1::GPU_SHARING_CONTEXT_PER_TENANT: {
      // Proves that the vendor has such contexts (HIP does not) before
      // serving: a refusal at the first session would come too late.
      absl::StatusOr<std::unique_ptr<backend::Device>> probe =
          device->CreateContext();
      if (!probe.ok()) {
        return absl::Status(probe.status().code(),
                            absl::StrCat("gpu_sharing CONTEXT_PER_TENANT: ",
                                         probe.status().message()));
      }
      break;
    }
    case v1::GPU_SHARING_SM_PARTITIONS:
      if (absl::Status s = sharing->Repartition(weights); !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("gpu_sharing SM_PARTITIONS: ", s.message()));
      }
      break;
    default:
      break;
  }
  return sharing;
}

DeviceSharing::~DeviceSharing() {
  absl::MutexLock lock(&mu_);
  partitions_.clear();
}

void DeviceSharing::SetContextFailureHandler(ContextFailureHandler handler) {
  absl::MutexLock lock(&mu_);
  on_failure_ = std::move(handler);
}

absl::StatusOr<Placement> DeviceSharing::Place(const std::string& tenant) {
  Placement placement{device_, modules_, nullptr, nullptr};
  switch (mode_) {
    case v1::GPU_SHARING_SM_PARTITIONS: {
      absl::MutexLock lock(&mu_);
      auto it = partitions_.find(tenant);
      if (it == partitions_.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tenant '", tenant,
            "' has no SM partition on this device: under gpu_sharing "
            "SM_PARTITIONS only configured tenants get SMs (not the local "
            "operator), and a split that failed keeps the previous one (see "
            "the daemon's log)"));
      }
      placement.partition = it->second;
      return placement;
    }
    case v1::GPU_SHARING_CONTEXT_PER_TENANT:
      break;
    default:
      return placement;
  }
  std::shared_ptr<TenantContext> context;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = contexts_.find(tenant); it != contexts_.end()) {
      context = it->second.lock();
    }
  }
  if (context == nullptr) {
    // Made outside the lock (it loads modules); two first sessions racing
    // may both make one: the first registered wins, the other is dropped.
    absl::StatusOr<std::shared_ptr<TenantContext>> made = NewContext(tenant);
    if (!made.ok()) return made.status();
    absl::MutexLock lock(&mu_);
    std::weak_ptr<TenantContext>& slot = contexts_[tenant];
    context = slot.lock();
    if (context == nullptr) {
      context = *std::move(made);
      slot = context;
      log::Info("tenant_context_created").Str("tenant", tenant);
    }
  }
  placement.device = context->device.get();
  placement.modules = context->modules.get();
  placement.hold = std::move(context);
  return placement;
}

absl::StatusOr<std::shared_ptr<DeviceSharing::TenantContext>>
DeviceSharing::NewContext(const std::string& tenant) {
  absl::StatusOr<std::unique_ptr<backend::Device>> device =
      device_->CreateContext();
  if (!device.ok()) {
    return absl::Status(
        device.status().code(),
        absl::StrCat("cannot create tenant '", tenant,
                     "''s context: ", device.status().message()));
  }
  auto* raw = new TenantContext{tenant, *std::move(device), nullptr};
  // Destroyed on the reaper, after the releases its sessions posted.
  std::shared_ptr<TenantContext> context(raw, [this](TenantContext* c) {
    reaper_.Post([c] {
      c->device->SetFatalErrorHandler(nullptr);
      c->modules.reset();
      c->device->FlushCleanup();
      log::Info("tenant_context_released").Str("tenant", c->tenant);
      delete c;
    });
  });
  raw->device->SetFatalErrorHandler(
      [this, raw](const backend::DeviceFailure& failure) {
        OnContextFailure(raw, failure);
      });
  absl::StatusOr<std::unique_ptr<modules::ModuleRegistry>> loaded =
      modules::ModuleRegistry::Create(*raw->device, module_folders_);
  if (!loaded.ok()) return loaded.status();
  raw->modules = *std::move(loaded);
  return context;
}

void DeviceSharing::OnContextFailure(TenantContext* context,
                                     const backend::DeviceFailure& failure) {
  ContextFailureHandler handler;
  {
    absl::MutexLock lock(&mu_);
    // Out of service: the tenant's next session gets a new context.
    if (auto it = contexts_.find(context->tenant); it != contexts_.end()) {
      std::shared_ptr<TenantContext> live = it->second.lock();
      if (live == nullptr || live.get() == context) contexts_.erase(it);
    }
    handler = on_failure_;
  }
  log::Warning("tenant_context_failed")
      .Str("tenant", context->tenant)
      .Status(failure.cause);
  if (handler) handler(context->device.get(), failure);
}

absl::Status DeviceSharing::Repartition(const TenantWeights& weights) {
  if (mode_ != v1::GPU_SHARING_SM_PARTITIONS) return absl::OkStatus();
  absl::StatusOr<std::vector<std::shared_ptr<backend::SmPartition>>> split =
      device_->PartitionSms(Weights(weights));
  if (!split.ok()) return split.status();
  absl::flat_hash_map<std::string, std::shared_ptr<backend::SmPartition>>
      partitions;
  for (size_t i = 0; i < weights.size(); ++i) {
    log::Info("sm_partition")
        .Str("tenant", weights[i].first)
        .Num("weight", weights[i].second)
        .Num("sms", (*split)[i]->sm_count());
    partitions.emplace(weights[i].first, (*split)[i]);
  }
  absl::MutexLock lock(&mu_);
  partitions_.swap(partitions);
  return absl::OkStatus();
}

uint32_t DeviceSharing::SmCount(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = partitions_.find(tenant);
  return it == partitions_.end() ? 0 : it->second->sm_count();
}

uint32_t DeviceSharing::TenantContexts() {
  absl::MutexLock lock(&mu_);
  uint32_t live = 0;
  for (const auto& [tenant, weak] : contexts_) live += weak.expired() ? 0 : 1;
  return live;
}

}  // namespace gpustream::session
