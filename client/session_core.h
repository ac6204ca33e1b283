// The client's engine for one session: the Submit stream, command batching,
// results by seq, and host-function callbacks. Internal to the library.
#ifndef GPUSTREAM_CLIENT_SESSION_CORE_H_
#define GPUSTREAM_CLIENT_SESSION_CORE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"

namespace gpustream::client {

// A call context carrying "authorization: Bearer <token>" (none if empty).
std::unique_ptr<grpc::ClientContext> NewClientContext(const std::string& token);

// Thread-safe. Commands are appended to a batch and sent when the batch is
// full or a caller needs an answer (Flush / Call), so enqueueing costs no
// round trip. The server reports failures of batched commands
// asynchronously; they are kept, in order, until TakeError collects them
// (the next synchronize, as CUDA reports asynchronous errors).
class SessionCore {
 public:
  // Commands per SubmitRequest before an automatic flush.
  static constexpr int kMaxBatch = 512;

  SessionCore(std::shared_ptr<grpc::Channel> channel, std::string token,
              std::string session_id, uint64_t default_queue_id);
  ~SessionCore();  // Close()s.
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  const std::string& id() const { return session_id_; }
  uint64_t default_queue_id() const { return default_queue_id_; }
  v1::GpuStream::Stub& stub() { return *stub_; }

  // A fresh id from the client range [1, 2^63).
  uint64_t MintId() { return next_id_.fetch_add(1); }

  // Appends one command, filled in by `fill`; returns its seq.
  uint64_t Enqueue(absl::FunctionRef<void(v1::Command&)> fill);
  // Sends the batch now.
  absl::Status Flush();
  // How the server answers a command that succeeds.
  enum class Answer {
    kResult,  // With a CommandResult (waiting or data-carrying commands).
    kAck,     // Only through completed_seq (plain commands).
  };

  // Enqueues, flushes and waits for the command's outcome; the status is the
  // command's own. `timeout` bounds the wait (infinite by default).
  absl::StatusOr<v1::CommandResult> Call(
      absl::FunctionRef<void(v1::Command&)> fill,
      Answer answer = Answer::kResult,
      absl::Duration timeout = absl::InfiniteDuration());

  // The first failure of a batched command since the last call (OK if none);
  // later ones are counted in its message.
  absl::Status TakeError();

  // Registers `fn` to run when a HostFuncReached for `callback_id` arrives;
  // afterwards the library stores `value` into `flag_id`, which the queue
  // waits on. Starts the notification watcher on first use.
  void AddHostFunc(uint64_t callback_id, std::function<void()> fn,
                   uint64_t flag_id, uint64_t value);

  // Half-closes the stream, waits for outstanding results, closes the
  // session on the server. Idempotent.
  absl::Status Close();

 private:
  struct Waiter {
    absl::Notification done;
    absl::StatusOr<v1::CommandResult> result;
    // A read's size: what its pieces add up to (ReadLoop reserves it).
    uint64_t read_size = 0;
  };
  struct HostFunc {
    std::function<void()> fn;
    uint64_t flag_id;
    uint64_t value;
  };

  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(batch_mu_);
  // Results arrive on the reader thread. A read larger than one message
  // comes as several results with its seq (ReadBufferResponse.chunk_offset,
  // `more`); ReadLoop joins them, in order, and hands the waiter one result
  // as if the read had come whole.
  void ReadLoop();
  // Adds a piece of a read result to `partial` (the pieces so far of its
  // seq). Whether the read is complete: then `result` holds all its data,
  // or the error if the pieces did not follow each other.
  bool JoinReadPiece(v1::CommandResult& result, std::string& partial)
      ABSL_LOCKS_EXCLUDED(mu_);
  void WatchLoop();
  void RecordError(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  void FailAll(const absl::Status& status);

  const std::string token_;
  const std::string session_id_;
  const uint64_t default_queue_id_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::atomic<uint64_t> next_id_{1};

  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>>
      stream_;
  std::thread reader_;

  // Guards the batch and the stream's write side; taken before mu_.
  absl::Mutex batch_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  v1::SubmitRequest batch_ ABSL_GUARDED_BY(batch_mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(batch_mu_) = 1;
  bool writes_done_ ABSL_GUARDED_BY(batch_mu_) = false;

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_
      ABSL_GUARDED_BY(mu_);
  // Waiters answered by completed_seq, by seq.
  std::map<uint64_t, std::shared_ptr<Waiter>> ack_waiters_ ABSL_GUARDED_BY(mu_);
  absl::Status stream_error_ ABSL_GUARDED_BY(mu_);  // Set once broken.
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  uint64_t more_errors_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, HostFunc> host_funcs_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;

  // The notification watcher, started by the first host function.
  std::unique_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(mu_);
  std::thread watcher_;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_SESSION_CORE_H_
