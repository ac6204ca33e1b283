// Handle registries of the emulated GPU.
//
// Every handle the emulation gives out (ContextHandle, StreamHandle,
// EventHandle, ModuleHandle, FunctionHandle) is an opaque token, never reused
// in the process's life, that names an object in a registry. Entry points look
// handles up here, so a destroyed, stale or foreign handle is an error
// (Result::kInvalidHandle and the like), never a dangling pointer.
#ifndef TESTS_FAKE_GPU_FAKE_REGISTRY_H_
#define TESTS_FAKE_GPU_FAKE_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tests/fake_gpu/fake_context.h"

namespace fakegpu {

// A new handle value: nonzero, 16-aligned, never returned twice, and never 1
// or 2 (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD). Thread-safe.
inline uintptr_t NewHandle() {
  static std::atomic<uintptr_t> next{1};
  return 0x1000000 + 16 * next.fetch_add(1, std::memory_order_relaxed);
}

// Handle -> object map for objects that belong to a context. T must have
// `const Owner* owner() const` where Owner has `bool destroyed() const`.
// Thread-safe; objects are handed out as shared_ptr, so one that is removed
// while another thread uses it stays valid until that thread is done.
template <class T>
class Registry {
 public:
  // Registers `obj` under a new handle and returns the handle, or returns 0
  // (registering nothing) when obj's owner is already destroyed. Owner
  // destruction sets `destroyed` first and then calls RemoveOwnedBy, so an
  // object is either registered and later removed, or never registered.
  uintptr_t Add(std::shared_ptr<T> obj) {
    std::lock_guard<std::mutex> lock(mu_);
    if (obj->owner()->destroyed()) return 0;
    const uintptr_t handle = NewHandle();
    objects_.emplace(handle, std::move(obj));
    return handle;
  }

  // The object registered under `handle`, or nullptr. A handle of an
  // object whose context was destroyed (reset, or released for the last
  // time) is Misuse(): a real driver may crash or act on whatever object
  // reuses the handle; callers must not race a reset.
  std::shared_ptr<T> Find(uintptr_t handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(handle);
    if (it != objects_.end()) return it->second;
    if (tombstones_.count(handle) != 0) {
      Misuse("a handle used after its context was reset or destroyed");
    }
    return nullptr;
  }

  // Unregisters `handle` and returns its object, or nullptr if unknown.
  std::shared_ptr<T> Remove(uintptr_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(handle);
    if (it == objects_.end()) {
      if (tombstones_.count(handle) != 0) {
        Misuse("a handle destroyed after its context was reset or destroyed");
      }
      return nullptr;
    }
    std::shared_ptr<T> obj = std::move(it->second);
    objects_.erase(it);
    return obj;
  }

  // Unregisters every object of `owner` and returns them, so that the
  // caller drops the last references outside this registry's lock.
  template <class Owner>
  std::vector<std::shared_ptr<T>> RemoveOwnedBy(const Owner* owner) {
    std::vector<std::shared_ptr<T>> removed;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = objects_.begin(); it != objects_.end();) {
      if (it->second->owner() == owner) {
        tombstones_.insert(it->first);
        removed.push_back(std::move(it->second));
        it = objects_.erase(it);
      } else {
        ++it;
      }
    }
    return removed;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> objects_;
  // Handles removed with their context (a few per reset; never reused).
  std::unordered_set<uintptr_t> tombstones_;
};

// Converts between handle types and registry handles.
template <class Handle>
uintptr_t HandleValue(Handle h) {
  return reinterpret_cast<uintptr_t>(h);
}
template <class Handle>
Handle ToHandle(uintptr_t value) {
  return reinterpret_cast<Handle>(value);
}

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_REGISTRY_H_
