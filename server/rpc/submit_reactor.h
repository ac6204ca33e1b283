// The server side of one Submit stream: pipelined commands of one session.
#ifndef GPUSTREAM_SERVER_RPC_SUBMIT_REACTOR_H_
#define GPUSTREAM_SERVER_RPC_SUBMIT_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/session/server_core.h"

namespace gpustream::rpc {

// Commands of each request run in order on the gRPC thread that read them;
// the next request is read only after. Waiting commands complete later on
// backend threads; their results are coalesced into the next write. The
// reactor finishes once the client has half-closed and every command has
// completed, and deletes itself in OnDone.
class SubmitReactor
    : public grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse> {
 public:
  // Per stream: commands not yet completed, and bytes of results not yet
  // written, past which new waiting or data-carrying commands are refused
  // with RESOURCE_EXHAUSTED.
  static constexpr int kMaxInflight = 65536;
  static constexpr uint64_t kMaxUnsentBytes = uint64_t{256} << 20;

  // `who` is the authenticated caller, or why authentication failed (then
  // the stream finishes at once with that status).
  SubmitReactor(session::ServerCore& core,
                absl::StatusOr<session::Principal> who);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void RunCommand(const v1::Command& command);
  // A result for command `seq`, counted in flight until Complete()d.
  std::unique_ptr<v1::CommandResult> Begin(uint64_t seq);
  template <typename Req, typename Resp, typename Op>
  void Run(uint64_t seq, Op op, const Req& req,
           Resp* (v1::CommandResult::*mutable_result)());
  // Queues `result` for sending if it failed or `send_if_ok`.
  void Complete(std::unique_ptr<v1::CommandResult> result,
                const absl::Status& status, bool send_if_ok);
  // Ends the stream's hold on the session lease (once).
  void ReleaseSession() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeWriteOrFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  session::ServerCore& core_;
  const session::Principal who_;
  std::shared_ptr<session::Session> session_;  // Set by the first request.
  v1::SubmitRequest request_;                  // Owned by the read in flight.

  absl::Mutex mu_;
  v1::SubmitResponse pending_ ABSL_GUARDED_BY(mu_);  // Next to write.
  v1::SubmitResponse writing_ ABSL_GUARDED_BY(mu_);  // Write in flight.
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool pending_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // Writes failed or cancelled.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool holds_session_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;  // Commands not yet completed.
  // Bytes of results in pending_ and writing_, and of writing_ alone.
  uint64_t unsent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writing_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_SUBMIT_REACTOR_H_
