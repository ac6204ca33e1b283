// Submit stream handling.
#include "server/rpc/submit_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/rpc/status_util.h"
#include "server/session/ops.h"

namespace gpustream::rpc {
namespace {

using session::Session;

}  // namespace

SubmitReactor::SubmitReactor(session::ServerCore& core,
                             absl::StatusOr<session::Principal> who)
    : core_(core), who_(who.ok() ? *who : session::Principal{}) {
  if (!who.ok()) {
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    final_status_ = ToGrpcStatus(who.status());
    MaybeWriteOrFinish();
    return;
  }
  StartRead(&request_);
}

void SubmitReactor::OnReadDone(bool ok) {
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    ReleaseSession();
    MaybeWriteOrFinish();
    return;
  }
  if (session_ == nullptr || (!request_.session_id().empty() &&
                              request_.session_id() != session_->id())) {
    absl::Status error;
    if (session_ != nullptr) {
      error = absl::InvalidArgumentError(absl::StrCat(
          "session_id '", request_.session_id(),
          "' differs from the stream's session; open one stream per session"));
    } else if (request_.session_id().empty()) {
      error = absl::InvalidArgumentError(
          "session_id is required on the first SubmitRequest");
    } else {
      auto session = core_.FindSession(who_, request_.session_id());
      if (session.ok()) {
        session_ = *std::move(session);
        session_->StreamOpened();
        absl::MutexLock lock(&mu_);
        holds_session_ = true;
      } else {
        error = session.status();
      }
    }
    if (!error.ok()) {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      final_status_ = ToGrpcStatus(error);
      MaybeWriteOrFinish();
      return;
    }
  }
  session_->Touch();
  uint64_t last_seq = 0;
  for (const v1::Command& command : request_.commands()) {
    RunCommand(command);
    last_seq = command.seq();
  }
  {
    absl::MutexLock lock(&mu_);
    if (last_seq > pending_.completed_seq()) {
      pending_.set_completed_seq(last_seq);
      pending_dirty_ = true;
    }
    MaybeWriteOrFinish();
  }
  StartRead(&request_);
}

std::unique_ptr<v1::CommandResult> SubmitReactor::Begin(uint64_t seq) {
  auto result = std::make_unique<v1::CommandResult>();
  result->set_seq(seq);
  absl::MutexLock lock(&mu_);
  ++inflight_;
  return result;
}

namespace {

absl::Status ForeignSession(uint64_t seq, const std::string& session_id) {
  return absl::InvalidArgumentError(
      absl::StrCat("command seq ", seq, ": session_id '", session_id,
                   "' differs from the stream's session"));
}

}  // namespace

void SubmitReactor::RunCommand(const v1::Command& command) {
  const uint64_t seq = command.seq();
  if (core_.shutting_down()) {
    Complete(Begin(seq), absl::UnavailableError("daemon shutting down"), true);
    return;
  }
  switch (command.op_case()) {
#define GPUSTREAM_CASE(Name, field)           \
  case v1::Command::k##Name:                  \
    Run(seq, &Session::Name, command.field(), \
        &v1::CommandResult::mutable_##field); \
    return;
    GPUSTREAM_SESSION_OPS(GPUSTREAM_CASE)
#undef GPUSTREAM_CASE
    case v1::Command::kCloseSession: {
      auto result = Begin(seq);
      v1::CloseSessionRequest req = command.close_session();
      if (req.session_id().empty()) req.set_session_id(session_->id());
      if (req.session_id() != session_->id()) {
        Complete(std::move(result), ForeignSession(seq, req.session_id()),
                 true);
        return;
      }
      auto* resp = result->mutable_close_session();
      core_.CloseSession(
          who_, req, resp,
          [this, result = std::move(result)](absl::Status s) mutable {
            Complete(std::move(result), s, true);
          });
      return;
    }
    case v1::Command::kKeepAlive: {
      auto result = Begin(seq);
      v1::KeepAliveRequest req = command.keep_alive();
      req.set_session_id(session_->id());
      absl::Status s = core_.KeepAlive(who_, req, result->mutable_keep_alive());
      Complete(std::move(result), s, /*send_if_ok=*/true);
      return;
    }
    case v1::Command::OP_NOT_SET:
      break;
  }
  Complete(Begin(seq),
           absl::InvalidArgumentError(
               absl::StrCat("command seq ", seq, " has no op set")),
           true);
}

namespace {

bool IsWaiting(const v1::CommandResult& result) {
  switch (result.result_case()) {
#define GPUSTREAM_WAITING(Name, field) case v1::CommandResult::k##Name:
    GPUSTREAM_WAITING_OPS(GPUSTREAM_WAITING)
#undef GPUSTREAM_WAITING
    return true;
    default:
      return false;
  }
}

// A create whose id the client minted answers nothing the client does not
// know: on success it is only acknowledged, like any plain command.
template <typename Req>
bool ClientMintedId(const Req&) {
  return false;
}
bool ClientMintedId(const v1::CreateQueueRequest& r) { return r.id() != 0; }
bool ClientMintedId(const v1::CreateEventRequest& r) { return r.id() != 0; }
bool ClientMintedId(const v1::CreateFlagRequest& r) { return r.id() != 0; }
bool ClientMintedId(const v1::AllocateBufferRequest& r) { return r.id() != 0; }

}  // namespace

template <typename Req, typename Resp, typename Op>
void SubmitReactor::Run(uint64_t seq, Op op, const Req& req,
                        Resp* (v1::CommandResult::*mutable_result)()) {
  auto result = std::make_unique<v1::CommandResult>();
  result->set_seq(seq);
  Resp* resp = (result.get()->*mutable_result)();
  // Waiting commands and responses with fields (data, even all zero) are
  // always answered; plain successes travel only as completed_seq.
  const bool always_send =
      IsWaiting(*result) ||
      (Resp::descriptor()->field_count() > 0 && !ClientMintedId(req));
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    // Back-pressure: a client that sends waiting commands faster than they
    // complete, or does not read its results, is refused rather than let
    // the daemon's memory grow without bound. Plain commands complete at
    // once and always pass: one of them may be what releases the waits.
    if (always_send && inflight_ >= kMaxInflight) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("command seq ", seq, ": ", inflight_,
                       " commands of this stream are still waiting (limit ",
                       kMaxInflight, "); collect their results first"));
    } else if (always_send && unsent_bytes_ >= kMaxUnsentBytes) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "command seq ", seq, ": ", unsent_bytes_,
          " bytes of results await reading (limit ", kMaxUnsentBytes, ")"));
    }
    ++inflight_;
  }
  if (!refused.ok()) {
    Complete(std::move(result), refused, always_send);
    return;
  }
  if (!req.session_id().empty() && req.session_id() != session_->id()) {
    Complete(std::move(result), ForeignSession(seq, req.session_id()),
             always_send);
    return;
  }
  session::Invoke(
      *session_, op, req, resp,
      [this, result = std::move(result), always_send](absl::Status s) mutable {
        Complete(std::move(result), s, always_send);
      });
}

void SubmitReactor::Complete(std::unique_ptr<v1::CommandResult> result,
                             const absl::Status& status, bool send_if_ok) {
  const bool send = send_if_ok || !status.ok();
  absl::MutexLock lock(&mu_);
  if (send) {
    if (!status.ok()) {
      result->clear_result();
      ToProto(status, result->mutable_status());
    }
    unsent_bytes_ += result->ByteSizeLong();
    pending_.mutable_results()->AddAllocated(result.release());
    pending_dirty_ = true;
  }
  --inflight_;
  MaybeWriteOrFinish();
}

void SubmitReactor::MaybeWriteOrFinish() {
  if (finished_) return;
  if (!write_in_flight_ && pending_dirty_ && !broken_) {
    writing_.Swap(&pending_);
    writing_bytes_ = unsent_bytes_;
    pending_.Clear();
    pending_.set_completed_seq(writing_.completed_seq());
    pending_dirty_ = false;
    write_in_flight_ = true;
    StartWrite(&writing_);
    return;
  }
  if (reads_done_ && inflight_ == 0 && !write_in_flight_ &&
      (!pending_dirty_ || broken_)) {
    finished_ = true;
    Finish(final_status_);
  }
}

void SubmitReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  unsent_bytes_ -= writing_bytes_;
  writing_bytes_ = 0;
  if (!ok) broken_ = true;
  MaybeWriteOrFinish();
}

void SubmitReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  broken_ = true;
  ReleaseSession();
}

void SubmitReactor::ReleaseSession() {
  if (holds_session_) {
    holds_session_ = false;
    session_->StreamClosed();
  }
}

void SubmitReactor::OnDone() {
  {
    absl::MutexLock lock(&mu_);
    ReleaseSession();
  }
  delete this;
}

}  // namespace gpustream::rpc
