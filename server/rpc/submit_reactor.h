// The server side of one Submit stream: pipelined commands of one session.
#ifndef GPUSTREAM_SERVER_RPC_SUBMIT_REACTOR_H_
#define GPUSTREAM_SERVER_RPC_SUBMIT_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/session/server_core.h"

namespace gpustream::rpc {

// What one Submit stream may make the daemon hold. Whoever creates the
// reactor (GpuStreamService::Submit) is to fill these from the daemon's
// ServerLimits; the defaults are safe where it does not.
struct SubmitStreamOptions {
  // Bytes that admitted ReadBuffer commands promise and that have not yet
  // been written to the client, over all of a session's streams and unary
  // ReadBuffer calls (ServerLimits.max_pending_result_bytes). A read that
  // would take the session past it is refused with RESOURCE_EXHAUSTED.
  uint64_t max_pending_result_bytes = uint64_t{256} << 20;
  // The server's max send message size (ServerLimits.max_message_bytes).
  // Every SubmitResponse stays under it and under kMaxResponseBytes, so the
  // default is right for any server that allows 4 MiB messages.
  uint64_t max_message_bytes = uint64_t{4} << 20;
  // Where streams, requests and command results are counted; none if null.
  // Must outlive every stream.
  metrics::Metrics* metrics = nullptr;
};

// Commands of each request run in order on the gRPC thread that read them;
// the next request is read only after. Waiting commands complete later on
// backend threads. Results queue in completion order, reads' data behind
// the others (small, and what completed_seq waits for), and are packed into
// the next write.
//
// Bounds, per stream:
//  - at most kMaxInflight waiting or data-carrying commands not completed
//    (more are refused with RESOURCE_EXHAUSTED);
//  - at most max_pending_result_bytes promised by admitted reads and not yet
//    written, counted over all of the session's streams and unary
//    ReadBuffer calls (Session::pending_results(); more reads are refused
//    with RESOURCE_EXHAUSTED naming the limit and the current use);
//  - other results awaiting the client: past kPauseReadingBytes of them the
//    reactor stops reading requests until the client has read them (flow
//    control instead of refusal, since plain commands always run);
//  - every SubmitResponse fits one message: a ReadBuffer result larger than
//    that is sent as several CommandResults with its seq, in order
//    (ReadBufferResponse.chunk_offset, `more` on all but the last).
// When the stream is cancelled or a write fails, queued results are freed at
// once, later completions are dropped as they come, and reads not yet
// enqueued are not performed.
//
// The reactor finishes once the client has half-closed (or the stream has
// broken) and every command has completed, and deletes itself in OnDone.
// Its state is guarded by mu_; gRPC reactions and backend completions may
// run on any thread. Every reaction takes mu_ before it reads state, and
// every StartRead/StartWrite/Finish is issued with mu_ held, so the order
// gRPC imposes between reactions is one ThreadSanitizer can see.
class SubmitReactor
    : public grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse> {
 public:
  static constexpr int kMaxInflight = 65536;
  static constexpr uint64_t kPauseReadingBytes = uint64_t{4} << 20;
  // Responses stay this small even where the server allows more: a client
  // with gRPC's default receive limit (4 MiB) can read them, and one large
  // read does not hold up the results behind it for long.
  static constexpr uint64_t kMaxResponseBytes = uint64_t{4} << 20;

  // `who` is the authenticated caller, or why authentication failed (then
  // the stream finishes at once with that status).
  SubmitReactor(session::ServerCore& core,
                absl::StatusOr<session::Principal> who,
                SubmitStreamOptions options = {});

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // A result waiting to be written.
  struct Outgoing {
    std::unique_ptr<v1::CommandResult> result;
    // Bytes of pending_result_bytes_ this result holds (admitted reads).
    uint64_t promised = 0;
    // Bytes of unsent_other_bytes_ it holds (every other result).
    uint64_t other = 0;
    // Data bytes of a read result already packed into pieces.
    uint64_t sent = 0;
  };

  // Run on the thread of the OnReadDone that read them, outside mu_.
  void RunCommand(session::Session& session, const v1::Command& command);
  // A result for command `seq`, counted in flight until Complete()d.
  std::unique_ptr<v1::CommandResult> Begin(uint64_t seq);
  template <typename Req, typename Resp, typename Op>
  void Run(session::Session& session, uint64_t seq, Op op, const Req& req,
           Resp* (v1::CommandResult::*mutable_result)());
  // Queues `result` for sending if it failed or `send_if_ok`. `promised`:
  // the bytes it was admitted with, released when it is written or dropped.
  void Complete(std::unique_ptr<v1::CommandResult> result,
                const absl::Status& status, bool send_if_ok,
                uint64_t promised = 0);
  // Ends the stream's hold on the session lease (once).
  void ReleaseSession() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills writing_ within response_budget_: queued results other than
  // reads' first, then read data.
  void PackResponse() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether anything waits to be written.
  bool HasUnsent() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees every queued result (the stream is broken).
  void DropUnsent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // pending_result_bytes_ += bytes, and the daemon-wide gauge with it; a
  // negative change also gives the bytes back to the session's
  // pending_results() (a positive one follows its TryTake).
  void ChangePendingResultLocked(int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeWriteOrFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  session::ServerCore& core_;
  const session::Principal who_;
  const uint64_t max_pending_result_bytes_;
  // Serialized bytes one SubmitResponse may take.
  const uint64_t response_budget_;
  metrics::Metrics* const metrics_;  // May be null.
  // Fired once the client is gone: the stream's waiting commands end at
  // once (their results would never be read) and the stream can finish.
  const session::Session::Cancel cancel_ =
      std::make_shared<session::CallCancel>();
  // Owned by the read in flight; read by OnReadDone, which takes mu_ before
  // looking at it (the hand-off from gRPC's thread is then visible to TSan).
  v1::SubmitRequest request_;

  absl::Mutex mu_;
  // Set by the first request. Guarded, although only OnReadDone writes it,
  // because consecutive OnReadDones may run on different threads.
  std::shared_ptr<session::Session> session_ ABSL_GUARDED_BY(mu_);
  // Results waiting to be written, each queue in completion order: reads'
  // data, and every other result (failures included, reads' too). The
  // latter are small and go first, so that completed_seq is not held up
  // behind large reads.
  std::deque<Outgoing> reads_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> others_ ABSL_GUARDED_BY(mu_);
  v1::SubmitResponse writing_ ABSL_GUARDED_BY(mu_);  // Write in flight.
  // The highest seq of the requests run so far, and the one last written.
  // A response carries the former only once others_ is empty: completed_seq
  // never passes a failure still queued. (A queued read's data is no
  // failure: a read that fails goes to others_.)
  uint64_t completed_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t advertised_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // No read in flight: waiting for the client to read its results.
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // Writes failed or cancelled.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool holds_session_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;  // Commands not yet completed.
  // Bytes promised by admitted reads, not yet written (or dropped); and of
  // those, the ones whose last piece is in writing_.
  uint64_t pending_result_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writing_promised_ ABSL_GUARDED_BY(mu_) = 0;
  // Serialized bytes of the results in others_ and of the others in
  // writing_; and of those in writing_.
  uint64_t unsent_other_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writing_other_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_SUBMIT_REACTOR_H_
