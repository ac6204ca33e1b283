// The client session engine.
#include "client/session_core.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/wire.h"

namespace gpustream::client {
namespace {

absl::Status FromProto(const v1::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

}  // namespace

std::unique_ptr<grpc::ClientContext> NewClientContext(
    const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

SessionCore::SessionCore(std::shared_ptr<grpc::Channel> channel,
                         std::string token, std::string session_id,
                         uint64_t default_queue_id)
    : token_(std::move(token)),
      session_id_(std::move(session_id)),
      default_queue_id_(default_queue_id),
      stub_(v1::GpuStream::NewStub(channel)) {
  stream_context_ = NewClientContext(token_);
  stream_ = stub_->Submit(stream_context_.get());
  batch_.set_session_id(session_id_);
  reader_ = std::thread(&SessionCore::ReadLoop, this);
}

SessionCore::~SessionCore() { (void)Close(); }

uint64_t SessionCore::Enqueue(absl::FunctionRef<void(v1::Command&)> fill) {
  absl::MutexLock lock(&batch_mu_);
  const uint64_t seq = next_seq_++;
  v1::Command* command = batch_.add_commands();
  command->set_seq(seq);
  fill(*command);
  if (batch_.commands_size() >= kMaxBatch) (void)FlushLocked();
  return seq;
}

absl::Status SessionCore::Flush() {
  absl::MutexLock lock(&batch_mu_);
  return FlushLocked();
}

absl::Status SessionCore::FlushLocked() {
  if (batch_.commands_size() == 0) return absl::OkStatus();
  if (writes_done_) {
    batch_.clear_commands();
    return absl::FailedPreconditionError(
        absl::StrCat("session ", session_id_, " is closed"));
  }
  const bool ok = stream_->Write(batch_);
  // Clear keeps the command objects allocated for the next batch.
  batch_.clear_commands();
  if (!ok) {
    absl::MutexLock lock(&mu_);
    return stream_error_.ok()
               ? absl::UnavailableError("the Submit stream is broken")
               : stream_error_;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CommandResult> SessionCore::Call(
    absl::FunctionRef<void(v1::Command&)> fill, Answer answer,
    absl::Duration timeout) {
  auto waiter = std::make_shared<Waiter>();
  uint64_t seq;
  {
    absl::MutexLock lock(&batch_mu_);
    {
      absl::MutexLock state(&mu_);
      if (!stream_error_.ok()) return stream_error_;
    }
    seq = next_seq_++;
    v1::Command* command = batch_.add_commands();
    command->set_seq(seq);
    fill(*command);
    if (command->has_read_buffer()) {
      waiter->read_size = command->read_buffer().size();
    }
    {
      absl::MutexLock state(&mu_);
      waiters_.emplace(seq, waiter);
      if (answer == Answer::kAck) ack_waiters_.emplace(seq, waiter);
    }
    if (absl::Status s = FlushLocked(); !s.ok()) {
      absl::MutexLock state(&mu_);
      waiters_.erase(seq);
      ack_waiters_.erase(seq);
      return s;
    }
  }
  if (!waiter->done.WaitForNotificationWithTimeout(timeout)) {
    absl::MutexLock state(&mu_);
    ack_waiters_.erase(seq);
    if (waiters_.erase(seq) > 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no answer to command seq ", seq, " within ",
                       absl::FormatDuration(timeout)));
    }
  }
  waiter->done.WaitForNotification();  // Answered during the timeout race.
  return std::move(waiter->result);
}

absl::Status SessionCore::TakeError() {
  absl::MutexLock lock(&mu_);
  absl::Status error = std::exchange(first_error_, absl::OkStatus());
  const uint64_t more = std::exchange(more_errors_, 0);
  if (more > 0) {
    return absl::Status(error.code(),
                        absl::StrCat(error.message(), " (and ", more,
                                     " later command failure(s))"));
  }
  return error;
}

void SessionCore::RecordError(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (first_error_.ok()) {
    first_error_ = status;
  } else {
    ++more_errors_;
  }
}

bool SessionCore::JoinReadPiece(v1::CommandResult& result,
                                std::string& partial) {
  v1::ReadBufferResponse& piece = *result.mutable_read_buffer();
  if (piece.chunk_offset() != partial.size()) {
    const std::string error = absl::StrCat(
        "command seq ", result.seq(), ": a read result's piece at ",
        piece.chunk_offset(), " follows ", partial.size(),
        " bytes; the daemon broke the protocol");
    result.clear_read_buffer();
    result.mutable_status()->set_code(
        static_cast<int>(absl::StatusCode::kInternal));
    result.mutable_status()->set_message(error);
    return true;
  }
  if (partial.empty()) {
    uint64_t size = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = waiters_.find(result.seq());
      if (it != waiters_.end()) size = it->second->read_size;
    }
    partial.reserve(size);
  }
  partial.append(piece.data());
  if (piece.more()) return false;
  piece.set_data(std::move(partial));
  piece.clear_chunk_offset();
  return true;
}

void SessionCore::ReadLoop() {
  v1::SubmitResponse response;
  // Reads arriving in pieces: the data so far, by seq. Only this thread
  // uses it.
  absl::flat_hash_map<uint64_t, std::string> partial_reads;
  while (stream_->Read(&response)) {
    for (v1::CommandResult& result : *response.mutable_results()) {
      if (result.has_read_buffer() &&
          (result.read_buffer().more() ||
           result.read_buffer().chunk_offset() > 0 ||
           partial_reads.contains(result.seq()))) {
        std::string& partial = partial_reads[result.seq()];
        if (!JoinReadPiece(result, partial)) continue;
        partial_reads.erase(result.seq());
      }
      absl::Status status = FromProto(result.status());
      std::shared_ptr<Waiter> waiter;
      {
        absl::MutexLock lock(&mu_);
        auto it = waiters_.find(result.seq());
        if (it != waiters_.end()) {
          waiter = std::move(it->second);
          waiters_.erase(it);
          ack_waiters_.erase(result.seq());
        }
      }
      if (waiter != nullptr) {
        if (status.ok()) {
          waiter->result = std::move(result);
        } else {
          waiter->result = status;
        }
        waiter->done.Notify();
      } else if (!status.ok()) {
        RecordError(absl::Status(
            status.code(), absl::StrCat("command seq ", result.seq(), ": ",
                                        status.message())));
      }
    }
    // Commands acknowledged without a result have succeeded; this
    // response's results came first.
    std::vector<std::shared_ptr<Waiter>> acked;
    {
      absl::MutexLock lock(&mu_);
      auto end = ack_waiters_.upper_bound(response.completed_seq());
      for (auto it = ack_waiters_.begin(); it != end; ++it) {
        waiters_.erase(it->first);
        acked.push_back(std::move(it->second));
      }
      ack_waiters_.erase(ack_waiters_.begin(), end);
    }
    for (auto& waiter : acked) {
      waiter->result = v1::CommandResult();
      waiter->done.Notify();
    }
  }
  absl::Status final_status = FromGrpc(stream_->Finish());
  if (final_status.ok()) {
    final_status = absl::FailedPreconditionError(
        absl::StrCat("session ", session_id_, " is closed"));
  }
  FailAll(final_status);
}

void SessionCore::FailAll(const absl::Status& status) {
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (stream_error_.ok()) stream_error_ = status;
    waiters.swap(waiters_);
    ack_waiters_.clear();
  }
  for (auto& [seq, waiter] : waiters) {
    waiter->result = status;
    waiter->done.Notify();
  }
}

void SessionCore::AddHostFunc(uint64_t callback_id, std::function<void()> fn,
                              uint64_t flag_id, uint64_t value) {
  absl::MutexLock lock(&mu_);
  host_funcs_.emplace(callback_id, HostFunc{std::move(fn), flag_id, value});
  if (watch_context_ == nullptr && !closed_) {
    watch_context_ = NewClientContext(token_);
    watcher_ = std::thread(&SessionCore::WatchLoop, this);
  }
}

void SessionCore::WatchLoop() {
  v1::WatchNotificationsRequest request;
  request.set_session_id(session_id_);
  grpc::ClientContext* context;
  {
    absl::MutexLock lock(&mu_);
    context = watch_context_.get();
  }
  auto reader = stub_->WatchNotifications(context, request);
  v1::Notification notification;
  while (reader->Read(&notification)) {
    if (notification.has_notifications_dropped()) {
      // The daemon's bound on unread notifications was reached (a host
      // function ran long): host functions among the dropped ones will not
      // run, and the queues waiting for them stay blocked. Say so at the
      // next synchronize rather than hang silently.
      RecordError(absl::DataLossError(absl::StrCat(
          notification.notifications_dropped().count(),
          " notifications of session ", session_id_,
          " were dropped by the daemon; host functions among them will not "
          "run")));
      continue;
    }
    if (!notification.has_host_func_reached()) continue;
    const uint64_t callback_id = notification.host_func_reached().callback_id();
    HostFunc host_func;
    {
      absl::MutexLock lock(&mu_);
      auto it = host_funcs_.find(callback_id);
      if (it == host_funcs_.end()) continue;
      host_func = std::move(it->second);
      host_funcs_.erase(it);
    }
    host_func.fn();
    // Let the queue go on past its WaitHostValue.
    Enqueue([&](v1::Command& c) {
      auto* signal = c.mutable_signal_flag();
      signal->set_flag_id(host_func.flag_id);
      signal->set_value(host_func.value);
    });
    (void)Flush();
  }
  (void)reader->Finish();
}

absl::Status SessionCore::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
  }
  absl::Status flushed = Flush();
  // Closing on the server first releases any wait a command is parked on,
  // so the stream can drain.
  v1::CloseSessionRequest request;
  request.set_session_id(session_id_);
  v1::CloseSessionResponse response;
  auto context = NewClientContext(token_);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(60));
  absl::Status closed =
      FromGrpc(stub_->CloseSession(context.get(), request, &response));
  {
    absl::MutexLock lock(&batch_mu_);
    writes_done_ = true;
    stream_->WritesDone();
  }
  reader_.join();
  {
    absl::MutexLock lock(&mu_);
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (watcher_.joinable()) watcher_.join();
  return flushed.ok() ? closed : flushed;
}

}  // namespace gpustream::client
