// Session object factories.
#include "client/session.h"

#include "client/wire.h"

namespace gpustream::client {

Session::Session(std::shared_ptr<SessionCore> core)
    : core_(std::move(core)),
      default_queue_(core_, core_->default_queue_id(), /*owned=*/false) {}

Session::~Session() { (void)close(); }

Queue Session::create_queue(int32_t priority) {
  // The handle (which routes the queue's errors) exists before the daemon
  // can refuse the queue.
  Queue queue(core_, core_->MintId(), /*owned=*/true);
  core_->Enqueue([&](v1::Command& c) {
    auto* create = c.mutable_create_queue();
    create->set_id(queue.id());
    create->set_priority(priority);
  });
  return queue;
}

Event Session::create_event(bool enable_timing) {
  const uint64_t id = core_->MintId();
  core_->Enqueue([&](v1::Command& c) {
    auto* create = c.mutable_create_event();
    create->set_id(id);
    create->set_enable_timing(enable_timing);
  });
  return Event(core_, id);
}

Flag Session::create_flag() {
  const uint64_t id = core_->MintId();
  core_->Enqueue([&](v1::Command& c) { c.mutable_create_flag()->set_id(id); });
  return Flag(core_, id);
}

absl::StatusOr<Buffer> Session::allocate(uint64_t size_bytes, MemoryKind kind,
                                         absl::Duration timeout) {
  const uint64_t id = core_->MintId();
  auto result = core_->Call(
      [&](v1::Command& c) {
        auto* alloc = c.mutable_allocate_buffer();
        alloc->set_id(id);
        alloc->set_size_bytes(size_bytes);
        alloc->set_kind(kind == MemoryKind::kHostPinned
                            ? v1::MEMORY_KIND_HOST_PINNED
                            : v1::MEMORY_KIND_DEVICE);
      },
      SessionCore::Answer::kAck, WaitLimit(timeout));
  if (result.status().code() == absl::StatusCode::kDeadlineExceeded) {
    // The stream runs a session's commands in order: this free runs after
    // the allocation, whichever way that went.
    core_->EnqueueUnheard(
        [id](v1::Command& c) { c.mutable_free_buffer()->set_buffer_id(id); });
  }
  if (!result.ok()) return result.status();
  return Buffer(core_, id, size_bytes);
}

absl::StatusOr<SharedBuffer> Session::allocate_shared(uint64_t size_bytes) {
  absl::StatusOr<std::string> socket = core_->ShareSocket();
  if (!socket.ok()) return socket.status();
  if (socket->empty()) {
    return absl::FailedPreconditionError(
        "allocate_shared: the daemon serves no share socket (sharing is off "
        "there, or it listens on no unix socket)");
  }
  const uint64_t id = core_->MintId();
  auto result = core_->Call([&](v1::Command& c) {
    auto* alloc = c.mutable_allocate_buffer();
    alloc->set_id(id);
    alloc->set_size_bytes(size_bytes);
    alloc->set_kind(v1::MEMORY_KIND_HOST_SHARED);
  });
  if (!result.ok()) return result.status();
  Buffer buffer(core_, id, size_bytes);  // Freed again if the fetch fails.
  auto mapping = SharedMapping::Fetch(*socket, core_->id(),
                                      result->allocate_buffer().share_ticket());
  if (!mapping.ok()) return mapping.status();
  return SharedBuffer(std::move(buffer), *std::move(mapping));
}

absl::Status Session::flush() { return core_->Flush(); }

absl::Status Session::take_error() { return core_->TakeError(0); }

absl::Status Session::close() {
  // Handles still alive would enqueue their destruction after the close;
  // the core ignores commands once closed.
  return core_->Close();
}

}  // namespace gpustream::client
