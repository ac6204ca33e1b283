// The client's engine for one session: the Submit stream, prompt batched
// sending, results by seq, errors by queue, and host-function callbacks.
// Internal to the library.
#ifndef GPUSTREAM_CLIENT_SESSION_CORE_H_
#define GPUSTREAM_CLIENT_SESSION_CORE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/command_record.h"
#include "client/kernel_signatures.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"

namespace gpustream::client {

// A call context carrying "authorization: Bearer <token>" (none if empty).
std::unique_ptr<grpc::ClientContext> NewClientContext(const std::string& token);

// Thread-safe.
//
// Sending: an enqueued command joins the newest pending batch and a writer
// thread sends batches one at a time: at once when no write is in flight,
// and while one is, later commands coalesce into the next batch, so a lone
// command reaches the daemon within a round trip and batching happens under
// load without a timer. Batches hold at most kMaxBatchCommands commands and
// kMaxBatchBytes bytes. No lock is held across a stream write: only the
// writer thread writes, and it takes its batch out under the lock first.
// Enqueue blocks (backpressure) while kMaxPendingBytes are waiting to be
// sent.
//
// Errors: the server reports failures of commands nobody waits for
// asynchronously. Each is kept for the queue the command targeted and
// returned by that queue's next synchronize (TakeError(queue)); failures of
// commands that target no queue are returned by the next TakeError of any
// queue. Messages name the call (op and ids) and its seq.
class SessionCore {
 public:
  static constexpr int kMaxBatchCommands = 512;
  // Under gRPC's default 4 MiB message limit, so any peer accepts it.
  static constexpr size_t kMaxBatchBytes = 4 << 20;
  // The largest WriteBuffer payload in one command (larger writes are
  // split by Queue::write).
  static constexpr size_t kMaxWritePiece = 1 << 20;
  static constexpr size_t kMaxPendingBytes = 64 << 20;
  // How long Close() may take in all (it waits for a host function that is
  // running to return: user code cannot be stopped).
  static constexpr absl::Duration kCloseTimeout = absl::Seconds(10);

  // `session_id` is the secret (sent, never put in a message); `public_id`
  // names the session in messages.
  SessionCore(std::shared_ptr<grpc::Channel> channel, std::string token,
              std::string session_id, uint64_t default_queue_id,
              std::string public_id,
              std::shared_ptr<const KernelSignatures> signatures,
              absl::Duration enqueue_timeout = absl::ZeroDuration());
  ~SessionCore();  // Close()s.
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  const std::string& id() const { return session_id_; }
  const std::string& public_id() const { return public_id_; }
  // The daemon's kernel signatures, for checking launches before sending.
  const KernelSignatures& signatures() const { return *signatures_; }
  uint64_t default_queue_id() const { return default_queue_id_; }
  v1::GpuStream::Stub& stub() { return *stub_; }

  // The daemon's share socket (GetServerInfo, asked once); empty where
  // sharing is off.
  absl::StatusOr<std::string> ShareSocket();

  // A fresh id from the client range [1, 2^63).
  uint64_t MintId() { return next_id_.fetch_add(1); }

  // Appends one command, filled in by `fill`, to the stream, waiting for
  // room (at most the session's enqueue_timeout: past it the command is
  // refused, reported like a rejection). Whether it was queued to be sent.
  // After Close (or once the stream broke) the command is dropped.
  bool Enqueue(absl::FunctionRef<void(v1::Command&)> fill);
  // The same for a command that gives something back (a handle's destroy,
  // a free): it never waits for room, so it is never refused for lack of
  // it.
  void EnqueueRelease(absl::FunctionRef<void(v1::Command&)> fill);

  // While alive on the thread that made it, the commands that thread
  // enqueues to `core` form one group: room is waited for once, here
  // (honouring enqueue_timeout), and they never wait again, so a group
  // (a host function's protocol, an event created and recorded) is sent
  // whole or, past the timeout, refused whole. Groups do not nest.
  class Group {
   public:
    explicit Group(SessionCore& core);
    ~Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    // OK, or why the group's commands are refused.
    const absl::Status& status() const { return status_; }

   private:
    friend class SessionCore;
    SessionCore& core_;
    absl::Status status_;
  };
  // Files `status` as the rejection of the command `fill` describes, which
  // is not sent (the client found it wrong); reported like a rejection by
  // the daemon.
  void Reject(absl::FunctionRef<void(v1::Command&)> fill,
              const absl::Status& status);
  // Waits until every command enqueued before has been written to the
  // stream (not answered); the stream's error if it broke.
  absl::Status Flush();

  // How the server answers a command that succeeds.
  enum class Answer {
    kResult,  // With a CommandResult (waiting or data-carrying commands).
    kAck,     // Only through completed_seq (plain commands).
  };
  // Enqueues and waits for the command's outcome; the status is the
  // command's own. `timeout` bounds the wait (infinite by default).
  absl::StatusOr<v1::CommandResult> Call(
      absl::FunctionRef<void(v1::Command&)> fill,
      Answer answer = Answer::kResult,
      absl::Duration timeout = absl::InfiniteDuration());

  // Enqueues a command whose outcome nobody hears, success or failure (a
  // clean-up that may find nothing to clean). Never blocks.
  void EnqueueUnheard(absl::FunctionRef<void(v1::Command&)> fill);

  // The first failure, since the last call, of a command that targeted
  // `queue_id` or no queue (OK if none); later ones are counted in its
  // message. With `queue_id` 0: the first of every queue's.
  absl::Status TakeError(uint64_t queue_id);
  // The failures of commands that targeted `queue_id` only (for read(),
  // whose bytes a queue-less failure says nothing about).
  absl::Status TakeQueueError(uint64_t queue_id);

  // Enqueues destroy_queue; once the daemon answers it, destroy_flag for
  // each of `flags_after`.
  void DestroyQueue(uint64_t queue_id, std::vector<uint64_t> flags_after);

  // Queue handles register their ids while they live; failures for queues
  // with no live handle are reported as queue-less ones.
  void AttachQueue(uint64_t queue_id);
  void DetachQueue(uint64_t queue_id);

  // How a queue shows it reached, and is held at, one host function: the
  // queue writes `ticket` into `reached_flag_id` right before its
  // EnqueueHostFunc (all earlier work has completed then), and after it
  // waits until `release_flag_id` >= `ticket`.
  struct HostFuncFlags {
    uint64_t release_flag_id = 0;
    uint64_t reached_flag_id = 0;
    uint64_t ticket = 0;
  };
  // Registers `fn` to run when a HostFuncReached for `callback_id` arrives;
  // afterwards the library stores the ticket into the release flag. Starts
  // the notification watcher on first use. The watcher reconnects if its
  // stream breaks while the session is open, and then (or when the daemon
  // reports dropped notifications) runs the host functions whose queues
  // have reached them by their reached flags: each runs exactly once.
  void AddHostFunc(uint64_t callback_id, std::function<void()> fn,
                   HostFuncFlags flags);

  // Sends what is pending, closes the session on the server (releasing its
  // parked waits), ends the streams. Bounded by kCloseTimeout, after which
  // the streams are cancelled. Idempotent.
  absl::Status Close();

  // Tests: breaks the current notification stream (the watcher reconnects)
  // and counts the streams the watcher has opened.
  void BreakNotificationStreamForTesting();
  int notification_streams_opened() const { return watch_streams_opened_; }
  // Host functions found reached through their queues' reached flags (no
  // notification came for them).
  int recovered_host_funcs() const { return recovered_host_funcs_; }

 private:
  struct Waiter {
    absl::Notification done;
    absl::StatusOr<v1::CommandResult> result;
    // A read's size: what its pieces add up to (ReadLoop reserves it).
    uint64_t read_size = 0;
  };
  struct HostFunc {
    std::function<void()> fn;
    HostFuncFlags flags;
  };
  struct Batch {
    v1::SubmitRequest request;
    size_t bytes = 0;
    uint64_t last_seq = 0;
  };
  // The pending failures of a queue (or of queue-less commands): each is
  // reported, in seq order, up to kMaxListedFailures; past that the ones
  // with the highest seqs are counted.
  static constexpr size_t kMaxListedFailures = 256;
  struct ErrorSlot {
    std::vector<std::pair<uint64_t, absl::Status>> failures;  // (seq, error)
    uint64_t unlisted = 0;
  };

  // Adds a filled command to the pending batches; `waiter` (may be null) is
  // registered for its seq first. Returns the seq; else the stream's error,
  // or why it was refused (without a waiter, also filed as its rejection).
  // `may_block`: wait while kMaxPendingBytes are pending (false on the
  // reader thread, which must keep reading for them to drain).
  // `deadline`: the caller's own bound on that wait (a call's timeout).
  absl::StatusOr<uint64_t> Push(v1::Command command,
                                std::shared_ptr<Waiter> waiter, Answer answer,
                                std::vector<uint64_t> flags_after = {},
                                bool may_block = true,
                                absl::Time deadline = absl::InfiniteFuture());
  // Waits while kMaxPendingBytes are pending, until `deadline` or the
  // session's enqueue_timeout from now, whichever is first; then
  // DEADLINE_EXCEEDED. OK once there is room (or the stream cannot send:
  // the caller's RefusalLocked says why).
  absl::Status WaitForRoomLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the waiter of `seq` (its answer, if it comes, is discarded);
  // false if it was already answered.
  bool AbandonLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t FileRejection(CommandRecord record, const absl::Status& status);
  uint64_t FileRejectionLocked(CommandRecord record, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why no command can be sent any more (closed, or the stream broke); OK
  // while they can.
  absl::Status RefusalLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteLoop();
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
  // Files a failure reported for `seq` without a waiter.
  void RecordFailure(uint64_t seq, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void AddToSlot(ErrorSlot& slot, uint64_t seq, absl::Status status);
  static void MergeSlot(ErrorSlot& into, ErrorSlot from);
  // TakeError's work; queue-less failures too when `with_queue_less`.
  absl::Status TakeErrors(uint64_t queue_id, bool with_queue_less);
  // The watcher thread: reads the session's notifications, reopening the
  // stream (from the last id handled) when it breaks.
  void WatchLoop();
  // Runs the host function a notification names, or recovers those lost
  // when it reports dropped ones; on the watcher thread.
  void HandleNotification(const v1::Notification& notification);
  // Runs a host function, then releases its queue.
  void RunHostFunc(HostFunc host_func);
  // Runs, in ticket order, the host functions whose queues' reached flags
  // show they were passed although no notification came for them.
  void RecoverLostHostFuncs();
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string token_;
  const std::string session_id_;
  absl::Mutex share_mu_;
  std::optional<std::string> share_socket_ ABSL_GUARDED_BY(share_mu_);
  const std::string public_id_;
  const std::shared_ptr<const KernelSignatures> signatures_;
  // SessionOptions::enqueue_timeout; zero: none.
  const absl::Duration enqueue_timeout_;
  const uint64_t default_queue_id_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::atomic<uint64_t> next_id_{1};

  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>>
      stream_;
  std::thread writer_;
  std::thread reader_;
  absl::Notification reader_done_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;   // Batches to send, or stopping.
  absl::CondVar space_cv_;  // Pending bytes fell, or a write ended.

  // Sending. Batches wait here in order; the writer takes the oldest.
  std::deque<Batch> batches_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t queued_seq_ ABSL_GUARDED_BY(mu_) = 0;   // The last one batched.
  uint64_t written_seq_ ABSL_GUARDED_BY(mu_) = 0;  // Sent through here.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_writer_ ABSL_GUARDED_BY(mu_) = false;
  bool writer_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;  // The writer must stop.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;

  // Answers.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_
      ABSL_GUARDED_BY(mu_);
  // Waiters answered by completed_seq, by seq.
  std::map<uint64_t, std::shared_ptr<Waiter>> ack_waiters_ ABSL_GUARDED_BY(mu_);
  // Commands sent without a waiter and not yet settled, by seq.
  absl::btree_map<uint64_t, CommandRecord> unsettled_ ABSL_GUARDED_BY(mu_);
  // Calls whose caller stopped waiting (a client-side timeout), until their
  // answer comes: it is dropped, never filed as another queue's error.
  // Seq -> whether it is acknowledged through completed_seq (kAck); a
  // command with a result of its own (a read) stays until that result.
  absl::btree_map<uint64_t, bool> abandoned_ ABSL_GUARDED_BY(mu_);
  absl::Status stream_error_ ABSL_GUARDED_BY(mu_);  // Set once broken.

  // Errors.
  absl::flat_hash_set<uint64_t> live_queues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, ErrorSlot> queue_errors_ ABSL_GUARDED_BY(mu_);
  ErrorSlot session_errors_ ABSL_GUARDED_BY(mu_);

  // Host functions and the notification watcher, started by the first.
  absl::flat_hash_map<uint64_t, HostFunc> host_funcs_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(mu_);
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar watch_cv_;  // Close() interrupts the reconnect backoff.
  std::atomic<int> watch_streams_opened_{0};
  std::atomic<int> recovered_host_funcs_{0};
  std::thread watcher_;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_SESSION_CORE_H_
