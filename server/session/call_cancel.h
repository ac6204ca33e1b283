// Telling waiting operations that their caller went away.
#ifndef GPUSTREAM_SERVER_SESSION_CALL_CANCEL_H_
#define GPUSTREAM_SERVER_SESSION_CALL_CANCEL_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace gpustream::session {

// The transport's word that nobody waits for the answer any more: a unary
// call's client cancelled, disconnected or passed its deadline, or a Submit
// stream broke. The transport fires it (gRPC's OnCancel); each waiting
// operation of the call registers how to end its wait, so that its host-wait
// slot, watch and response go at once rather than when the awaited thing
// happens (perhaps never). Shared by the transport and the operations, whose
// callbacks may outlive either. Thread-safe.
class CallCancel {
 public:
  using Id = uint64_t;

  // Registers `end`, run once by Cancel() (on the canceller's thread,
  // without this object's lock). If Cancel() already ran, runs `end` at
  // once and returns 0.
  Id OnCancel(absl::AnyInvocable<void()> end);
  // The wait ended otherwise: its `end` is dropped unrun.
  void Forget(Id id);
  // Runs every registered `end`, in registration order; later
  // registrations run at once.
  void Cancel();

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  Id next_ ABSL_GUARDED_BY(mu_) = 1;
  // By id, i.e. in registration order, the order Cancel() runs them in.
  absl::btree_map<Id, absl::AnyInvocable<void()>> ends_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_CALL_CANCEL_H_
