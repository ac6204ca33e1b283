// Session operations on graphs: BeginCapture, EndCapture, LaunchGraph,
// DestroyGraph. What a capture records, and the rules of what it may, live
// in GraphRecorder; the session swaps it in for the queue (FindLiveQueue).
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/session/session.h"

namespace gpustream::session {

using backend::Queue;

absl::Status Session::BeginCapture(const v1::BeginCaptureRequest& req,
                                   v1::BeginCaptureResponse*) {
  // A failed queue can record nothing worth replaying: refused as an enqueue
  // would be. No room in flight is needed: nothing runs.
  bool capturing = false;
  auto queue = FindLiveQueue(req.queue_id(), 0, &capturing, /*commands=*/0);
  if (!queue.ok()) return queue.status();
  absl::MutexLock lock(&mu_);
  if (closed_ || refused_) return ClosedError();
  if (CaptureOf(req.queue_id()) != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(QueueName(req.queue_id()),
                     " is capturing already (BeginCapture without "
                     "EndCapture): captures do not nest"));
  }
  std::shared_ptr<Queue> real =
      capturing ? static_cast<GraphRecorder&>(**queue).queue() : *queue;
  // Destroyed (or replaced under a reused id) since it was found.
  if (objects_.Get<Queue>(req.queue_id()) != real) {
    return ObjectTable::UnknownError<Queue>(req.queue_id(), "queue_id");
  }
  captures_.emplace(
      req.queue_id(),
      std::make_shared<GraphRecorder>(
          std::move(real), ctx_.tenant,
          absl::StrCat("the capture on ", QueueName(req.queue_id()))));
  return absl::OkStatus();
}

absl::Status Session::EndCapture(const v1::EndCaptureRequest& req,
                                 v1::EndCaptureResponse* resp) {
  // The event the graph's launches end with; made off the session's lock
  // (on a GPU it may call the driver).
  auto ended = ctx_.device->CreateEvent(/*enable_timing=*/false);
  if (!ended.ok()) return ended.status();
  absl::MutexLock lock(&mu_);
  if (closed_ || refused_) return ClosedError();
  if (auto queue = objects_.Find<Queue>(req.queue_id(), "queue_id");
      !queue.ok()) {
    return queue.status();
  }
  std::shared_ptr<GraphRecorder> recorder = CaptureOf(req.queue_id());
  if (recorder == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(QueueName(req.queue_id()),
                     " is not capturing (EndCapture without BeginCapture)"));
  }
  // Every check before the capture ends: a refused EndCapture leaves it
  // recording, so nothing captured is lost.
  if (absl::Status s = CheckQuota(/*queue=*/false); !s.ok()) return s;
  auto id = objects_.ReserveId(req.id(), "id");
  if (!id.ok()) return id.status();
  if (absl::Status s = ctx_.tenant->ReserveGraph(); !s.ok()) return s;
  captures_.erase(req.queue_id());
  uint64_t charged_bytes = 0;
  std::vector<backend::GraphCommand> commands = recorder->Take(&charged_bytes);
  objects_.Insert(*id,
                  CapturedGraph::Create(std::move(commands), *std::move(ended),
                                        ctx_.tenant, charged_bytes));
  resp->set_graph_id(*id);
  return absl::OkStatus();
}

absl::Status Session::LaunchGraph(const v1::LaunchGraphRequest& req,
                                  v1::LaunchGraphResponse*) {
  auto graph = Find<CapturedGraph>(req.graph_id(), "graph_id");
  if (!graph.ok()) return graph.status();
  // Room in flight for every command (a GPU queue runs most as one each,
  // and up to 64 as one executable graph) and in staging for the graph's
  // writes (a GPU queue stages again those it does not capture).
  bool capturing = false;
  auto queue = FindLiveQueue(req.queue_id(), (*graph)->owned_bytes(),
                             &capturing, (*graph)->size());
  if (!queue.ok()) return queue.status();
  // The recorder refuses it: graphs do not nest.
  if (capturing) return (*queue)->LaunchGraph(nullptr, nullptr);
  return (*graph)->Launch(*queue);
}

absl::Status Session::DestroyGraph(const v1::DestroyGraphRequest& req,
                                   v1::DestroyGraphResponse*) {
  std::shared_ptr<CapturedGraph> graph;
  {
    absl::MutexLock lock(&mu_);
    auto removed = objects_.Remove<CapturedGraph>(req.graph_id(), "graph_id");
    if (!removed.ok()) return removed.status();
    graph = *std::move(removed);
  }
  // Off the lock: the last reference gives back the tenant's charges and
  // the graph's buffers, which go back to the device on its cleanup thread.
  graph.reset();
  return absl::OkStatus();
}

}  // namespace gpustream::session
