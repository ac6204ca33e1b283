// CallCancel: ends the waits of a call whose caller went away.
#include "server/session/call_cancel.h"

#include <utility>

namespace gpustream::session {

CallCancel::Id CallCancel::OnCancel(absl::AnyInvocable<void()> end) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      ends_.emplace(next_, std::move(end));
      return next_++;
    }
  }
  end();
  return 0;
}

void CallCancel::Forget(Id id) {
  absl::AnyInvocable<void()> dropped;  // Destroyed after the lock.
  absl::MutexLock lock(&mu_);
  auto it = ends_.find(id);
  if (it == ends_.end()) return;
  dropped = std::move(it->second);
  ends_.erase(it);
}

void CallCancel::Cancel() {
  absl::btree_map<Id, absl::AnyInvocable<void()>> ends;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    ends.swap(ends_);
  }
  // In registration order: an operation may register what must happen
  // before its call ends (a read takes its bytes again before the call
  // gives them back).
  for (auto& [id, end] : ends) end();
}

}  // namespace gpustream::session
