// What the client remembers of a command it sent without waiting for its
// answer, so that a rejection can name the call and reach the right queue.
#ifndef GPUSTREAM_CLIENT_COMMAND_RECORD_H_
#define GPUSTREAM_CLIENT_COMMAND_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::client {

// A compact description of one command: its op, the queue it targets and
// the ids it names. No payload is kept (a write's data is not copied).
struct CommandRecord {
  v1::Command::OpCase op = v1::Command::OP_NOT_SET;
  // The queue whose next synchronize() reports a rejection; 0 for commands
  // that target no queue (reported by the next synchronize of any queue).
  uint64_t queue_id = 0;
  // The other ids the command names (event, flag, buffer, other queue...),
  // 0 where none.
  uint64_t object_id = 0;
  uint64_t other_id = 0;
  // "module.kernel" for launches; empty otherwise.
  std::string kernel;
  // Whether the server always answers it with a CommandResult of its own,
  // so completed_seq does not settle it.
  bool expects_result = false;
  // destroy_queue: the library's flags of that queue, destroyed once the
  // daemon has destroyed the queue (its pending host functions need them
  // until it has drained).
  std::vector<uint64_t> flags_after;

  static CommandRecord Of(const v1::Command& command);
  // E.g. "launch_kernel samples.noop on queue 5", "free_buffer 9".
  std::string Describe() const;
};

// "queue 5", or "the default queue": the only queue a session holds whose
// id the daemon minted (from 2^63 up; this client mints below).
std::string QueueName(uint64_t queue_id);

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_COMMAND_RECORD_H_
