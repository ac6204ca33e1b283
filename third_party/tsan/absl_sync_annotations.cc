// ThreadSanitizer only: makes Debian's (uninstrumented) Abseil
// synchronization visible to TSan.
//
// Why: libabsl_synchronization.so is built without -fsanitize=thread, and
// absl::Mutex locks with atomics and futex system calls that TSan neither
// instruments nor intercepts. Without help, TSan sees no happens-before edge
// between an Unlock() in one thread and the next Lock() in another, and
// reports every access to mutex-guarded state as a race: in our code, and in
// gRPC's (whose gpr_mu is an absl::Mutex). Abseil's own TSan annotations are
// compiled in only when Abseil itself is built with TSan.
//
// How: this library is linked into every binary of the tsan config (see
// third_party/system/BUILD.system, library "absl") and defines the exported
// entry points of absl::Mutex, absl::CondVar and absl::Notification. Being
// in the executable, these definitions take precedence over the shared
// library's for every caller that goes through the PLT (our code, gRPC's
// libgpr). Each forwards to the real function (dlsym RTLD_NEXT) and tells
// TSan what the call means: a release of the mutex's address before anything
// that may let the mutex go, an acquire after anything that holds it again.
//
// Contract: the edges are conservative: every release/acquire pair of the
// same mutex orders the two threads, including reader-reader pairs, which
// real reader locks do not. That can hide a race between two readers that
// write (a bug TSan would miss), never report a race that does not exist.
// Thread-safe; the real entry points are resolved on first use.

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

#define GS_STR2(x) #x
#define GS_STR(x) GS_STR2(x)

// The mangled name of absl::<inline namespace>::<cls>::<rest>: `rest` is
// the mangled method and parameter list as it follows the class name; a
// const method's name starts "_ZNK".
std::string Mangled(const char* cls, const char* rest, bool is_const) {
  const char* ns = GS_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return std::string(is_const ? "_ZNK" : "_ZN") + "4absl" +
         std::to_string(std::strlen(ns)) + ns +
         std::to_string(std::strlen(cls)) + cls + rest;
}

template <typename Fn>
Fn Real(const char* cls, const char* rest, bool is_const = false) {
  const std::string name = Mangled(cls, rest, is_const);
  void* sym = dlsym(RTLD_NEXT, name.c_str());
  if (sym == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found: %s\n",
                 name.c_str(), dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(sym);
}

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// Member functions through plain function pointers: the Itanium ABI passes
// `this` first.
struct RealSync {
  void (*lock)(Mutex*) = Real<decltype(lock)>("Mutex", "4LockEv");
  void (*unlock)(Mutex*) = Real<decltype(unlock)>("Mutex", "6UnlockEv");
  bool (*try_lock)(Mutex*) = Real<decltype(try_lock)>("Mutex", "7TryLockEv");
  void (*reader_lock)(Mutex*) = Real<decltype(reader_lock)>("Mutex",
                                                            "10ReaderLockEv");
  void (*reader_unlock)(Mutex*) =
      Real<decltype(reader_unlock)>("Mutex", "12ReaderUnlockEv");
  bool (*reader_try_lock)(Mutex*) =
      Real<decltype(reader_try_lock)>("Mutex", "13ReaderTryLockEv");
  void (*lock_when)(Mutex*, const Condition&) =
      Real<decltype(lock_when)>("Mutex", "8LockWhenERKNS0_9ConditionE");
  void (*reader_lock_when)(Mutex*, const Condition&) =
      Real<decltype(reader_lock_when)>("Mutex",
                                       "14ReaderLockWhenERKNS0_9ConditionE");
  bool (*lock_when_timeout)(Mutex*, const Condition&, Duration) =
      Real<decltype(lock_when_timeout)>(
          "Mutex", "19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool (*lock_when_deadline)(Mutex*, const Condition&, Time) =
      Real<decltype(lock_when_deadline)>(
          "Mutex", "20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool (*reader_lock_when_timeout)(Mutex*, const Condition&, Duration) =
      Real<decltype(reader_lock_when_timeout)>(
          "Mutex",
          "25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool (*reader_lock_when_deadline)(Mutex*, const Condition&, Time) =
      Real<decltype(reader_lock_when_deadline)>(
          "Mutex", "26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  void (*await)(Mutex*, const Condition&) =
      Real<decltype(await)>("Mutex", "5AwaitERKNS0_9ConditionE");
  bool (*await_timeout)(Mutex*, const Condition&, Duration) =
      Real<decltype(await_timeout)>(
          "Mutex", "16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool (*await_deadline)(Mutex*, const Condition&, Time) =
      Real<decltype(await_deadline)>(
          "Mutex", "17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  void (*cv_wait)(CondVar*,
                  Mutex*) = Real<decltype(cv_wait)>("CondVar",
                                                    "4WaitEPNS0_5MutexE");
  bool (*cv_wait_timeout)(CondVar*, Mutex*, Duration) =
      Real<decltype(cv_wait_timeout)>(
          "CondVar", "15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  bool (*cv_wait_deadline)(CondVar*, Mutex*, Time) =
      Real<decltype(cv_wait_deadline)>(
          "CondVar", "16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  void (*cv_signal)(CondVar*) = Real<decltype(cv_signal)>("CondVar",
                                                          "6SignalEv");
  void (*cv_signal_all)(CondVar*) =
      Real<decltype(cv_signal_all)>("CondVar", "9SignalAllEv");
  void (*notify)(Notification*) = Real<decltype(notify)>("Notification",
                                                         "6NotifyEv");
  void (*wait_notification)(const Notification*) =
      Real<decltype(wait_notification)>("Notification",
                                        "19WaitForNotificationEv", true);
  bool (*wait_notification_timeout)(const Notification*, Duration) =
      Real<decltype(wait_notification_timeout)>(
          "Notification", "30WaitForNotificationWithTimeoutENS0_8DurationE",
          true);
  bool (*wait_notification_deadline)(const Notification*, Time) =
      Real<decltype(wait_notification_deadline)>(
          "Notification", "31WaitForNotificationWithDeadlineENS0_4TimeE", true);
};

// Resolved on first use (a static initializer may lock before ours ran).
const RealSync& real() {
  static const RealSync* const sync = new RealSync();
  return *sync;
}

void* Addr(const void* p) { return const_cast<void*>(p); }

// Abseil's deadlock detector (on in Debian's build, which does not define
// NDEBUG) keeps a global graph of lock ids guarded by an uninstrumented
// spinlock, so TSan reports its bookkeeping as races. It is off in this
// build only; the default and ASan builds keep it.
[[maybe_unused]] const bool kDetectorOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

// A condition Abseil evaluates inside its own (uninstrumented) code: on the
// waiting thread before it blocks and after each wake-up, or on the thread
// that unlocks. Wherever it runs, that thread holds `mu`, so the evaluation
// acquires `mu` before and releases it after: it is ordered after the last
// writer and before the next one, as the code under the lock is. It also
// acquires this wrapper, which the waiting thread built (and released) on
// its stack before another thread could evaluate it. Abseil reads the
// Condition objects themselves in its own code, out of TSan's sight.
class GuardedCondition {
 public:
  GuardedCondition(const Condition& cond, Mutex* mu) : cond_(&cond), mu_(mu) {
    __tsan_release(this);
  }
  // Valid while this object lives: for the duration of one call.
  Condition condition() { return Condition(&Eval, static_cast<void*>(this)); }

 private:
  static bool Eval(void* arg) {
    __tsan_acquire(arg);
    auto* self = static_cast<GuardedCondition*>(arg);
    __tsan_acquire(self->mu_);
    const bool met = self->cond_->Eval();
    __tsan_release(self->mu_);
    return met;
  }

  const Condition* const cond_;
  Mutex* const mu_;
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  real().lock(this);
  __tsan_acquire(this);
}
void Mutex::Unlock() {
  __tsan_release(this);
  real().unlock(this);
}
bool Mutex::TryLock() {
  const bool locked = real().try_lock(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::ReaderLock() {
  real().reader_lock(this);
  __tsan_acquire(this);
}
void Mutex::ReaderUnlock() {
  __tsan_release(this);
  real().reader_unlock(this);
}
bool Mutex::ReaderTryLock() {
  const bool locked = real().reader_try_lock(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::LockWhen(const Condition& cond) {
  GuardedCondition guarded(cond, this);
  real().lock_when(this, guarded.condition());
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  GuardedCondition guarded(cond, this);
  real().reader_lock_when(this, guarded.condition());
  __tsan_acquire(this);
}
// The *WithTimeout/*WithDeadline forms hold the mutex on return whatever
// they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  GuardedCondition guarded(cond, this);
  const bool met = real().lock_when_timeout(this, guarded.condition(), timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  GuardedCondition guarded(cond, this);
  const bool met =
      real().lock_when_deadline(this, guarded.condition(), deadline);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  GuardedCondition guarded(cond, this);
  const bool met =
      real().reader_lock_when_timeout(this, guarded.condition(), timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  GuardedCondition guarded(cond, this);
  const bool met =
      real().reader_lock_when_deadline(this, guarded.condition(), deadline);
  __tsan_acquire(this);
  return met;
}
// Await releases the mutex while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) {
  __tsan_release(this);
  GuardedCondition guarded(cond, this);
  real().await(this, guarded.condition());
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  __tsan_release(this);
  GuardedCondition guarded(cond, this);
  const bool met = real().await_timeout(this, guarded.condition(), timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  __tsan_release(this);
  GuardedCondition guarded(cond, this);
  const bool met = real().await_deadline(this, guarded.condition(), deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  __tsan_release(mu);
  real().cv_wait(this, mu);
  __tsan_acquire(mu);
  __tsan_acquire(this);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  __tsan_release(mu);
  const bool timed_out = real().cv_wait_timeout(this, mu, timeout);
  __tsan_acquire(mu);
  if (!timed_out) __tsan_acquire(this);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  __tsan_release(mu);
  const bool timed_out = real().cv_wait_deadline(this, mu, deadline);
  __tsan_acquire(mu);
  if (!timed_out) __tsan_acquire(this);
  return timed_out;
}
void CondVar::Signal() {
  __tsan_release(this);
  real().cv_signal(this);
}
void CondVar::SignalAll() {
  __tsan_release(this);
  real().cv_signal_all(this);
}

void Notification::Notify() {
  __tsan_release(this);
  real().notify(this);
}
void Notification::WaitForNotification() const {
  real().wait_notification(this);
  __tsan_acquire(Addr(this));
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  const bool notified = real().wait_notification_timeout(this, timeout);
  if (notified) __tsan_acquire(Addr(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  const bool notified = real().wait_notification_deadline(this, deadline);
  if (notified) __tsan_acquire(Addr(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
