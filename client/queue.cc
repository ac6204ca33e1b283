// Queue commands.
#include "client/queue.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/command_record.h"
#include "client/kernel_args.h"
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
    : Handle(std::move(core), id, /*destroy=*/nullptr), owned_(owned) {
  if (valid()) this->core().AttachQueue(id);
}

Queue::~Queue() { Release(); }

Queue::Queue(Queue&& other) noexcept
    : Handle(std::move(other)),
      host_flag_(std::move(other.host_flag_)),
      reached_flag_(std::move(other.reached_flag_)),
      host_funcs_(std::exchange(other.host_funcs_, 0)),
      capturing_(std::exchange(other.capturing_, false)),
      owned_(std::exchange(other.owned_, false)) {}

Queue& Queue::operator=(Queue&& other) noexcept {
  if (this != &other) {
    Release();
    Handle::operator=(std::move(other));
    host_flag_ = std::move(other.host_flag_);
    reached_flag_ = std::move(other.reached_flag_);
    host_funcs_ = std::exchange(other.host_funcs_, 0);
    capturing_ = std::exchange(other.capturing_, false);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

void Queue::Release() {
  if (!valid()) return;
  SessionCore& session = core();
  session.DetachQueue(id());
  // Destroying the flags first would cancel the queue's wait for a pending
  // host function and let the work behind it run early.
  std::vector<uint64_t> flags;
  for (Flag* flag : {&host_flag_, &reached_flag_}) {
    if (flag->valid()) flags.push_back(flag->Disown());
  }
  // A queue the session owns (the default one) keeps its flags until the
  // session ends.
  if (owned_) session.DestroyQueue(id(), std::move(flags));
  Disown();
}

absl::Status Queue::Owns(const Handle& object, absl::string_view what,
                         const Handle* also) const {
  if (object.session() != session()) {
    if (!object.valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", what, " is not a live handle (moved from or never made)"));
    }
    // Ids are per session: sent, it would name this session's object with
    // the same id.
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(what) == "queue"
                         ? QueueName(object.id())
                         : absl::StrCat(what, " ", object.id()),
                     " belongs to another session"));
  }
  return also != nullptr ? Owns(*also, what) : absl::OkStatus();
}

void Queue::Send(const absl::Status& check,
                 absl::FunctionRef<void(v1::Command&)> fill) {
  if (check.ok()) {
    core().Enqueue(fill);
  } else {
    core().Reject(fill, check);
  }
}

Event Queue::record_event(bool enable_timing) {
  SessionCore::Group group(core());  // Created and recorded, or neither.
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
  Send(Owns(event, "event"), [&](v1::Command& c) {
    auto* record = c.mutable_record_event();
    record->set_queue_id(id());
    record->set_event_id(event.id());
  });
}

void Queue::wait_for(const Event& event) {
  Send(Owns(event, "event"), [&](v1::Command& c) {
    auto* wait = c.mutable_wait_event();
    wait->set_queue_id(id());
    wait->set_event_id(event.id());
  });
}

void Queue::wait_for(const Queue& other) {
  Send(Owns(other, "queue"), [&](v1::Command& c) {
    auto* wait = c.mutable_wait_queue();
    wait->set_queue_id(id());
    wait->set_other_queue_id(other.id());
  });
}

void Queue::wait_for_host_value(const Flag& flag, uint64_t value,
                                WaitCondition condition) {
  Send(Owns(flag, "flag"), [&](v1::Command& c) {
    auto* wait = c.mutable_wait_host_value();
    wait->set_queue_id(id());
    wait->set_flag_id(flag.id());
    wait->set_value(value);
    wait->set_condition(ToProto(condition));
  });
}

void Queue::write_flag(const Flag& flag, uint64_t value) {
  Send(Owns(flag, "flag"), [&](v1::Command& c) {
    auto* write = c.mutable_write_flag();
    write->set_queue_id(id());
    write->set_flag_id(flag.id());
    write->set_value(value);
  });
}

void Queue::enqueue_host_func(std::function<void()> fn) {
  if (capturing_) {
    // Its release protocol (a ticket per call on the queue's flags) holds
    // for one run, not for every launch of a graph.
    Send(absl::UnimplementedError(
             "enqueue_host_func cannot be captured by this client (its "
             "blocking protocol runs once, not on every launch of a graph); "
             "capture a write_flag and watch the flag instead"),
         [&](v1::Command& c) {
           c.mutable_enqueue_host_func()->set_queue_id(id());
         });
    return;
  }
  // Its commands go whole or not at all: a refused piece of the protocol
  // could leave the queue waiting for a ticket nobody writes.
  SessionCore::Group group(core());
  if (!group.status().ok()) {
    core().Reject(
        [&](v1::Command& c) {
          c.mutable_enqueue_host_func()->set_queue_id(id());
        },
        group.status());
    return;
  }
  if (!host_flag_.valid()) {
    host_flag_ = Flag(core_ptr(), core().MintId());
    reached_flag_ = Flag(core_ptr(), core().MintId());
    for (const Flag* flag : {&host_flag_, &reached_flag_}) {
      core().Enqueue(
          [&](v1::Command& c) { c.mutable_create_flag()->set_id(flag->id()); });
    }
  }
  const uint64_t ticket = ++host_funcs_;
  const uint64_t callback_id = core().MintId();
  core().AddHostFunc(callback_id, std::move(fn),
                     {.release_flag_id = host_flag_.id(),
                      .reached_flag_id = reached_flag_.id(),
                      .ticket = ticket});
  // Written before the notification is sent: whoever sees the notification
  // missing can find the ticket there.
  write_flag(reached_flag_, ticket);
  core().Enqueue([&](v1::Command& c) {
    auto* host = c.mutable_enqueue_host_func();
    host->set_queue_id(id());
    host->set_callback_id(callback_id);
  });
  wait_for_host_value(host_flag_, ticket, WaitCondition::kGreaterEqual);
}

absl::Status Queue::begin_capture() {
  // Answered: refused (a failed queue, a capture already), the work the
  // caller enqueues next would run instead of being recorded.
  auto begun = core().Call(
      [&](v1::Command& c) { c.mutable_begin_capture()->set_queue_id(id()); },
      SessionCore::Answer::kAck);
  if (!begun.ok()) return begun.status();
  capturing_ = true;
  return absl::OkStatus();
}

absl::StatusOr<Graph> Queue::end_capture() {
  const uint64_t graph_id = core().MintId();
  // Answered: a refused EndCapture (a quota) leaves the queue capturing, and
  // the caller must know before enqueueing more.
  auto ended = core().Call(
      [&](v1::Command& c) {
        auto* end = c.mutable_end_capture();
        end->set_queue_id(id());
        end->set_id(graph_id);
      },
      SessionCore::Answer::kAck);
  if (!ended.ok()) return ended.status();
  capturing_ = false;
  return Graph(core_ptr(), graph_id);
}

absl::StatusOr<Graph> Queue::capture(absl::FunctionRef<void()> record) {
  if (absl::Status s = begin_capture(); !s.ok()) return s;
  record();
  return end_capture();
}

void Queue::launch(const Graph& graph) {
  Send(Owns(graph, "graph"), [&](v1::Command& c) {
    auto* launch = c.mutable_launch_graph();
    launch->set_queue_id(id());
    launch->set_graph_id(graph.id());
  });
}

void Queue::launch(absl::string_view module, absl::string_view kernel,
                   Dim3 grid, Dim3 block, absl::Span<const Arg> args,
                   uint32_t shared_memory_bytes) {
  launch(module, kernel, grid, block, args,
         LaunchOptions{.shared_memory_bytes = shared_memory_bytes});
}

void Queue::launch(absl::string_view module, absl::string_view kernel,
                   Dim3 grid, Dim3 block, absl::Span<const Arg> args,
                   const LaunchOptions& options) {
  absl::Status check;
  for (const Arg& arg : args) {
    if (arg.buffer() != nullptr) check.Update(Owns(*arg.buffer(), "buffer"));
  }
  // Converted to the declared kinds; a kernel the client does not know is
  // sent as written, for the daemon to answer NOT_FOUND.
  std::vector<v1::KernelArg> converted;
  const std::vector<v1::ParamKind>* params =
      check.ok() ? core().signatures().Find(module, kernel) : nullptr;
  if (params != nullptr) {
    auto as_declared = ConvertArgs(module, kernel, *params, args);
    if (as_declared.ok()) {
      converted = *std::move(as_declared);
    } else {
      check = as_declared.status();
    }
  } else {
    for (const Arg& arg : args) converted.push_back(arg.proto());
  }
  Send(check, [&](v1::Command& c) {
    auto* launch = c.mutable_launch_kernel();
    launch->set_queue_id(id());
    launch->set_module(module.data(), module.size());
    launch->set_kernel(kernel.data(), kernel.size());
    SetDim3(grid, launch->mutable_grid());
    SetDim3(block, launch->mutable_block());
    launch->set_shared_memory_bytes(options.shared_memory_bytes);
    const Dim3& cluster = options.cluster;
    if (cluster.x != 0 || cluster.y != 0 || cluster.z != 0) {
      SetDim3(cluster, launch->mutable_cluster());
    }
    launch->set_cooperative(options.cooperative);
    for (v1::KernelArg& arg : converted) *launch->add_args() = std::move(arg);
  });
}

void Queue::write(const Buffer& dst, uint64_t offset, absl::string_view bytes) {
  // A write_buffer command of `piece` at `at` (the piece may be empty).
  auto fill = [&](v1::Command& c, uint64_t at, absl::string_view piece) {
    auto* write = c.mutable_write_buffer();
    write->set_queue_id(id());
    write->set_buffer_id(dst.id());
    write->set_offset(at);
    write->set_data(piece.data(), piece.size());
  };
  if (absl::Status check = Owns(dst, "buffer"); !check.ok()) {
    core().Reject([&](v1::Command& c) { fill(c, offset, {}); }, check);
    return;
  }
  // Pieces keep every request within the batch bound; they run in order on
  // the queue, so together they are the one copy asked for. A piece
  // refused (no room within enqueue_timeout) ends the write: the rest is
  // refused with it rather than sent with a hole before it.
  do {
    const absl::string_view piece =
        bytes.substr(0, SessionCore::kMaxWritePiece);
    const bool sent =
        core().Enqueue([&](v1::Command& c) { fill(c, offset, piece); });
    offset += piece.size();
    bytes.remove_prefix(piece.size());
    if (!sent && !bytes.empty()) {
      core().Reject([&](v1::Command& c) { fill(c, offset, {}); },
                    absl::CancelledError(absl::StrCat(
                        "the rest of a write (", bytes.size(),
                        " bytes) not sent: an earlier piece was not")));
      return;
    }
  } while (!bytes.empty());
}

absl::StatusOr<std::string> Queue::read(const Buffer& src, uint64_t offset,
                                        uint64_t size, absl::Duration timeout) {
  if (absl::Status s = Owns(src, "buffer"); !s.ok()) {
    return absl::Status(
        s.code(),
        absl::StrCat("read_buffer on ", QueueName(id()), ": ", s.message()));
  }
  auto result = core().Call(
      [&](v1::Command& c) {
        auto* read = c.mutable_read_buffer();
        read->set_queue_id(id());
        read->set_buffer_id(src.id());
        read->set_offset(offset);
        read->set_size(size);
      },
      SessionCore::Answer::kResult, WaitLimit(timeout));
  // As synchronize: a command of this queue the daemon rejected earlier is
  // reported here, rather than bytes it never wrote (its rejection arrived
  // before this result).
  if (absl::Status deferred = core().TakeQueueError(id()); !deferred.ok()) {
    return deferred;
  }
  if (!result.ok()) return result.status();
  return std::move(*result->mutable_read_buffer()->mutable_data());
}

void Queue::copy(const Buffer& src, uint64_t src_offset, const Buffer& dst,
                 uint64_t dst_offset, uint64_t size) {
  Send(Owns(src, "buffer", &dst), [&](v1::Command& c) {
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
  Send(Owns(dst, "buffer"), [&](v1::Command& c) {
    auto* fill = c.mutable_fill_buffer();
    fill->set_queue_id(id());
    fill->set_buffer_id(dst.id());
    fill->set_offset(offset);
    fill->set_size(size);
    fill->set_value(value);
  });
}

absl::Status Queue::synchronize(absl::Duration timeout) {
  auto result = core().Call(
      [&](v1::Command& c) {
        auto* sync = c.mutable_synchronize_queue();
        sync->set_queue_id(id());
        sync->set_timeout_ms(TimeoutMs(timeout));
      },
      SessionCore::Answer::kResult, ClientWait(timeout));
  // Rejections of earlier commands arrived before this result: report them
  // first.
  if (absl::Status deferred = core().TakeError(id()); !deferred.ok()) {
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
