// SM resources, their splits and descriptors, and green contexts: the
// partitions of a device's SMs that the vendor offers from compute
// capability 9.0 (CUDA 12.4), with the rules its header states. A green
// context lives in its device's primary context (it retains it: memory,
// modules and a sticky error are shared) and limits the SMs its streams'
// kernels run on; it is not a context of its own, and no call here makes
// one current (the vendor's converted context may be current on one thread
// at a time only, and the fake serves no conversion).
#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_registry.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {
namespace {

struct Descriptor {
  int device;
  unsigned sms;
};

struct Green {
  int device;
  unsigned sms;
  std::shared_ptr<Context> primary;  // retained: released by destroy
  // Held by a call on the green context: the vendor does not synchronize
  // calls on one green context from several threads, so two at once are
  // Misuse().
  std::mutex in_call;
};

// Never destroyed (workers may outlive static destructors). The vendor has
// no call that destroys a descriptor: they live as long as the process.
struct Tables {
  std::mutex mu;
  uint64_t next_split = 1;
  std::unordered_map<uintptr_t, Descriptor> descriptors;
  std::unordered_map<uintptr_t, std::shared_ptr<Green>> greens;
};

Tables& tables() {
  static Tables* t = new Tables;
  return *t;
}

unsigned RoundUp(unsigned value, unsigned multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

Result DeviceGetSmResource(int dev, SmResource* resource) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (resource == nullptr) return Result::kInvalidValue;
  *resource = SmResource{
      .sm_count = static_cast<unsigned>(kDeviceLimits.multiprocessors),
      .min_partition = kDeviceLimits.sm_min_partition,
      .alignment = kDeviceLimits.sm_alignment,
      .device = dev,
      .split = 0};
  return Result::kSuccess;
}

// Groups of equal size (the vendor: "a disjoint set of symmetrical
// partitions"): min_count rounded up to the minimum and the alignment.
Result SmResourceSplitByCount(SmResource* result, unsigned* groups,
                              const SmResource* input, SmResource* remaining,
                              unsigned int flags, unsigned int min_count) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (groups == nullptr || input == nullptr || input->device < 0 ||
      flags != 0 || min_count > input->sm_count) {
    return Result::kInvalidValue;
  }
  // The outputs of a split cannot be split again (the vendor: only after
  // making a green context of them).
  if (input->split != 0) return Result::kInvalidResourceConfiguration;
  const unsigned size =
      RoundUp(std::max(min_count, input->min_partition), input->alignment);
  const unsigned possible = size == 0 ? 0 : input->sm_count / size;
  if (result == nullptr) {
    *groups = possible;
    return Result::kSuccess;
  }
  if (*groups == 0) return Result::kInvalidValue;
  const unsigned made = std::min(*groups, possible);
  if (made == 0) return Result::kInvalidResourceConfiguration;
  uint64_t split;
  {
    Tables& t = tables();
    std::lock_guard<std::mutex> lock(t.mu);
    split = t.next_split++;
  }
  for (unsigned i = 0; i < made; ++i) {
    result[i] = *input;
    result[i].sm_count = size;
    result[i].split = split;
  }
  *groups = made;
  if (remaining != nullptr) {
    *remaining = *input;
    remaining->sm_count = input->sm_count - made * size;
    remaining->split = split;
  }
  return Result::kSuccess;
}

// Resources of one device, and (more than one) of one split.
Result ResourceGenerateDesc(ResourceDescHandle* desc,
                            const SmResource* resources, unsigned count) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (desc == nullptr || resources == nullptr || count == 0) {
    return Result::kInvalidValue;
  }
  Descriptor made{resources[0].device, 0};
  for (unsigned i = 0; i < count; ++i) {
    if (resources[i].device < 0) return Result::kInvalidValue;
    if (resources[i].device != made.device ||
        (count > 1 && resources[i].split != resources[0].split)) {
      return Result::kInvalidResourceConfiguration;
    }
    made.sms += resources[i].sm_count;
  }
  if (made.sms == 0) return Result::kInvalidResourceConfiguration;
  const uintptr_t handle = NewHandle();
  Tables& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  t.descriptors.emplace(handle, made);
  *desc = ToHandle<ResourceDescHandle>(handle);
  return Result::kSuccess;
}

Result GreenCtxCreate(GreenCtxHandle* green, ResourceDescHandle desc, int dev,
                      unsigned int flags) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (green == nullptr || flags != kGreenCtxDefaultStream) {
    return Result::kInvalidValue;
  }
  Descriptor found;
  {
    Tables& t = tables();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.descriptors.find(HandleValue(desc));
    if (it == t.descriptors.end()) return Result::kInvalidValue;
    found = it->second;
  }
  if (found.device != dev) return Result::kInvalidDevice;
  std::shared_ptr<Context> primary = RetainPrimary(dev);
  if (primary == nullptr) return Result::kInvalidDevice;
  auto made = std::make_shared<Green>();
  made->device = dev;
  made->sms = found.sms;
  made->primary = primary;
  const uintptr_t handle = NewHandle();
  Tables& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  t.greens.emplace(handle, std::move(made));
  *green = ToHandle<GreenCtxHandle>(handle);
  return Result::kSuccess;
}

Result GreenCtxDestroy(GreenCtxHandle green) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  std::shared_ptr<Green> gone;
  {
    Tables& t = tables();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.greens.find(HandleValue(green));
    if (it == t.greens.end()) return Result::kInvalidValue;
    gone = std::move(it->second);
    t.greens.erase(it);
  }
  return DevicePrimaryCtxRelease(gone->device);
}

// The stream belongs to the primary context the green context retained:
// kContextIsDestroyed once that was reset (a reset destroys every object of
// the context, and a green context made before it runs nothing after).
Result GreenCtxStreamCreate(StreamHandle* stream, GreenCtxHandle green,
                            unsigned int flags, int priority) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (stream == nullptr || flags != kStreamNonBlocking) {
    return Result::kInvalidValue;
  }
  std::shared_ptr<Green> found;
  {
    Tables& t = tables();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.greens.find(HandleValue(green));
    if (it == t.greens.end()) return Result::kInvalidContext;
    found = it->second;
  }
  std::unique_lock<std::mutex> in_call(found->in_call, std::try_to_lock);
  if (!in_call.owns_lock()) {
    Misuse(
        "two threads called into one green context at once (cuda.h: "
        "no internal synchronization makes that work)");
  }
  if (Result r = CheckUsable(*found->primary); r != Result::kSuccess) {
    return r;
  }
  return AddStream(found->primary, flags, priority, found->sms, stream);
}

}  // namespace fakegpu
