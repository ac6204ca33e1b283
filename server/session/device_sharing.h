// How tenants share one device (ServerConfig.gpu_sharing): where a
// tenant's sessions run — the device's shared context, a context of the
// tenant's own, or the shared context on the tenant's SM partition.
#ifndef GPUSTREAM_SERVER_SESSION_DEVICE_SHARING_H_
#define GPUSTREAM_SERVER_SESSION_DEVICE_SHARING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/server_config.pb.h"
#include "server/backend/device.h"
#include "server/modules/module_registry.h"
#include "server/util/serial_executor.h"

namespace gpustream::session {

// Where one session runs. Copyable; `hold` keeps a tenant context (and its
// modules) alive for as long as any copy lives: the session keeps one
// until it is destroyed, after its objects.
struct Placement {
  backend::Device* device = nullptr;
  const modules::ModuleRegistry* modules = nullptr;
  // GPU_SHARING_SM_PARTITIONS: the tenant's SMs, for every queue.
  std::shared_ptr<backend::SmPartition> partition;
  std::shared_ptr<const void> hold;
};

// A tenant's name and weight, as partitions are sized.
using TenantWeights = std::vector<std::pair<std::string, uint32_t>>;

// One device's sharing. Thread-safe.
class DeviceSharing {
 public:
  // A tenant context failed (on one of its backend threads): end the
  // sessions placed on `context` (Placement::device). The context is out
  // of service already: new sessions of the tenant get a new one.
  using ContextFailureHandler = std::function<void(
      const backend::Device* context, const backend::DeviceFailure& failure)>;

  // `device` and `modules` (the shared context's) outlive this object.
  // The mode is refused, with the reason (FAILED_PRECONDITION or
  // UNIMPLEMENTED), where the device cannot serve it: a GPU without SM
  // partitions, too few of them for `weights`, a vendor without contexts
  // of their own. The CPU backend serves every mode as its weighted fair
  // queuing (sharing() says so).
  static absl::StatusOr<std::unique_ptr<DeviceSharing>> Create(
      v1::GpuSharing mode, backend::Device* device,
      const modules::ModuleRegistry* modules,
      std::vector<std::string> module_folders, const TenantWeights& weights);
  // Releases the tenant contexts left (after every session ended).
  ~DeviceSharing();

  // Runs for each tenant context that fails. Replacing it (null: the owner
  // going away) waits for a call in progress and stops later ones.
  void SetContextFailureHandler(ContextFailureHandler handler);

  // Where a new session of `tenant` runs: for CONTEXT_PER_TENANT its
  // context (made on its first session, loading the modules again; a
  // failed one is never handed out), or the error that kept it from being
  // made (INTERNAL naming the tenant when its modules do not load);
  // SM_PARTITIONS: the tenant's partition, split again first if the
  // device was reset since (UNAVAILABLE while that fails),
  // FAILED_PRECONDITION naming the tenant if the split has none for it
  // (the local operator).
  absl::StatusOr<Placement> Place(const std::string& tenant);

  // SM_PARTITIONS, a SIGHUP's new weights in two steps, so that a reload
  // refused elsewhere changes nothing: PrepareSplit makes the partitions
  // (FAILED_PRECONDITION when the tenants do not fit the device's groups:
  // refuse the reload; any other failure, a device failed or resetting,
  // defers the split to the next session), CommitSplit serves them to
  // sessions opened from then on (open ones keep theirs). Both do nothing
  // in the other modes, and nothing when the weights are those served.
  struct PendingSplit {
    bool changed = false;
    TenantWeights weights;
    // Empty when the split is deferred.
    absl::flat_hash_map<std::string, std::shared_ptr<backend::SmPartition>>
        partitions;
  };
  absl::StatusOr<PendingSplit> PrepareSplit(const TenantWeights& weights);
  void CommitSplit(PendingSplit split);
  // SM_PARTITIONS: splits again, for the weights served, if the device was
  // reset or failed since the split (or a split was deferred). Serialized
  // with CommitSplit: it never serves older weights after newer ones.
  absl::Status RefreshIfStale();

  // For GetStats: "shared_context", "context_per_tenant", "sm_partitions"
  // or "weighted_fair_queuing"; the tenant's SMs (0 without partitions);
  // the tenant contexts alive.
  const std::string& sharing() const { return sharing_; }
  uint32_t SmCount(const std::string& tenant);
  uint32_t TenantContexts();

 private:
  struct TenantContext;

  DeviceSharing(v1::GpuSharing mode, backend::Device* device,
                const modules::ModuleRegistry* modules,
                std::vector<std::string> module_folders);
  // Splits the SMs for `weights` (SM_PARTITIONS).
  absl::StatusOr<
      absl::flat_hash_map<std::string, std::shared_ptr<backend::SmPartition>>>
  Split(const TenantWeights& weights);
  // Place() under SM_PARTITIONS.
  absl::StatusOr<Placement> PlaceOnPartition(const std::string& tenant);
  // A new context of `tenant`'s, its modules loaded.
  absl::StatusOr<std::shared_ptr<TenantContext>> NewContext(
      const std::string& tenant);
  void OnContextFailure(TenantContext* context,
                        const backend::DeviceFailure& failure);

  // What the device serves: `mode`, or on a backend without contexts and
  // partitions (the CPU backend) the shared context.
  const v1::GpuSharing mode_;
  const std::string sharing_;
  backend::Device* const device_;
  const modules::ModuleRegistry* const modules_;
  const std::vector<std::string> module_folders_;

  // Held while the failure handler runs (see SetContextFailureHandler).
  absl::Mutex handler_mu_;
  ContextFailureHandler on_failure_ ABSL_GUARDED_BY(handler_mu_);
  // Serializes making tenant contexts (one at a time: a tenant's racing
  // first sessions share one) and splits.
  absl::Mutex create_mu_;
  absl::Mutex split_mu_;
  TenantWeights split_weights_ ABSL_GUARDED_BY(split_mu_);

  absl::Mutex mu_;
  // CONTEXT_PER_TENANT: each tenant's live context (a failed one is
  // removed at once; its sessions hold it until they end).
  absl::flat_hash_map<std::string, std::weak_ptr<TenantContext>> contexts_
      ABSL_GUARDED_BY(mu_);
  // SM_PARTITIONS: each tenant's partition in the current split.
  absl::flat_hash_map<std::string, std::shared_ptr<backend::SmPartition>>
      partitions_ ABSL_GUARDED_BY(mu_);
  // Destroys tenant contexts, never on a thread of their own (their
  // fatal-error handler, a queue callback) nor under a caller's lock. Last:
  // destroyed first, running what is posted.
  util::SerialExecutor reaper_;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_DEVICE_SHARING_H_
