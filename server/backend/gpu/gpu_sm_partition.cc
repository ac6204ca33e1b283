// Sizing SM partitions, and releasing green contexts.
#include "server/backend/gpu/gpu_sm_partition.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_device.h"

namespace gpustream::backend {

absl::StatusOr<std::vector<uint32_t>> SizeSmPartitions(
    const std::vector<uint32_t>& weights, uint32_t available) {
  if (weights.size() > available) {
    return absl::FailedPreconditionError(
        absl::StrCat(weights.size(),
                     " partitions of at least one group of SMs each do not "
                     "fit in the device's ",
                     available, " groups"));
  }
  const uint64_t total =
      std::accumulate(weights.begin(), weights.end(), uint64_t{0});
  std::vector<uint32_t> groups;
  uint64_t given = 0;
  for (uint32_t w : weights) {
    groups.push_back(std::max<uint32_t>(
        1, static_cast<uint32_t>(uint64_t{available} * w / total)));
    given += groups.back();
  }
  // The minimum of one may have overdrawn: the largest give one back.
  while (given > available) {
    auto largest = std::max_element(groups.begin(), groups.end());
    --*largest;
    --given;
  }
  return groups;
}

GpuSmPartition::~GpuSmPartition() {
  const GpuDriver* driver = &device_->driver();
  device_->cleanup().Post([driver, green = green_] {
    driver->GreenContextDestroy(green).IgnoreError();
  });
}

bool GpuSmPartition::valid() const {
  return epoch_ == device_->epoch() && !device_->failed();
}

absl::StatusOr<GpuStreamHandle> GpuSmPartition::CreateStream(int priority) {
  absl::MutexLock lock(&mu_);
  return device_->driver().GreenStreamCreate(green_, priority);
}

}  // namespace gpustream::backend
