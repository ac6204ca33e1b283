// The base of every client object handle: a session id that owns a server
// object and destroys it, pipelined, when the handle goes away.
#ifndef GPUSTREAM_CLIENT_HANDLE_H_
#define GPUSTREAM_CLIENT_HANDLE_H_

#include <cstdint>
#include <memory>

#include "client/session_core.h"

namespace gpustream::client {

// Move-only. Not thread-safe itself (use one handle from one thread at a
// time); the session behind it is.
class Handle {
 public:
  // Fills the command that destroys object `id` (null: never destroyed).
  using DestroyFn = void (*)(v1::Command& command, uint64_t id);

  Handle() = default;
  Handle(std::shared_ptr<SessionCore> core, uint64_t id, DestroyFn destroy)
      : core_(std::move(core)), id_(id), destroy_(destroy) {}
  ~Handle() { Release(); }
  Handle(Handle&& other) noexcept { *this = std::move(other); }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      Release();
      core_ = std::move(other.core_);
      id_ = std::exchange(other.id_, 0);
      destroy_ = std::exchange(other.destroy_, nullptr);
    }
    return *this;
  }

  // The object's id in its session.
  uint64_t id() const { return id_; }
  bool valid() const { return core_ != nullptr; }
  // The session the object belongs to (identity only; null if invalid).
  const SessionCore* session() const { return core_.get(); }

  // Lets go of the object without destroying it (the caller takes over
  // its destruction); returns its id.
  uint64_t Disown() {
    core_.reset();
    return std::exchange(id_, 0);
  }

 protected:
  SessionCore& core() const { return *core_; }
  const std::shared_ptr<SessionCore>& core_ptr() const { return core_; }

 private:
  void Release() {
    if (core_ != nullptr && destroy_ != nullptr) {
      core_->EnqueueRelease([this](v1::Command& c) { destroy_(c, id_); });
    }
    core_.reset();
  }

  std::shared_ptr<SessionCore> core_;
  uint64_t id_ = 0;
  DestroyFn destroy_ = nullptr;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_HANDLE_H_
