// The list of session-scoped operations: each is a unary RPC and a Submit
// command with the same request message (proto/gpustream/v1).
#ifndef GPUSTREAM_SERVER_SESSION_OPS_H_
#define GPUSTREAM_SERVER_SESSION_OPS_H_

// X(RpcName, command_field): for every operation a Session serves.
// CloseSession and KeepAlive are served by the SessionManager.
#define GPUSTREAM_SESSION_OPS(X)          \
  X(CreateQueue, create_queue)            \
  X(DestroyQueue, destroy_queue)          \
  X(SynchronizeQueue, synchronize_queue)  \
  X(QueryQueue, query_queue)              \
  X(WaitQueue, wait_queue)                \
  X(CreateEvent, create_event)            \
  X(DestroyEvent, destroy_event)          \
  X(RecordEvent, record_event)            \
  X(WaitEvent, wait_event)                \
  X(SynchronizeEvent, synchronize_event)  \
  X(QueryEvent, query_event)              \
  X(EventElapsedTime, event_elapsed_time) \
  X(CreateFlag, create_flag)              \
  X(DestroyFlag, destroy_flag)            \
  X(SignalFlag, signal_flag)              \
  X(ReadFlag, read_flag)                  \
  X(WaitFlag, wait_flag)                  \
  X(WaitHostValue, wait_host_value)       \
  X(WriteFlag, write_flag)                \
  X(EnqueueHostFunc, enqueue_host_func)   \
  X(AllocateBuffer, allocate_buffer)      \
  X(FreeBuffer, free_buffer)              \
  X(WriteBuffer, write_buffer)            \
  X(ReadBuffer, read_buffer)              \
  X(CopyBuffer, copy_buffer)              \
  X(FillBuffer, fill_buffer)              \
  X(LaunchKernel, launch_kernel)          \
  X(BeginCapture, begin_capture)          \
  X(EndCapture, end_capture)              \
  X(LaunchGraph, launch_graph)            \
  X(DestroyGraph, destroy_graph)

// Operations whose result always travels on a Submit stream, even on
// success: they wait, or their response carries data.
#define GPUSTREAM_WAITING_OPS(X)         \
  X(DestroyQueue, destroy_queue)         \
  X(SynchronizeQueue, synchronize_queue) \
  X(SynchronizeEvent, synchronize_event) \
  X(WaitFlag, wait_flag)                 \
  X(ReadBuffer, read_buffer)

#endif  // GPUSTREAM_SERVER_SESSION_OPS_H_
