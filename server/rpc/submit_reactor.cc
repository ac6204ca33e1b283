// Submit stream handling.
#include "server/rpc/submit_reactor.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log/log.h"
#include "server/rpc/status_util.h"
#include "server/session/ops.h"

namespace gpustream::rpc {
namespace {

using session::Session;

// Serialized sizes are counted generously, so that a packed response stays
// under the message limit whatever the varint widths turn out to be.
// Left out of each response for gRPC's framing and rounding.
constexpr uint64_t kFramingMargin = 1024;
// SubmitResponse.completed_seq.
constexpr uint64_t kResponseOverhead = 16;
// One element of SubmitResponse.results beyond the CommandResult itself:
// tag and length.
constexpr uint64_t kEntryOverhead = 6;
// A read piece beyond its data: entry, seq, read_buffer, data's tag and
// length, chunk_offset, more.
constexpr uint64_t kPieceOverhead = 64;
// A piece smaller than this waits for the next response instead.
constexpr uint64_t kMinPieceBytes = 4096;
// Responses never get smaller than this, whatever the options say.
constexpr uint64_t kMinResponseBudget = 16 << 10;

uint64_t ResponseBudget(const SubmitStreamOptions& options) {
  const uint64_t cap =
      std::min(options.max_message_bytes, SubmitReactor::kMaxResponseBytes);
  return cap > kMinResponseBudget + kFramingMargin ? cap - kFramingMargin
                                                   : kMinResponseBudget;
}

}  // namespace

SubmitReactor::SubmitReactor(session::ServerCore& core,
                             absl::StatusOr<session::Principal> who,
                             SubmitStreamOptions options)
    : core_(core),
      who_(who.ok() ? *who : session::Principal{}),
      max_pending_result_bytes_(options.max_pending_result_bytes),
      response_budget_(ResponseBudget(options)),
      metrics_(options.metrics) {
  if (metrics_ != nullptr) metrics_->SubmitStreamOpened();
  if (!who.ok()) {
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    final_status_ = ToGrpcStatus(who.status());
    MaybeWriteOrFinish();
    return;
  }
  // Under mu_: publishes the members set above to the first OnReadDone.
  absl::MutexLock lock(&mu_);
  StartRead(&request_);
}

void SubmitReactor::OnReadDone(bool ok) {
  // Callbacks of one stream may run on different gRPC threads, ordered by
  // gRPC's own (uninstrumented) machinery. Taking mu_ first makes that order
  // visible to ThreadSanitizer: everything the previous callback did before
  // it released mu_ (and called StartRead) happens-before what follows.
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    if (!ok) {
      reads_done_ = true;
      ReleaseSession();
      MaybeWriteOrFinish();
      return;
    }
    session = session_;
  }
  if (session == nullptr || (!request_.session_id().empty() &&
                             request_.session_id() != session->id())) {
    absl::Status error;
    if (session != nullptr) {
      error = absl::InvalidArgumentError(
          "session_id differs from the stream's session; open one stream per "
          "session");
    } else if (request_.session_id().empty()) {
      error = absl::InvalidArgumentError(
          "session_id is required on the first SubmitRequest");
    } else {
      auto found = core_.FindSession(who_, request_.session_id());
      if (found.ok()) {
        session = *std::move(found);
        session->StreamOpened();
        absl::MutexLock lock(&mu_);
        session_ = session;
        holds_session_ = true;
      } else {
        error = found.status();
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
  session->Touch();
  if (metrics_ != nullptr) metrics_->SubmitRequest();
  uint64_t last_seq = 0;
  for (const v1::Command& command : request_.commands()) {
    RunCommand(*session, command);
    last_seq = command.seq();
  }
  absl::MutexLock lock(&mu_);
  completed_seq_ = std::max(completed_seq_, last_seq);
  // Flow control: a client that does not read its results stops being
  // read from; OnWriteDone resumes once they have gone out.
  read_paused_ = !broken_ && unsent_other_bytes_ > kPauseReadingBytes;
  MaybeWriteOrFinish();
  // Started under mu_, so the next OnReadDone sees all of the above.
  if (!read_paused_) StartRead(&request_);
}

std::unique_ptr<v1::CommandResult> SubmitReactor::Begin(uint64_t seq) {
  auto result = std::make_unique<v1::CommandResult>();
  result->set_seq(seq);
  absl::MutexLock lock(&mu_);
  ++inflight_;
  return result;
}

namespace {

// The id is a secret: named by field, never echoed.
absl::Status ForeignSession(uint64_t seq) {
  return absl::InvalidArgumentError(absl::StrCat(
      "command seq ", seq, ": session_id differs from the stream's session"));
}

}  // namespace

void SubmitReactor::RunCommand(Session& session, const v1::Command& command) {
  const uint64_t seq = command.seq();
  if (core_.shutting_down()) {
    Complete(Begin(seq), absl::UnavailableError("daemon shutting down"), true);
    return;
  }
  switch (command.op_case()) {
#define GPUSTREAM_CASE(Name, field)                    \
  case v1::Command::k##Name:                           \
    Run(session, seq, &Session::Name, command.field(), \
        &v1::CommandResult::mutable_##field);          \
    return;
    GPUSTREAM_SESSION_OPS(GPUSTREAM_CASE)
#undef GPUSTREAM_CASE
    case v1::Command::kCloseSession: {
      auto result = Begin(seq);
      v1::CloseSessionRequest req = command.close_session();
      if (req.session_id().empty()) req.set_session_id(session.id());
      if (req.session_id() != session.id()) {
        Complete(std::move(result), ForeignSession(seq), true);
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
      req.set_session_id(session.id());
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
// A HOST_SHARED allocation answers its share ticket.
bool ClientMintedId(const v1::AllocateBufferRequest& r) {
  return r.id() != 0 && r.kind() != v1::MEMORY_KIND_HOST_SHARED;
}
bool ClientMintedId(const v1::EndCaptureRequest& r) { return r.id() != 0; }

// The result bytes a command promises: a read's data.
template <typename Req>
uint64_t PromisedBytes(const Req&) {
  return 0;
}
uint64_t PromisedBytes(const v1::ReadBufferRequest& r) { return r.size(); }

}  // namespace

template <typename Req, typename Resp, typename Op>
void SubmitReactor::Run(Session& session, uint64_t seq, Op op, const Req& req,
                        Resp* (v1::CommandResult::*mutable_result)()) {
  auto result = std::make_unique<v1::CommandResult>();
  result->set_seq(seq);
  Resp* resp = (result.get()->*mutable_result)();
  // Waiting commands and responses with fields (data, even all zero) are
  // always answered; plain successes travel only as completed_seq.
  const bool always_send =
      IsWaiting(*result) ||
      (Resp::descriptor()->field_count() > 0 && !ClientMintedId(req));
  const uint64_t promised = PromisedBytes(req);
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    // Back-pressure: a client that sends waiting commands faster than they
    // complete, or asks for more data than it reads, is refused rather than
    // let the daemon's memory grow without bound. Plain commands complete
    // at once and always pass: one of them may be what releases the waits.
    if (broken_ && promised > 0) {
      refused = absl::CancelledError(absl::StrCat(
          "command seq ", seq, ": the stream is cancelled; read not done"));
    } else if (always_send && inflight_ >= kMaxInflight) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("command seq ", seq, ": ", inflight_,
                       " commands of this stream are still waiting (limit ",
                       kMaxInflight, "); collect their results first"));
    } else if (promised > 0 && !session.pending_results().TryTake(
                                   promised, max_pending_result_bytes_)) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "command seq ", seq, ": a read of ", promised,
          " bytes would exceed max_pending_result_bytes (",
          max_pending_result_bytes_, ") of session ", session.owner().public_id,
          ": ", session.pending_results().used(),
          " bytes of earlier reads (on its streams and ReadBuffer calls) "
          "are not yet sent; read those results first, or read in smaller "
          "pieces"));
    } else {
      ChangePendingResultLocked(promised);
    }
    ++inflight_;
  }
  if (!refused.ok()) {
    Complete(std::move(result), refused, always_send);
    return;
  }
  if (!req.session_id().empty() && req.session_id() != session.id()) {
    Complete(std::move(result), ForeignSession(seq), always_send, promised);
    return;
  }
  session::Invoke(
      session, op, req, resp,
      [this, result = std::move(result), always_send,
       promised](absl::Status s) mutable {
        Complete(std::move(result), s, always_send, promised);
      },
      cancel_);
}

void SubmitReactor::Complete(std::unique_ptr<v1::CommandResult> result,
                             const absl::Status& status, bool send_if_ok,
                             uint64_t promised) {
  const bool send = send_if_ok || !status.ok();
  if (metrics_ != nullptr) metrics_->SubmitCommandDone(status.raw_code());
  // `result` is freed, when it is dropped, after the lock is released.
  absl::MutexLock lock(&mu_);
  --inflight_;
  if (broken_ || !send) {
    // Nobody will read it, or there is nothing to say: release it at once.
    ChangePendingResultLocked(-static_cast<int64_t>(promised));
  } else {
    if (!status.ok()) {
      result->clear_result();
      ToProto(status, result->mutable_status());
    }
    Outgoing out;
    const bool read_data = result->has_read_buffer();
    if (read_data) {
      out.promised = promised;
    } else {
      ChangePendingResultLocked(-static_cast<int64_t>(promised));  // Failed.
      out.other = result->ByteSizeLong();
      unsent_other_bytes_ += out.other;
    }
    out.result = std::move(result);
    (read_data ? reads_ : others_).push_back(std::move(out));
  }
  MaybeWriteOrFinish();
}

void SubmitReactor::PackResponse() {
  writing_promised_ = 0;
  writing_other_ = 0;
  uint64_t used = kResponseOverhead;
  while (!others_.empty()) {
    Outgoing& out = others_.front();
    const uint64_t whole = out.result->ByteSizeLong() + kEntryOverhead;
    // One that does not fit goes alone if it must: these are far smaller
    // than any message.
    if (used + whole > response_budget_ && writing_.results_size() > 0) break;
    used += whole;
    writing_other_ += out.other;
    writing_.mutable_results()->AddAllocated(out.result.release());
    others_.pop_front();
  }
  if (others_.empty()) advertised_seq_ = completed_seq_;
  writing_.set_completed_seq(advertised_seq_);
  while (others_.empty() && !reads_.empty()) {
    Outgoing& out = reads_.front();
    v1::CommandResult& result = *out.result;
    if (out.sent == 0 &&
        used + result.ByteSizeLong() + kEntryOverhead <= response_budget_) {
      used += result.ByteSizeLong() + kEntryOverhead;
      writing_promised_ += out.promised;
      writing_.mutable_results()->AddAllocated(out.result.release());
      reads_.pop_front();
      continue;
    }
    // Too large for the rest of this response: its next piece. The
    // promised bytes are released with the last piece.
    if (used + kPieceOverhead + kMinPieceBytes > response_budget_) break;
    const std::string& data = result.read_buffer().data();
    const uint64_t n = std::min<uint64_t>(
        data.size() - out.sent, response_budget_ - used - kPieceOverhead);
    v1::CommandResult* piece = writing_.add_results();
    piece->set_seq(result.seq());
    v1::ReadBufferResponse* read = piece->mutable_read_buffer();
    read->mutable_data()->assign(data, out.sent, n);
    read->set_chunk_offset(out.sent);
    out.sent += n;
    read->set_more(out.sent < data.size());
    used += n + kPieceOverhead;
    if (read->more()) break;  // This response is full.
    writing_promised_ += out.promised;
    reads_.pop_front();
  }
}

bool SubmitReactor::HasUnsent() const {
  return !others_.empty() || !reads_.empty() ||
         completed_seq_ > advertised_seq_;
}

void SubmitReactor::ChangePendingResultLocked(int64_t bytes) {
  pending_result_bytes_ += static_cast<uint64_t>(bytes);  // Wraps for < 0.
  if (bytes < 0 && session_ != nullptr) {
    session_->pending_results().Give(static_cast<uint64_t>(-bytes));
  }
  if (metrics_ != nullptr) metrics_->SubmitResultBytes(bytes);
}

void SubmitReactor::DropUnsent() {
  for (const Outgoing& out : reads_) {
    ChangePendingResultLocked(-static_cast<int64_t>(out.promised));
  }
  for (const Outgoing& out : others_) unsent_other_bytes_ -= out.other;
  reads_.clear();
  others_.clear();
}

void SubmitReactor::MaybeWriteOrFinish() {
  if (finished_) return;
  if (broken_) {
    DropUnsent();
    if (read_paused_) {  // No read will ever end the stream's reading.
      read_paused_ = false;
      reads_done_ = true;
      ReleaseSession();
    }
  }
  if (!write_in_flight_ && !broken_ && HasUnsent()) {
    PackResponse();
    write_in_flight_ = true;
    StartWrite(&writing_);
    return;
  }
  if (reads_done_ && inflight_ == 0 && !write_in_flight_ &&
      (broken_ || !HasUnsent())) {
    finished_ = true;
    Finish(final_status_);
  }
}

void SubmitReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  ChangePendingResultLocked(-static_cast<int64_t>(writing_promised_));
  writing_promised_ = 0;
  unsent_other_bytes_ -= writing_other_;
  writing_other_ = 0;
  v1::SubmitResponse().Swap(&writing_);  // Frees what was written, now.
  if (!ok) broken_ = true;
  if (read_paused_ && !broken_ && unsent_other_bytes_ <= kPauseReadingBytes) {
    read_paused_ = false;
    StartRead(&request_);
  }
  MaybeWriteOrFinish();
}

void SubmitReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;  // First: the waits ended below queue no results.
    ReleaseSession();
  }
  // Outside the lock: the waits it ends complete into Complete(), which
  // takes it.
  cancel_->Cancel();
  absl::MutexLock lock(&mu_);
  MaybeWriteOrFinish();
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
    // Finish waited for every command and write, so this is 0; if not, say
    // so, and the gauge keeps no share of a stream that is gone.
    if (pending_result_bytes_ != 0) {
      log::Error("submit_result_bytes_left")
          .Num("bytes", pending_result_bytes_)
          .Str("action", "released from gpustream_submit_result_bytes_pending");
      ChangePendingResultLocked(-static_cast<int64_t>(pending_result_bytes_));
    }
  }
  if (metrics_ != nullptr) metrics_->SubmitStreamClosed();
  delete this;
}

}  // namespace gpustream::rpc
