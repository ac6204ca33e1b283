// SM partitions of a GPU device (green contexts), sized by weight.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_SM_PARTITION_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_SM_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/device.h"
#include "server/backend/gpu/gpu_driver.h"

namespace gpustream::backend {

class GpuDevice;

// How many of `available` equal groups of SMs each weight gets: its exact
// share rounded down, at least one. Groups left over stay idle, so that
// the shares hold as weighted (2:1 weights get 2:1 SMs). FAILED_PRECONDITION
// naming the counts when there are more weights than groups; weights must
// be positive.
absl::StatusOr<std::vector<uint32_t>> SizeSmPartitions(
    const std::vector<uint32_t>& weights, uint32_t available);

// One green context of a device. Its streams are created through the
// device (GpuDevice::CreateQueue); the green context is destroyed on the
// device's cleanup thread when the last reference goes (queues hold one
// until their stream is destroyed), unless its context epoch is gone.
// Immutable: thread-safe.
class GpuSmPartition : public SmPartition {
 public:
  GpuSmPartition(GpuDevice* device, uint64_t epoch, GpuGreenHandle green,
                 uint32_t sm_count)
      : device_(device), epoch_(epoch), green_(green), sm_count_(sm_count) {}
  ~GpuSmPartition() override;

  uint32_t sm_count() const override { return sm_count_; }
  const GpuDevice* device() const { return device_; }
  uint64_t epoch() const { return epoch_; }
  GpuGreenHandle green() const { return green_; }

 private:
  GpuDevice* const device_;
  const uint64_t epoch_;
  const GpuGreenHandle green_;
  const uint32_t sm_count_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_SM_PARTITION_H_
