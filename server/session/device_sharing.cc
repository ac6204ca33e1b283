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
    case v1::GPU_SHARING_SM_PARTITIONS: {
      auto made = sharing->Split(weights);
      if (!made.ok()) {
        return absl::Status(made.status().code(),
                            absl::StrCat("gpu_sharing SM_PARTITIONS: ",
                                         made.status().message()));
      }
      absl::MutexLock split(&sharing->split_mu_);
      sharing->split_weights_ = weights;
      absl::MutexLock lock(&sharing->mu_);
      sharing->partitions_ = *std::move(made);
      break;
    }
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
  absl::MutexLock lock(&handler_mu_);
  on_failure_ = std::move(handler);
}

absl::StatusOr<Placement> DeviceSharing::Place(const std::string& tenant) {
  Placement placement{device_, modules_, nullptr, nullptr};
  switch (mode_) {
    case v1::GPU_SHARING_SM_PARTITIONS:
      return PlaceOnPartition(tenant);
    case v1::GPU_SHARING_CONTEXT_PER_TENANT:
      break;
    default:
      return placement;
  }
  auto live = [&]() -> std::shared_ptr<TenantContext> {
    absl::MutexLock lock(&mu_);
    auto it = contexts_.find(tenant);
    if (it == contexts_.end()) return nullptr;
    std::shared_ptr<TenantContext> context = it->second.lock();
    // A failed context is out of service even before its failure handler
    // ran (its queues may report the failure first).
    if (context == nullptr || context->device->failed()) return nullptr;
    return context;
  };
  std::shared_ptr<TenantContext> context = live();
  if (context == nullptr) {
    // Made outside mu_ (it loads modules), one at a time: a tenant's racing
    // first sessions get the same context.
    absl::MutexLock create(&create_mu_);
    context = live();
    if (context == nullptr) {
      absl::StatusOr<std::shared_ptr<TenantContext>> made = NewContext(tenant);
      if (!made.ok()) return made.status();
      context = *std::move(made);
      absl::MutexLock lock(&mu_);
      contexts_[tenant] = context;
      log::Info("tenant_context_created").Str("tenant", tenant);
    }
  }
  placement.device = context->device.get();
  placement.modules = context->modules.get();
  placement.hold = std::move(context);
  return placement;
}

absl::StatusOr<Placement> DeviceSharing::PlaceOnPartition(
    const std::string& tenant) {
  Placement placement{device_, modules_, nullptr, nullptr};
  // The device was reset or failed since the split: split again (for the
  // weights served) before handing out a partition.
  if (absl::Status s = RefreshIfStale(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the SM partitions of this device are being made again (after a "
        "reset) and could not be yet: ",
        s.message()));
  }
  absl::MutexLock lock(&mu_);
  auto it = partitions_.find(tenant);
  if (it == partitions_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tenant '", tenant,
        "' has no SM partition on this device: under gpu_sharing "
        "SM_PARTITIONS only configured tenants get SMs (not the local "
        "operator)"));
  }
  placement.partition = it->second;
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
  if (!loaded.ok()) {
    // The folders were readable at start; the reason (a server path) goes
    // to the log, not to the client.
    log::Error("tenant_context_modules_failed")
        .Str("tenant", tenant)
        .Status(loaded.status());
    return absl::InternalError(
        absl::StrCat("cannot load the modules into tenant '", tenant,
                     "''s context (the daemon's log says why)"));
  }
  for (const absl::Status& refused : (*loaded)->refused()) {
    log::Error("module_refused").Str("tenant", tenant).Status(refused);
  }
  raw->modules = *std::move(loaded);
  return context;
}

void DeviceSharing::OnContextFailure(TenantContext* context,
                                     const backend::DeviceFailure& failure) {
  {
    absl::MutexLock lock(&mu_);
    // Out of service: the tenant's next session gets a new context.
    if (auto it = contexts_.find(context->tenant); it != contexts_.end()) {
      std::shared_ptr<TenantContext> live = it->second.lock();
      if (live == nullptr || live.get() == context) contexts_.erase(it);
    }
  }
  log::Warning("tenant_context_failed")
      .Str("tenant", context->tenant)
      .Status(failure.cause);
  absl::MutexLock lock(&handler_mu_);
  if (on_failure_) on_failure_(context->device.get(), failure);
}

absl::StatusOr<
    absl::flat_hash_map<std::string, std::shared_ptr<backend::SmPartition>>>
DeviceSharing::Split(const TenantWeights& weights) {
  absl::StatusOr<std::vector<std::shared_ptr<backend::SmPartition>>> made =
      device_->PartitionSms(Weights(weights));
  if (!made.ok()) return made.status();
  absl::flat_hash_map<std::string, std::shared_ptr<backend::SmPartition>>
      partitions;
  for (size_t i = 0; i < weights.size(); ++i) {
    log::Info("sm_partition")
        .Str("tenant", weights[i].first)
        .Num("weight", weights[i].second)
        .Num("sms", (*made)[i]->sm_count());
    partitions.emplace(weights[i].first, (*made)[i]);
  }
  return partitions;
}

absl::StatusOr<DeviceSharing::PendingSplit> DeviceSharing::PrepareSplit(
    const TenantWeights& weights) {
  PendingSplit split{false, weights, {}};
  if (mode_ != v1::GPU_SHARING_SM_PARTITIONS) return split;
  {
    absl::MutexLock lock(&split_mu_);
    if (weights == split_weights_) return split;
  }
  split.changed = true;
  auto made = Split(weights);
  if (made.ok()) {
    split.partitions = *std::move(made);
  } else if (made.status().code() == absl::StatusCode::kFailedPrecondition) {
    return made.status();  // The tenants do not fit.
  }
  // Else the device failed or is resetting: the next session splits.
  return split;
}

void DeviceSharing::CommitSplit(PendingSplit split) {
  if (!split.changed) return;
  absl::MutexLock lock(&split_mu_);
  split_weights_ = std::move(split.weights);
  absl::MutexLock swap(&mu_);
  // Empty (deferred): RefreshIfStale splits on the next session.
  partitions_.swap(split.partitions);
}

absl::Status DeviceSharing::RefreshIfStale() {
  if (mode_ != v1::GPU_SHARING_SM_PARTITIONS) return absl::OkStatus();
  absl::MutexLock split(&split_mu_);
  {
    absl::MutexLock lock(&mu_);
    bool valid = !partitions_.empty();
    for (const auto& [tenant, partition] : partitions_) {
      valid = valid && partition->valid();
    }
    if (valid) return absl::OkStatus();
  }
  auto made = Split(split_weights_);
  if (!made.ok()) return made.status();
  absl::MutexLock lock(&mu_);
  partitions_.swap(*made);
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
