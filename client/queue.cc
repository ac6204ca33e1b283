// Queue commands.
#include "client/queue.h"

#include "client/wire.h"

namespace gpustream::client {
namespace {

void SetDim3(const Dim3& d, v1::Dim3* out) {
  out->set_x(d.x);
  out->set_y(d.y);
  out->set_z(d.z);
}

}  // namespace

Queue::Queue(std::shared_ptr<SessionCore> core, uint64_t id, bool owned)
    : Handle(std::move(core), id,
             owned
                 ? +[](v1::Command& c,
                       uint64_t
                           id) { c.mutable_destroy_queue()->set_queue_id(id); }
                 : nullptr) {}

Event Queue::record_event(bool enable_timing) {
  const uint64_t event_id = core().MintId();
  core().Enqueue([&](v1::Command& c) {
    auto* create = c.mutable_create_event();
    create->set_id(event_id);
    create->set_enable_timing(enable_timing);
  });
  Event event(core_ptr(), event_id);
  record_event(event);
  return event;
}

void Queue::record_event(const Event& event) {
  core().Enqueue([&](v1::Command& c) {
    auto* record = c.mutable_record_event();
    record->set_queue_id(id());
    record->set_event_id(event.id());
  });
}

void Queue::wait_for(const Event& event) {
  core().Enqueue([&](v1::Command& c) {
    auto* wait = c.mutable_wait_event();
    wait->set_queue_id(id());
    wait->set_event_id(event.id());
  });
}

void Queue::wait_for(const Queue& other) {
  core().Enqueue([&](v1::Command& c) {
    auto* wait = c.mutable_wait_queue();
    wait->set_queue_id(id());
    wait->set_other_queue_id(other.id());
  });
}

void Queue::wait_for_host_value(const Flag& flag, uint64_t value,
                                WaitCondition condition) {
  core().Enqueue([&](v1::Command& c) {
    auto* wait = c.mutable_wait_host_value();
    wait->set_queue_id(id());
    wait->set_flag_id(flag.id());
    wait->set_value(value);
    wait->set_condition(ToProto(condition));
  });
}

void Queue::write_flag(const Flag& flag, uint64_t value) {
  core().Enqueue([&](v1::Command& c) {
    auto* write = c.mutable_write_flag();
    write->set_queue_id(id());
    write->set_flag_id(flag.id());
    write->set_value(value);
  });
}

void Queue::enqueue_host_func(std::function<void()> fn) {
  if (!host_flag_.valid()) {
    const uint64_t flag_id = core().MintId();
    core().Enqueue(
        [&](v1::Command& c) { c.mutable_create_flag()->set_id(flag_id); });
    host_flag_ = Flag(core_ptr(), flag_id);
  }
  // The n-th host function of this queue releases it by storing n.
  const uint64_t ticket = ++host_funcs_;
  const uint64_t callback_id = core().MintId();
  core().AddHostFunc(callback_id, std::move(fn), host_flag_.id(), ticket);
  core().Enqueue([&](v1::Command& c) {
    auto* host = c.mutable_enqueue_host_func();
    host->set_queue_id(id());
    host->set_callback_id(callback_id);
  });
  wait_for_host_value(host_flag_, ticket, WaitCondition::kGreaterEqual);
}

void Queue::launch(absl::string_view module, absl::string_view kernel,
                   Dim3 grid, Dim3 block, std::initializer_list<Arg> args,
                   uint32_t shared_memory_bytes) {
  core().Enqueue([&](v1::Command& c) {
    auto* launch = c.mutable_launch_kernel();
    launch->set_queue_id(id());
    launch->set_module(module.data(), module.size());
    launch->set_kernel(kernel.data(), kernel.size());
    SetDim3(grid, launch->mutable_grid());
    SetDim3(block, launch->mutable_block());
    launch->set_shared_memory_bytes(shared_memory_bytes);
    for (const Arg& arg : args) *launch->add_args() = arg.proto();
  });
}

void Queue::write(const Buffer& dst, uint64_t offset, absl::string_view bytes) {
  core().Enqueue([&](v1::Command& c) {
    auto* write = c.mutable_write_buffer();
    write->set_queue_id(id());
    write->set_buffer_id(dst.id());
    write->set_offset(offset);
    write->set_data(bytes.data(), bytes.size());
  });
}

absl::StatusOr<std::string> Queue::read(const Buffer& src, uint64_t offset,
                                        uint64_t size) {
  auto result = core().Call([&](v1::Command& c) {
    auto* read = c.mutable_read_buffer();
    read->set_queue_id(id());
    read->set_buffer_id(src.id());
    read->set_offset(offset);
    read->set_size(size);
  });
  if (!result.ok()) return result.status();
  return std::move(*result->mutable_read_buffer()->mutable_data());
}

void Queue::copy(const Buffer& src, uint64_t src_offset, const Buffer& dst,
                 uint64_t dst_offset, uint64_t size) {
  core().Enqueue([&](v1::Command& c) {
    auto* copy = c.mutable_copy_buffer();
    copy->set_queue_id(id());
    copy->set_src_buffer_id(src.id());
    copy->set_src_offset(src_offset);
    copy->set_dst_buffer_id(dst.id());
    copy->set_dst_offset(dst_offset);
    copy->set_size(size);
  });
}

void Queue::fill(const Buffer& dst, uint64_t offset, uint64_t size,
                 uint32_t value) {
  core().Enqueue([&](v1::Command& c) {
    auto* fill = c.mutable_fill_buffer();
    fill->set_queue_id(id());
    fill->set_buffer_id(dst.id());
    fill->set_offset(offset);
    fill->set_size(size);
    fill->set_value(value);
  });
}

absl::Status Queue::synchronize(absl::Duration timeout) {
  auto result = core().Call([&](v1::Command& c) {
    auto* sync = c.mutable_synchronize_queue();
    sync->set_queue_id(id());
    sync->set_timeout_ms(TimeoutMs(timeout));
  });
  // Errors of earlier commands arrived before this result: report them first.
  if (absl::Status deferred = core().TakeError(); !deferred.ok()) {
    return deferred;
  }
  return result.status();
}

absl::StatusOr<bool> Queue::is_idle() {
  auto result = core().Call(
      [&](v1::Command& c) { c.mutable_query_queue()->set_queue_id(id()); });
  if (!result.ok()) return result.status();
  return result->query_queue().idle();
}

}  // namespace gpustream::client
