// Decoding fuzzer bytes into Submit commands.
#include "tests/fuzz/command_decoder.h"

#include <algorithm>
#include <string>

namespace gpustream::fuzz {
namespace {

// The samples module's kernels (docs/api.md), and names that are not.
const std::vector<std::string>& KernelNames() {
  static const auto* names = new std::vector<std::string>{
      "fill_u32", "vector_add_f32", "saxpy_f32", "add_u64",
      "spin_ns",  "noop",           "",          "no_such_kernel"};
  return *names;
}

// The op of each Command, by its field number (proto/gpustream/v1).
enum Op : int {
  kCloseSession = 10,
  kKeepAlive,
  kCreateQueue,
  kDestroyQueue,
  kSynchronizeQueue,
  kQueryQueue,
  kWaitQueue,
  kCreateEvent,
  kDestroyEvent,
  kRecordEvent,
  kWaitEvent,
  kSynchronizeEvent,
  kQueryEvent,
  kEventElapsedTime,
  kCreateFlag,
  kDestroyFlag,
  kSignalFlag,
  kReadFlag,
  kWaitFlag,
  kWaitHostValue,
  kWriteFlag,
  kEnqueueHostFunc,
  kAllocateBuffer,
  kFreeBuffer,
  kWriteBuffer,
  kReadBuffer,
  kCopyBuffer,
  kFillBuffer,
  kLaunchKernel,
  kNoOp,  // A command without an op.
};

constexpr uint64_t kServerIdBase = uint64_t{1} << 63;

}  // namespace

CommandDecoder::CommandDecoder(const uint8_t* data, size_t size,
                               uint64_t default_queue)
    : in_(data, size), queues_{default_queue} {}

bool CommandDecoder::HasNext() const {
  return decoded_ < kMaxCommands && in_.remaining() > 0;
}

uint64_t CommandDecoder::AnyId() {
  switch (in_.Range(0, 4)) {
    case 0:
      return 0;
    case 1:
      return in_.Range<uint64_t>(1, 40);
    case 2:
      return kServerIdBase + in_.Range<uint64_t>(0, 40);
    case 3:
      return ~uint64_t{0};
    default:
      return in_.Any<uint64_t>();
  }
}

uint64_t CommandDecoder::PickId(const std::vector<uint64_t>& known) {
  const int choice = in_.Range(0, 15);
  if (choice < 12 && !known.empty()) return in_.Pick(known);
  if (choice < 14) {
    // An id of another kind: the wrong kind must be NOT_FOUND too.
    std::vector<uint64_t> all = queues_;
    all.insert(all.end(), events_.begin(), events_.end());
    all.insert(all.end(), flags_.begin(), flags_.end());
    for (const BufferInfo& b : buffers_) all.push_back(b.id);
    return in_.Pick(all);
  }
  return AnyId();
}

CommandDecoder::BufferInfo CommandDecoder::PickBuffer() {
  if (!buffers_.empty() && in_.Range(0, 7) != 0) return in_.Pick(buffers_);
  const uint64_t id = PickId({});
  for (const BufferInfo& b : buffers_) {
    if (b.id == id) return b;
  }
  return {id, 0};
}

uint64_t CommandDecoder::NewId() {
  const int choice = in_.Range(0, 9);
  if (choice < 4) return 0;
  if (choice < 9) return in_.Range<uint64_t>(1, 32);
  return AnyId();
}

uint64_t CommandDecoder::Near(uint64_t limit) {
  switch (in_.Range(0, 11)) {
    case 0:
      return limit + in_.Range<uint64_t>(1, 8);
    case 1:
      return in_.Any<uint64_t>();
    case 2:
      return ~uint64_t{0} - in_.Range<uint64_t>(0, 8);
    case 3:
      return limit;
    default:
      return in_.Range<uint64_t>(0, limit);
  }
}

int CommandDecoder::EnumValue(int max) {
  if (in_.OneIn(16)) return in_.Bool() ? max + 1 : in_.Any<int32_t>();
  return in_.Range(0, max);
}

void CommandDecoder::Forget(std::vector<uint64_t>& ids, uint64_t id) {
  ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
}

void CommandDecoder::SetDim(v1::Dim3* dim, uint32_t limit_x) {
  // Small, or past the device's limits (rejected before anything runs):
  // never a large grid that would run for long.
  switch (in_.Range(0, 15)) {
    case 0:
      dim->set_x(0);
      break;
    case 1:
      dim->set_x(limit_x + 1);
      break;
    case 2:
      dim->set_x(~uint32_t{0});
      break;
    default:
      dim->set_x(in_.Range<uint32_t>(1, 4));
  }
  if (in_.OneIn(4)) dim->set_y(in_.OneIn(8) ? 65536 : in_.Range(0, 2));
  if (in_.OneIn(4)) dim->set_z(in_.OneIn(8) ? 65536 : in_.Range(0, 2));
}

void CommandDecoder::KernelArgs(const std::string& kernel,
                                v1::LaunchKernelRequest& req) {
  // The declared kinds (v1::ParamKind numbers) of the samples' kernels.
  std::vector<int> kinds;
  if (kernel == "fill_u32") kinds = {1, 3, 5};
  if (kernel == "vector_add_f32") kinds = {1, 1, 1, 5};
  if (kernel == "saxpy_f32") kinds = {6, 1, 1, 5};
  if (kernel == "add_u64") kinds = {1, 5};
  if (kernel == "spin_ns") kinds = {5};
  if (in_.OneIn(8)) {
    // Any count of any kinds, or one argument left out or added.
    if (in_.Bool() && !kinds.empty()) {
      kinds.pop_back();
    } else {
      kinds.push_back(in_.Range(0, 9));
    }
  }
  uint64_t smallest = ~uint64_t{0};
  for (int kind : kinds) {
    v1::KernelArg* arg = req.add_args();
    switch (kind) {
      case 1: {
        const BufferInfo b = PickBuffer();
        arg->mutable_buffer()->set_buffer_id(b.id);
        if (in_.OneIn(4)) arg->mutable_buffer()->set_offset(Near(b.size));
        smallest = std::min(smallest, b.size);
        break;
      }
      case 2:
        arg->set_i32(in_.Any<int32_t>());
        break;
      case 3:
        arg->set_u32(in_.Any<uint32_t>());
        break;
      case 4:
        arg->set_i64(in_.Any<int64_t>());
        break;
      case 5:
        // The last u64 of every sample is a count, or spin_ns's
        // nanoseconds: keep it near what the buffers hold, and short.
        arg->set_u64(kernel == "spin_ns"
                         ? in_.Range<uint64_t>(0, 200000)
                         : Near(smallest == ~uint64_t{0} ? 64 : smallest / 4));
        break;
      case 6:
        arg->set_f32(in_.Any<float>());
        break;
      case 7:
        arg->set_f64(in_.Any<double>());
        break;
      case 8:
        arg->set_bytes(in_.Bytes(16));
        break;
      default:
        break;  // A KernelArg without a value.
    }
  }
}

void CommandDecoder::Launch(v1::LaunchKernelRequest& req) {
  req.set_queue_id(PickQueue());
  req.set_module(in_.OneIn(16) ? in_.Bytes(8) : "samples");
  const std::string& kernel = in_.Pick(KernelNames());
  req.set_kernel(kernel);
  SetDim(req.mutable_grid(), 0x7fffffff);
  SetDim(req.mutable_block(), 1024);
  if (in_.OneIn(8)) req.set_shared_memory_bytes(in_.Any<uint32_t>());
  KernelArgs(kernel, req);
}

v1::Command CommandDecoder::Next() {
  ++decoded_;
  v1::Command c;
  c.set_seq(static_cast<uint64_t>(decoded_));
  // Close is rare: every command after it is refused.
  const int op =
      in_.OneIn(64) ? kCloseSession : in_.Range<int>(kKeepAlive, kNoOp);
  switch (op) {
    case kCloseSession:
      c.mutable_close_session();
      break;
    case kKeepAlive:
      c.mutable_keep_alive();
      break;
    case kCreateQueue: {
      auto* r = c.mutable_create_queue();
      r->set_id(NewId());
      r->set_priority(in_.OneIn(8) ? in_.Any<int32_t>() : in_.Range(-6, 1));
      break;
    }
    case kDestroyQueue:
      c.mutable_destroy_queue()->set_queue_id(PickQueue());
      break;
    case kSynchronizeQueue: {
      auto* r = c.mutable_synchronize_queue();
      r->set_queue_id(PickQueue());
      r->set_timeout_ms(Timeout());
      break;
    }
    case kQueryQueue:
      c.mutable_query_queue()->set_queue_id(PickQueue());
      break;
    case kWaitQueue: {
      auto* r = c.mutable_wait_queue();
      r->set_queue_id(PickQueue());
      r->set_other_queue_id(PickQueue());
      break;
    }
    case kCreateEvent: {
      auto* r = c.mutable_create_event();
      r->set_id(NewId());
      r->set_enable_timing(in_.Bool());
      break;
    }
    case kDestroyEvent:
      c.mutable_destroy_event()->set_event_id(PickId(events_));
      break;
    case kRecordEvent: {
      auto* r = c.mutable_record_event();
      r->set_queue_id(PickQueue());
      r->set_event_id(PickId(events_));
      break;
    }
    case kWaitEvent: {
      auto* r = c.mutable_wait_event();
      r->set_queue_id(PickQueue());
      r->set_event_id(PickId(events_));
      break;
    }
    case kSynchronizeEvent: {
      auto* r = c.mutable_synchronize_event();
      r->set_event_id(PickId(events_));
      r->set_timeout_ms(Timeout());
      break;
    }
    case kQueryEvent:
      c.mutable_query_event()->set_event_id(PickId(events_));
      break;
    case kEventElapsedTime: {
      auto* r = c.mutable_event_elapsed_time();
      r->set_start_event_id(PickId(events_));
      r->set_end_event_id(PickId(events_));
      break;
    }
    case kCreateFlag:
      c.mutable_create_flag()->set_id(NewId());
      break;
    case kDestroyFlag:
      c.mutable_destroy_flag()->set_flag_id(PickId(flags_));
      break;
    case kSignalFlag: {
      auto* r = c.mutable_signal_flag();
      r->set_flag_id(PickId(flags_));
      r->set_value(in_.Bool() ? in_.Range<uint64_t>(0, 4)
                              : in_.Any<uint64_t>());
      break;
    }
    case kReadFlag:
      c.mutable_read_flag()->set_flag_id(PickId(flags_));
      break;
    case kWaitFlag: {
      auto* r = c.mutable_wait_flag();
      r->set_flag_id(PickId(flags_));
      r->set_value(in_.Bool() ? in_.Range<uint64_t>(0, 4)
                              : in_.Any<uint64_t>());
      r->set_condition(static_cast<v1::WaitCondition>(EnumValue(2)));
      r->set_timeout_ms(Timeout());
      break;
    }
    case kWaitHostValue: {
      auto* r = c.mutable_wait_host_value();
      r->set_queue_id(PickQueue());
      r->set_flag_id(PickId(flags_));
      r->set_value(in_.Bool() ? in_.Range<uint64_t>(0, 4)
                              : in_.Any<uint64_t>());
      r->set_condition(static_cast<v1::WaitCondition>(EnumValue(2)));
      break;
    }
    case kWriteFlag: {
      auto* r = c.mutable_write_flag();
      r->set_queue_id(PickQueue());
      r->set_flag_id(PickId(flags_));
      r->set_value(in_.Bool() ? in_.Range<uint64_t>(0, 4)
                              : in_.Any<uint64_t>());
      break;
    }
    case kEnqueueHostFunc: {
      auto* r = c.mutable_enqueue_host_func();
      r->set_queue_id(PickQueue());
      r->set_callback_id(in_.Any<uint64_t>());
      break;
    }
    case kAllocateBuffer: {
      auto* r = c.mutable_allocate_buffer();
      r->set_id(NewId());
      // Small mostly; sometimes past the device's memory (64 MiB).
      r->set_size_bytes(in_.OneIn(32) ? in_.Any<uint64_t>()
                                      : in_.Range<uint64_t>(0, 4096));
      r->set_kind(static_cast<v1::MemoryKind>(EnumValue(2)));
      break;
    }
    case kFreeBuffer:
      c.mutable_free_buffer()->set_buffer_id(PickBuffer().id);
      break;
    case kWriteBuffer: {
      auto* r = c.mutable_write_buffer();
      r->set_queue_id(PickQueue());
      const BufferInfo b = PickBuffer();
      r->set_buffer_id(b.id);
      r->set_offset(Near(b.size));
      r->set_data(in_.Bytes(std::min<uint64_t>(b.size + 8, 4200)));
      break;
    }
    case kReadBuffer: {
      auto* r = c.mutable_read_buffer();
      r->set_queue_id(PickQueue());
      const BufferInfo b = PickBuffer();
      r->set_buffer_id(b.id);
      r->set_offset(Near(b.size));
      r->set_size(Near(b.size));
      break;
    }
    case kCopyBuffer: {
      auto* r = c.mutable_copy_buffer();
      r->set_queue_id(PickQueue());
      const BufferInfo src = PickBuffer(), dst = PickBuffer();
      r->set_src_buffer_id(src.id);
      r->set_dst_buffer_id(dst.id);
      r->set_src_offset(Near(src.size));
      r->set_dst_offset(Near(dst.size));
      r->set_size(Near(std::min(src.size, dst.size)));
      break;
    }
    case kFillBuffer: {
      auto* r = c.mutable_fill_buffer();
      r->set_queue_id(PickQueue());
      const BufferInfo b = PickBuffer();
      r->set_buffer_id(b.id);
      // Multiples of 4 mostly (fills require them).
      const bool aligned = !in_.OneIn(8);
      r->set_offset(aligned ? Near(b.size / 4) * 4 : Near(b.size));
      r->set_size(aligned ? Near(b.size / 4) * 4 : Near(b.size));
      r->set_value(in_.Any<uint32_t>());
      break;
    }
    case kLaunchKernel:
      Launch(*c.mutable_launch_kernel());
      break;
    default:
      break;  // kNoOp: INVALID_ARGUMENT, "has no op set".
  }
  return c;
}

void CommandDecoder::Observe(const v1::Command& command,
                             const v1::CommandResult& result,
                             const absl::Status& status) {
  if (!status.ok()) return;
  switch (command.op_case()) {
    case v1::Command::kCreateQueue:
      queues_.push_back(result.create_queue().queue_id());
      break;
    case v1::Command::kCreateEvent:
      events_.push_back(result.create_event().event_id());
      break;
    case v1::Command::kCreateFlag:
      flags_.push_back(result.create_flag().flag_id());
      break;
    case v1::Command::kAllocateBuffer:
      buffers_.push_back({result.allocate_buffer().buffer_id(),
                          command.allocate_buffer().size_bytes()});
      break;
    case v1::Command::kDestroyQueue:
      Forget(queues_, command.destroy_queue().queue_id());
      break;
    case v1::Command::kDestroyEvent:
      Forget(events_, command.destroy_event().event_id());
      break;
    case v1::Command::kDestroyFlag:
      Forget(flags_, command.destroy_flag().flag_id());
      break;
    case v1::Command::kFreeBuffer: {
      const uint64_t id = command.free_buffer().buffer_id();
      buffers_.erase(
          std::remove_if(buffers_.begin(), buffers_.end(),
                         [id](const BufferInfo& b) { return b.id == id; }),
          buffers_.end());
      break;
    }
    default:
      break;
  }
}

}  // namespace gpustream::fuzz
