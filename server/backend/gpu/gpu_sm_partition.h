// SM partitions of a GPU device (green contexts), sized by weight.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_SM_PARTITION_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_SM_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_driver.h"

namespace gpustream::backend {

class GpuDevice;

// How many of `available` equal groups of SMs each weight gets: its exact
// share rounded down, at least one. Groups left over stay idle, so that
// the shares hold as weighted (2:1 weights get 2:1 SMs where the groups
// divide so). FAILED_PRECONDITION naming the counts when there are more
// weights than groups; weights must be positive.
absl::StatusOr<std::vector<uint32_t>> SizeSmPartitions(
    const std::vector<uint32_t>& weights, uint32_t available);

// One green context of a device, made in the primary context's `epoch`.
// GpuDevice::CreateQueue makes its streams (CreateStream); the green
// context is destroyed on the device's cleanup thread when the last
// reference goes (queues hold one until their stream is destroyed), also
// after a reset: it is a handle of its own, which retained the primary
// context, and only its destruction releases that. Thread-safe.
class GpuSmPartition : public SmPartition {
 public:
  GpuSmPartition(GpuDevice* device, uint64_t epoch, GpuGreenHandle green,
                 uint32_t sm_count)
      : device_(device), epoch_(epoch), green_(green), sm_count_(sm_count) {}
  ~GpuSmPartition() override;

  uint32_t sm_count() const override { return sm_count_; }
  bool valid() const override;
  const GpuDevice* device() const { return device_; }
  uint64_t epoch() const { return epoch_; }

  // A stream on the partition's SMs. Serialized: the vendor does not
  // synchronize calls on one green context.
  absl::StatusOr<GpuStreamHandle> CreateStream(int priority);

 private:
  GpuDevice* const device_;
  const uint64_t epoch_;
  const GpuGreenHandle green_;
  const uint32_t sm_count_;
  absl::Mutex mu_;  // Held around calls on green_.
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_SM_PARTITION_H_
