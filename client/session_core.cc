// The client session engine.
#include "client/session_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/wire.h"

namespace gpustream::client {
namespace {

absl::Status FromProto(const v1::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

// Room for a command's tag, length and seq (measured before the seq is
// set) inside its SubmitRequest.
constexpr size_t kCommandFraming = 24;

}  // namespace

std::unique_ptr<grpc::ClientContext> NewClientContext(
    const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

absl::StatusOr<std::string> SessionCore::ShareSocket() {
  absl::MutexLock lock(&share_mu_);
  if (share_socket_.has_value()) return *share_socket_;
  v1::GetServerInfoResponse response;
  auto context = NewClientContext(token_);
  context->set_deadline(absl::ToChronoTime(absl::Now() + kCloseTimeout));
  if (absl::Status s =
          FromGrpc(stub_->GetServerInfo(context.get(), {}, &response));
      !s.ok()) {
    return s;
  }
  share_socket_ = response.share_socket();
  return *share_socket_;
}

SessionCore::SessionCore(std::shared_ptr<grpc::Channel> channel,
                         std::string token, std::string session_id,
                         uint64_t default_queue_id, std::string public_id,
                         std::shared_ptr<const KernelSignatures> signatures,
                         absl::Duration enqueue_timeout)
    : token_(std::move(token)),
      session_id_(std::move(session_id)),
      public_id_(std::move(public_id)),
      signatures_(signatures != nullptr
                      ? std::move(signatures)
                      : std::make_shared<const KernelSignatures>()),
      enqueue_timeout_(enqueue_timeout),
      default_queue_id_(default_queue_id),
      stub_(v1::GpuStream::NewStub(channel)) {
  stream_context_ = NewClientContext(token_);
  stream_ = stub_->Submit(stream_context_.get());
  writer_ = std::thread(&SessionCore::WriteLoop, this);
  reader_ = std::thread(&SessionCore::ReadLoop, this);
}

SessionCore::~SessionCore() { (void)Close(); }

namespace {
// The group the calling thread has open (SessionCore::Group), if any.
thread_local const SessionCore::Group* current_group = nullptr;
}  // namespace

SessionCore::Group::Group(SessionCore& core) : core_(core) {
  {
    absl::MutexLock lock(&core_.mu_);
    status_ = core_.WaitForRoomLocked(absl::InfiniteFuture());
  }
  current_group = this;
}

SessionCore::Group::~Group() { current_group = nullptr; }

bool SessionCore::Enqueue(absl::FunctionRef<void(v1::Command&)> fill) {
  v1::Command command;
  fill(command);
  // A dropped command's failure is the stream's or the closed session's,
  // which every later call reports; a refused one is filed.
  return Push(std::move(command), nullptr, Answer::kAck).ok();
}

void SessionCore::EnqueueRelease(absl::FunctionRef<void(v1::Command&)> fill) {
  v1::Command command;
  fill(command);
  (void)Push(std::move(command), nullptr, Answer::kAck, {},
             /*may_block=*/false);
}

void SessionCore::Reject(absl::FunctionRef<void(v1::Command&)> fill,
                         const absl::Status& status) {
  v1::Command command;
  fill(command);
  FileRejection(CommandRecord::Of(command), status);
}

uint64_t SessionCore::FileRejection(CommandRecord record,
                                    const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  return FileRejectionLocked(std::move(record), status);
}

uint64_t SessionCore::FileRejectionLocked(CommandRecord record,
                                          const absl::Status& status) {
  // A seq of its own, never sent: the report names and orders it like a
  // rejection by the daemon.
  const uint64_t seq = next_seq_++;
  unsettled_.emplace(seq, std::move(record));
  RecordFailure(seq, status);
  return seq;
}

absl::Status SessionCore::RefusalLocked() const {
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", public_id_, " is closed"));
  }
  if (!stream_error_.ok()) return stream_error_;
  if (writer_done_) {
    return absl::UnavailableError(absl::StrCat("the Submit stream of session ",
                                               public_id_, " is broken"));
  }
  return absl::OkStatus();
}

void SessionCore::DestroyQueue(uint64_t queue_id,
                               std::vector<uint64_t> flags_after) {
  v1::Command command;
  command.mutable_destroy_queue()->set_queue_id(queue_id);
  // A release: never refused for lack of room.
  (void)Push(std::move(command), nullptr, Answer::kAck, std::move(flags_after),
             /*may_block=*/false);
}

absl::StatusOr<uint64_t> SessionCore::Push(
    v1::Command command, std::shared_ptr<Waiter> waiter, Answer answer,
    std::vector<uint64_t> flags_after, bool may_block, absl::Time deadline) {
  const size_t bytes = command.ByteSizeLong() + kCommandFraming;
  CommandRecord record;
  if (waiter == nullptr) {
    record = CommandRecord::Of(command);
    record.flags_after = std::move(flags_after);
  }
  // A request holds the session id besides its commands.
  const size_t request_bytes = session_id_.size() + kCommandFraming;
  if (request_bytes + bytes > kMaxBatchBytes) {
    // It would break the stream (and every queue with it) at the daemon's
    // message bound: refuse it alone.
    const absl::Status refused = absl::InvalidArgumentError(absl::StrCat(
        "the command is ", bytes, " bytes; one request carries at most ",
        kMaxBatchBytes - request_bytes, " bytes of commands"));
    if (waiter == nullptr) FileRejection(std::move(record), refused);
    return refused;
  }

  absl::MutexLock lock(&mu_);
  absl::Status late;
  if (current_group != nullptr && &current_group->core_ == this) {
    late = current_group->status();  // It waited for room, once.
  } else if (may_block) {
    late = WaitForRoomLocked(deadline);
  }
  if (!late.ok()) {
    if (waiter == nullptr) FileRejectionLocked(std::move(record), late);
    return late;
  }
  if (absl::Status refused = RefusalLocked(); !refused.ok()) return refused;
  const uint64_t seq = next_seq_++;
  command.set_seq(seq);
  if (waiter != nullptr) {
    waiters_.emplace(seq, waiter);
    if (answer == Answer::kAck) ack_waiters_.emplace(seq, std::move(waiter));
  } else {
    unsettled_.emplace(seq, std::move(record));
  }
  if (batches_.empty() ||
      batches_.back().request.commands_size() >= kMaxBatchCommands ||
      batches_.back().bytes + bytes > kMaxBatchBytes) {
    batches_.emplace_back();
    batches_.back().request.set_session_id(session_id_);
    batches_.back().bytes = request_bytes;
    pending_bytes_ += request_bytes;
  }
  Batch& batch = batches_.back();
  batch.request.mutable_commands()->Add(std::move(command));
  batch.bytes += bytes;
  batch.last_seq = seq;
  queued_seq_ = seq;
  pending_bytes_ += bytes;  // The writer takes a batch's `bytes` back off.
  work_cv_.Signal();
  return seq;
}

absl::Status SessionCore::WaitForRoomLocked(absl::Time deadline) {
  if (enqueue_timeout_ > absl::ZeroDuration()) {
    deadline = std::min(deadline, absl::Now() + enqueue_timeout_);
  }
  while (pending_bytes_ >= kMaxPendingBytes && stream_error_.ok() &&
         !writer_done_ && !closed_) {
    if (space_cv_.WaitWithDeadline(&mu_, deadline) &&
        pending_bytes_ >= kMaxPendingBytes && RefusalLocked().ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("not sent: no room came in time (the call's timeout or "
                       "SessionOptions.enqueue_timeout ",
                       absl::FormatDuration(enqueue_timeout_), "), with ",
                       pending_bytes_, " bytes of commands of session ",
                       public_id_, " unsent (the daemon is not reading them)"));
    }
  }
  return absl::OkStatus();
}

void SessionCore::WriteLoop() {
  bool broken = false;
  for (;;) {
    Batch batch;
    {
      absl::MutexLock lock(&mu_);
      while (batches_.empty() && !stop_writer_ && !read_ended_) {
        work_cv_.Wait(&mu_);
      }
      if (stop_writer_ || read_ended_) break;
      batch = std::move(batches_.front());
      batches_.pop_front();
      writing_ = true;
    }
    // The only stream write; no lock is held across it.
    const bool ok = stream_->Write(batch.request);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    pending_bytes_ -= batch.bytes;
    if (ok) written_seq_ = batch.last_seq;
    space_cv_.SignalAll();
    if (!ok) {
      broken = true;
      break;
    }
  }
  bool half_close;
  {
    absl::MutexLock lock(&mu_);
    half_close = !broken && !read_ended_;
  }
  if (half_close) stream_->WritesDone();
  absl::MutexLock lock(&mu_);
  // What was never sent will not be: its waiters learn why from FailAll.
  batches_.clear();
  pending_bytes_ = 0;
  writer_done_ = true;
  space_cv_.SignalAll();
}

absl::Status SessionCore::Flush() {
  absl::MutexLock lock(&mu_);
  // A command dropped because the session is closed or its stream broke
  // took no seq: say so rather than report it sent.
  if (absl::Status refused = RefusalLocked(); !refused.ok()) return refused;
  const uint64_t target = queued_seq_;
  while (written_seq_ < target && !writer_done_ && stream_error_.ok()) {
    space_cv_.Wait(&mu_);
  }
  if (written_seq_ >= target) return absl::OkStatus();
  if (!stream_error_.ok()) return stream_error_;
  return absl::FailedPreconditionError(
      absl::StrCat("session ", public_id_, " is closed"));
}

absl::StatusOr<v1::CommandResult> SessionCore::Call(
    absl::FunctionRef<void(v1::Command&)> fill, Answer answer,
    absl::Duration timeout) {
  auto waiter = std::make_shared<Waiter>();
  v1::Command command;
  fill(command);
  if (command.has_read_buffer()) {
    waiter->read_size = command.read_buffer().size();
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<uint64_t> seq = Push(std::move(command), waiter, answer, {},
                                      /*may_block=*/true, deadline);
  if (!seq.ok()) return seq.status();
  if (!waiter->done.WaitForNotificationWithDeadline(deadline)) {
    absl::MutexLock lock(&mu_);
    if (AbandonLocked(*seq)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no answer to command seq ", *seq, " within ",
                       absl::FormatDuration(timeout)));
    }
  }
  waiter->done.WaitForNotification();  // Answered during the timeout race.
  return std::move(waiter->result);
}

void SessionCore::EnqueueUnheard(absl::FunctionRef<void(v1::Command&)> fill) {
  v1::Command command;
  fill(command);
  absl::StatusOr<uint64_t> seq =
      Push(std::move(command), std::make_shared<Waiter>(), Answer::kAck, {},
           /*may_block=*/false);
  if (!seq.ok()) return;
  absl::MutexLock lock(&mu_);
  AbandonLocked(*seq);
}

bool SessionCore::AbandonLocked(uint64_t seq) {
  const bool ack = ack_waiters_.erase(seq) > 0;
  if (waiters_.erase(seq) == 0) return false;
  // Its answer may still come: it belongs to nobody now.
  abandoned_.emplace(seq, ack);
  return true;
}

void SessionCore::AddToSlot(ErrorSlot& slot, uint64_t seq,
                            absl::Status status) {
  slot.failures.emplace_back(seq, std::move(status));
  if (slot.failures.size() <= kMaxListedFailures) return;
  // Keep the earliest: drop the failure of the highest seq.
  auto last = std::max_element(
      slot.failures.begin(), slot.failures.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  slot.failures.erase(last);
  ++slot.unlisted;
}

void SessionCore::MergeSlot(ErrorSlot& into, ErrorSlot from) {
  into.unlisted += from.unlisted;
  for (auto& [seq, status] : from.failures) {
    AddToSlot(into, seq, std::move(status));
  }
}

absl::Status SessionCore::TakeError(uint64_t queue_id) {
  return TakeErrors(queue_id, /*with_queue_less=*/true);
}

absl::Status SessionCore::TakeQueueError(uint64_t queue_id) {
  return TakeErrors(queue_id, /*with_queue_less=*/false);
}

absl::Status SessionCore::TakeErrors(uint64_t queue_id, bool with_queue_less) {
  ErrorSlot taken;
  {
    absl::MutexLock lock(&mu_);
    if (with_queue_less) {
      MergeSlot(taken, std::exchange(session_errors_, ErrorSlot()));
    }
    if (queue_id == 0) {
      for (auto& [id, slot] : queue_errors_) MergeSlot(taken, std::move(slot));
      queue_errors_.clear();
    } else if (auto it = queue_errors_.find(queue_id);
               it != queue_errors_.end()) {
      MergeSlot(taken, std::move(it->second));
      queue_errors_.erase(it);
    }
  }
  if (taken.failures.empty()) return absl::OkStatus();
  std::sort(taken.failures.begin(), taken.failures.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // The earliest failure's code; every failure's message, in order.
  const absl::Status& first = taken.failures.front().second;
  std::string message(first.message());
  for (size_t i = 1; i < taken.failures.size(); ++i) {
    const absl::Status& next = taken.failures[i].second;
    absl::StrAppend(&message, "; then ", absl::StatusCodeToString(next.code()),
                    ": ", next.message());
  }
  if (taken.unlisted > 0) {
    absl::StrAppend(&message, "; and ", taken.unlisted,
                    " later command failure(s)");
  }
  return absl::Status(first.code(), message);
}

void SessionCore::AttachQueue(uint64_t queue_id) {
  absl::MutexLock lock(&mu_);
  live_queues_.insert(queue_id);
}

void SessionCore::DetachQueue(uint64_t queue_id) {
  absl::MutexLock lock(&mu_);
  live_queues_.erase(queue_id);
  if (auto it = queue_errors_.find(queue_id); it != queue_errors_.end()) {
    MergeSlot(session_errors_, std::move(it->second));
    queue_errors_.erase(it);
  }
}

void SessionCore::RecordFailure(uint64_t seq, const absl::Status& status) {
  std::string what = "a command";
  uint64_t queue_id = 0;
  if (auto it = unsettled_.find(seq); it != unsettled_.end()) {
    what = it->second.Describe();
    queue_id = it->second.queue_id;
    unsettled_.erase(it);
  }
  absl::Status error(status.code(), absl::StrCat(what, " (seq ", seq,
                                                 "): ", status.message()));
  ErrorSlot& slot = queue_id != 0 && live_queues_.contains(queue_id)
                        ? queue_errors_[queue_id]
                        : session_errors_;
  AddToSlot(slot, seq, std::move(error));
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
  std::vector<std::shared_ptr<Waiter>> acked;
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
      std::vector<uint64_t> flags_after;
      {
        absl::MutexLock lock(&mu_);
        if (auto it = unsettled_.find(result.seq()); it != unsettled_.end()) {
          flags_after = std::move(it->second.flags_after);
        }
        auto it = waiters_.find(result.seq());
        if (it != waiters_.end()) {
          waiter = std::move(it->second);
          waiters_.erase(it);
          ack_waiters_.erase(result.seq());
        } else if (abandoned_.erase(result.seq()) > 0) {
          // The caller gave up waiting (its timeout): it was told so.
        } else if (!status.ok()) {
          RecordFailure(result.seq(), status);
        } else {
          unsettled_.erase(result.seq());
        }
      }
      for (uint64_t flag_id : flags_after) {
        v1::Command destroy;
        destroy.mutable_destroy_flag()->set_flag_id(flag_id);
        (void)Push(std::move(destroy), nullptr, Answer::kAck, {},
                   /*may_block=*/false);
      }
      if (waiter != nullptr) {
        if (status.ok()) {
          waiter->result = std::move(result);
        } else {
          waiter->result = status;
        }
        waiter->done.Notify();
      }
    }
    // Commands acknowledged without a result have succeeded; this
    // response's results came first.
    const uint64_t completed = response.completed_seq();
    {
      absl::MutexLock lock(&mu_);
      auto end = ack_waiters_.upper_bound(completed);
      for (auto it = ack_waiters_.begin(); it != end; ++it) {
        waiters_.erase(it->first);
        acked.push_back(std::move(it->second));
      }
      ack_waiters_.erase(ack_waiters_.begin(), end);
      // An abandoned kAck call that succeeded is settled here; a read
      // (covered by completed_seq before its data comes) waits for its
      // result, so that a late failure is dropped too.
      for (auto it = abandoned_.begin();
           it != abandoned_.end() && it->first <= completed;) {
        it = it->second ? abandoned_.erase(it) : std::next(it);
      }
      // Settled, except commands whose own result is still to come.
      for (auto it = unsettled_.begin();
           it != unsettled_.end() && it->first <= completed;) {
        it = it->second.expects_result ? std::next(it) : unsettled_.erase(it);
      }
    }
    for (auto& waiter : acked) {
      waiter->result = v1::CommandResult();
      waiter->done.Notify();
    }
    acked.clear();
  }
  {
    // Finish must not race a write: stop the writer first.
    absl::MutexLock lock(&mu_);
    read_ended_ = true;
    work_cv_.SignalAll();
    while (!writer_done_) space_cv_.Wait(&mu_);
  }
  absl::Status final_status = FromGrpc(stream_->Finish());
  if (final_status.ok()) {
    final_status = absl::FailedPreconditionError(
        absl::StrCat("session ", public_id_, " is closed"));
  }
  FailAll(final_status);
  reader_done_.Notify();
}

void SessionCore::FailAll(const absl::Status& status) {
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (stream_error_.ok()) stream_error_ = status;
    waiters.swap(waiters_);
    ack_waiters_.clear();
    unsettled_.clear();
    abandoned_.clear();
    space_cv_.SignalAll();
  }
  for (auto& [seq, waiter] : waiters) {
    waiter->result = status;
    waiter->done.Notify();
  }
}

void SessionCore::AddHostFunc(uint64_t callback_id, std::function<void()> fn,
                              HostFuncFlags flags) {
  absl::MutexLock lock(&mu_);
  host_funcs_.emplace(callback_id, HostFunc{std::move(fn), flags});
  if (!watching_ && !closed_) {
    watching_ = true;
    watcher_ = std::thread(&SessionCore::WatchLoop, this);
  }
}

void SessionCore::RunHostFunc(HostFunc host_func) {
  host_func.fn();
  // Let the queue go on past its WaitHostValue. A unary call: it needs no
  // room on the Submit stream, which may be waiting for this very queue.
  v1::SignalFlagRequest request;
  request.set_session_id(session_id_);
  request.set_flag_id(host_func.flags.release_flag_id);
  request.set_value(host_func.flags.ticket);
  v1::SignalFlagResponse response;
  auto context = NewClientContext(token_);
  context->set_deadline(absl::ToChronoTime(absl::Now() + kCloseTimeout));
  const absl::Status status =
      FromGrpc(stub_->SignalFlag(context.get(), request, &response));
  absl::MutexLock lock(&mu_);
  if (!status.ok() && !closed_) {
    AddToSlot(session_errors_, next_seq_,
              absl::Status(status.code(),
                           absl::StrCat("releasing a queue after its host "
                                        "function (signal_flag ",
                                        host_func.flags.release_flag_id,
                                        "): ", status.message())));
  }
}

void SessionCore::RecoverLostHostFuncs() {
  absl::flat_hash_set<uint64_t> reached_flags;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, host_func] : host_funcs_) {
      reached_flags.insert(host_func.flags.reached_flag_id);
    }
  }
  for (uint64_t flag_id : reached_flags) {
    v1::ReadFlagRequest request;
    request.set_session_id(session_id_);
    request.set_flag_id(flag_id);
    v1::ReadFlagResponse response;
    auto context = NewClientContext(token_);
    context->set_deadline(absl::ToChronoTime(absl::Now() + kCloseTimeout));
    if (!stub_->ReadFlag(context.get(), request, &response).ok()) continue;
    std::vector<HostFunc> due;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = host_funcs_.begin(); it != host_funcs_.end();) {
        const HostFuncFlags& flags = it->second.flags;
        if (flags.reached_flag_id == flag_id &&
            flags.ticket <= response.value()) {
          due.push_back(std::move(it->second));
          host_funcs_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    std::sort(due.begin(), due.end(), [](const HostFunc& a, const HostFunc& b) {
      return a.flags.ticket < b.flags.ticket;
    });
    recovered_host_funcs_ += static_cast<int>(due.size());
    for (HostFunc& host_func : due) RunHostFunc(std::move(host_func));
  }
}

void SessionCore::HandleNotification(const v1::Notification& notification) {
  if (notification.has_notifications_dropped()) {
    // The daemon could not keep or send them (host functions ran long, or
    // a stream broke for longer than its replay reaches). The host
    // functions among the dropped ones are found by their reached flags;
    // the others were informational (queue errors also come from
    // synchronize).
    RecoverLostHostFuncs();
    return;
  }
  if (!notification.has_host_func_reached()) return;
  HostFunc host_func;
  {
    absl::MutexLock lock(&mu_);
    // Absent when it ran already: a replayed notification, or one a
    // recovery found first.
    auto it = host_funcs_.find(notification.host_func_reached().callback_id());
    if (it == host_funcs_.end()) return;
    host_func = std::move(it->second);
    host_funcs_.erase(it);
  }
  RunHostFunc(std::move(host_func));
}

void SessionCore::WatchLoop() {
  v1::WatchNotificationsRequest request;
  request.set_session_id(session_id_);
  constexpr absl::Duration kFirstBackoff = absl::Milliseconds(10);
  absl::Duration backoff = kFirstBackoff;
  // The id of the last notification handled: a stream opened after a break
  // asks the daemon to replay those after it, so none sent into the broken
  // stream is lost. A daemon that numbers none (older than
  // "notification_resume") replays nothing: then, after a break, the
  // reached flags show what was lost.
  uint64_t handled_id = 0;
  for (;;) {
    grpc::ClientContext* context;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      watch_context_ = NewClientContext(token_);
      context = watch_context_.get();
    }
    request.set_acknowledged_id(handled_id);
    auto reader = stub_->WatchNotifications(context, request);
    if (watch_streams_opened_.fetch_add(1) > 0 && handled_id == 0) {
      RecoverLostHostFuncs();
    }
    v1::Notification notification;
    while (reader->Read(&notification)) {
      backoff = kFirstBackoff;
      HandleNotification(notification);
      if (notification.id() != 0) handled_id = notification.id();
    }
    const grpc::Status status = reader->Finish();
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    // OK: the daemon ended the session's notifications (it is gone); other
    // codes but a transport failure or a cancel will not heal either.
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::INVALID_ARGUMENT) {
      // The daemon refused the acknowledged id (it never sent it): start
      // over, every kept notification again (those handled are ignored)
      // and the reached flags.
      handled_id = 0;
    } else if (code != grpc::StatusCode::UNAVAILABLE &&
               code != grpc::StatusCode::CANCELLED &&
               code != grpc::StatusCode::DEADLINE_EXCEEDED &&
               code != grpc::StatusCode::INTERNAL) {
      if (!status.ok()) {
        AddToSlot(session_errors_, next_seq_,
                  absl::Status(static_cast<absl::StatusCode>(code),
                               absl::StrCat("the notification stream ended: ",
                                            status.error_message())));
      }
      return;
    }
    // The stream broke: the next one replays what this one did not
    // deliver, and what is published meanwhile.
    watch_cv_.WaitWithTimeout(&mu_, backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

void SessionCore::BreakNotificationStreamForTesting() {
  absl::MutexLock lock(&mu_);
  if (watch_context_ != nullptr) watch_context_->TryCancel();
}

absl::Status SessionCore::Close() {
  const absl::Time deadline = absl::Now() + kCloseTimeout;
  absl::Status flushed;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
    space_cv_.SignalAll();  // Enqueues blocked on backpressure give up.
    // Send what is pending, so commands keep their order with the close.
    const absl::Time flush_by = absl::Now() + kCloseTimeout / 4;
    while ((!batches_.empty() || writing_) && !writer_done_ &&
           !space_cv_.WaitWithDeadline(&mu_, flush_by)) {
    }
    if (!batches_.empty() || writing_) {
      flushed = absl::DeadlineExceededError(absl::StrCat(
          "session ", public_id_, ": pending commands were not sent within ",
          absl::FormatDuration(kCloseTimeout / 4)));
    } else if (!stream_error_.ok()) {
      flushed = stream_error_;
    }
    stop_writer_ = true;
    work_cv_.SignalAll();
  }
  // Closing on the server first releases any wait a command is parked on,
  // so the stream can drain.
  v1::CloseSessionRequest request;
  request.set_session_id(session_id_);
  v1::CloseSessionResponse response;
  auto context = NewClientContext(token_);
  context->set_deadline(
      absl::ToChronoTime(std::min(deadline, absl::Now() + kCloseTimeout / 2)));
  absl::Status closed =
      FromGrpc(stub_->CloseSession(context.get(), request, &response));
  // The writer half-closes the stream; the daemon then ends it. A daemon
  // that does not is cut off at the deadline.
  if (!reader_done_.WaitForNotificationWithDeadline(deadline)) {
    stream_context_->TryCancel();
  }
  writer_.join();
  reader_.join();
  {
    absl::MutexLock lock(&mu_);
    if (watch_context_ != nullptr) watch_context_->TryCancel();
    watch_cv_.SignalAll();
  }
  if (watcher_.joinable()) watcher_.join();
  // Host functions that never ran: what they hold is released here (they
  // may hold handles, and so this object), outside the lock.
  absl::flat_hash_map<uint64_t, HostFunc> never_ran;
  {
    absl::MutexLock lock(&mu_);
    never_ran.swap(host_funcs_);
  }
  never_ran.clear();
  return flushed.ok() ? closed : flushed;
}

}  // namespace gpustream::client
