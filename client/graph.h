// A captured graph: work recorded once on a queue and replayed by one
// command (a CUDA graph exec underneath where the device has them).
#ifndef GPUSTREAM_CLIENT_GRAPH_H_
#define GPUSTREAM_CLIENT_GRAPH_H_

#include "client/handle.h"

namespace gpustream::client {

// Made by Queue::end_capture() or Queue::capture(); launched by
// Queue::launch(graph) on any queue of its session, any number of times.
// Destroyed with the handle: launches already enqueued still run, and the
// graph's buffers (even ones freed since) live until they have.
class Graph : public Handle {
 public:
  Graph() = default;
  Graph(std::shared_ptr<SessionCore> core, uint64_t id)
      : Handle(std::move(core), id, [](v1::Command& c, uint64_t id) {
          c.mutable_destroy_graph()->set_graph_id(id);
        }) {}
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_GRAPH_H_
