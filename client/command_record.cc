// Describing sent commands for error reports.
#include "client/command_record.h"

#include "absl/strings/str_cat.h"

namespace gpustream::client {

CommandRecord CommandRecord::Of(const v1::Command& c) {
  CommandRecord r;
  r.op = c.op_case();
  switch (c.op_case()) {
    case v1::Command::kCreateQueue:
      // A queue that could not be created (a quota) is reported by its own
      // synchronize(), ahead of the NOT_FOUNDs of the work enqueued on it.
      r.queue_id = c.create_queue().id();
      break;
    case v1::Command::kDestroyQueue:
      // The handle is gone: any queue's synchronize reports it.
      r.object_id = c.destroy_queue().queue_id();
      r.expects_result = true;
      break;
    case v1::Command::kWaitQueue:
      r.queue_id = c.wait_queue().queue_id();
      r.other_id = c.wait_queue().other_queue_id();
      break;
    case v1::Command::kCreateEvent:
      r.object_id = c.create_event().id();
      break;
    case v1::Command::kDestroyEvent:
      r.object_id = c.destroy_event().event_id();
      break;
    case v1::Command::kRecordEvent:
      r.queue_id = c.record_event().queue_id();
      r.object_id = c.record_event().event_id();
      break;
    case v1::Command::kWaitEvent:
      r.queue_id = c.wait_event().queue_id();
      r.object_id = c.wait_event().event_id();
      break;
    case v1::Command::kCreateFlag:
      r.object_id = c.create_flag().id();
      break;
    case v1::Command::kDestroyFlag:
      r.object_id = c.destroy_flag().flag_id();
      break;
    case v1::Command::kSignalFlag:
      r.object_id = c.signal_flag().flag_id();
      break;
    case v1::Command::kWaitHostValue:
      r.queue_id = c.wait_host_value().queue_id();
      r.object_id = c.wait_host_value().flag_id();
      break;
    case v1::Command::kWriteFlag:
      r.queue_id = c.write_flag().queue_id();
      r.object_id = c.write_flag().flag_id();
      break;
    case v1::Command::kEnqueueHostFunc:
      r.queue_id = c.enqueue_host_func().queue_id();
      r.object_id = c.enqueue_host_func().callback_id();
      break;
    case v1::Command::kAllocateBuffer:
      r.object_id = c.allocate_buffer().id();
      break;
    case v1::Command::kFreeBuffer:
      r.object_id = c.free_buffer().buffer_id();
      break;
    case v1::Command::kWriteBuffer:
      r.queue_id = c.write_buffer().queue_id();
      r.object_id = c.write_buffer().buffer_id();
      break;
    case v1::Command::kCopyBuffer:
      r.queue_id = c.copy_buffer().queue_id();
      r.object_id = c.copy_buffer().src_buffer_id();
      r.other_id = c.copy_buffer().dst_buffer_id();
      break;
    case v1::Command::kFillBuffer:
      r.queue_id = c.fill_buffer().queue_id();
      r.object_id = c.fill_buffer().buffer_id();
      break;
    case v1::Command::kLaunchKernel:
      r.queue_id = c.launch_kernel().queue_id();
      r.kernel = absl::StrCat(c.launch_kernel().module(), ".",
                              c.launch_kernel().kernel());
      break;
    case v1::Command::kBeginCapture:
      r.queue_id = c.begin_capture().queue_id();
      break;
    case v1::Command::kEndCapture:
      r.queue_id = c.end_capture().queue_id();
      r.object_id = c.end_capture().id();
      break;
    case v1::Command::kLaunchGraph:
      r.queue_id = c.launch_graph().queue_id();
      r.object_id = c.launch_graph().graph_id();
      break;
    case v1::Command::kDestroyGraph:
      r.object_id = c.destroy_graph().graph_id();
      break;
    default:
      // Waiting and data-carrying commands are sent through Call, which
      // hands the answer to the caller; any other gets its own result.
      r.expects_result = true;
      break;
  }
  return r;
}

std::string QueueName(uint64_t queue_id) {
  constexpr uint64_t kFirstServerId = uint64_t{1} << 63;
  if (queue_id >= kFirstServerId) return "the default queue";
  return absl::StrCat("queue ", queue_id);
}

std::string CommandRecord::Describe() const {
  const google::protobuf::FieldDescriptor* field =
      v1::Command::descriptor()->FindFieldByNumber(op);
  std::string text = field != nullptr ? field->name() : "command";
  if (!kernel.empty()) absl::StrAppend(&text, " ", kernel);
  switch (op) {
    case v1::Command::kCopyBuffer:
      absl::StrAppend(&text, " from buffer ", object_id, " to buffer ",
                      other_id);
      break;
    case v1::Command::kWaitQueue:
      absl::StrAppend(&text, " for ", QueueName(other_id));
      break;
    case v1::Command::kRecordEvent:
    case v1::Command::kWaitEvent:
      absl::StrAppend(&text, " event ", object_id);
      break;
    case v1::Command::kWaitHostValue:
    case v1::Command::kWriteFlag:
      absl::StrAppend(&text, " flag ", object_id);
      break;
    case v1::Command::kEnqueueHostFunc:
      absl::StrAppend(&text, " callback ", object_id);
      break;
    case v1::Command::kWriteBuffer:
    case v1::Command::kFillBuffer:
      absl::StrAppend(&text, " buffer ", object_id);
      break;
    case v1::Command::kCreateQueue:
      absl::StrAppend(&text, " ", queue_id);
      return text;
    default:
      if (object_id != 0) absl::StrAppend(&text, " ", object_id);
      break;
  }
  if (queue_id != 0) absl::StrAppend(&text, " on ", QueueName(queue_id));
  return text;
}

}  // namespace gpustream::client
