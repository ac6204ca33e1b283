// ThreadSanitizer only: the options and suppressions every binary of the
// tsan config runs with, compiled in so that they also apply to processes
// a test starts (gpustreamd under the Python tests, the soak clients).
//
// Each suppression covers code TSan cannot see into: Debian's gRPC, Abseil
// and protobuf are not built with -fsanitize=thread, so their atomics (the
// happens-before edges between their threads) are invisible, while the
// libc calls they make (memcpy, recvmsg, free) are still intercepted. TSan
// can then only report races that do not exist. Each entry is as narrow as
// the library boundary allows and says why; none names the daemon's or the
// clients' code (one names the test-only fake CUDA driver).

extern "C" {

// halt_on_error: the first report fails the test. second_deadlock_stack:
// lock-order reports show both stacks. history_size=7 (the most): a report
// whose earlier access's stack cannot be restored cannot be matched by the
// suppressions below, so the stacks must be kept long enough.
const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:history_size=7";
}

const char* __tsan_default_suppressions() {
  return
      // gRPC core moves bytes between its threads (the poller reads a
      // socket into a slice, an executor copies it) with lock-free queues
      // and atomic refcounts, all uninstrumented: only the intercepted
      // memcpy/recvmsg/free calls made from inside libgrpc are seen.
      "called_from_lib:libgrpc.so.29\n"
      "called_from_lib:libgpr.so.29\n"
      "called_from_lib:libupb.so.29\n"
      // OpenSSL under gRPC's TLS: the same, with its own atomic refcounts.
      "called_from_lib:libssl.so.3\n"
      "called_from_lib:libcrypto.so.3\n"
      // gRPC's C++ API is header code, compiled into our binaries and so
      // instrumented, but gRPC hands its batches (CallOpSet: the messages it
      // deserialized into or serialized from, statuses, interceptor
      // batches, tags) from thread to thread through completion queues and
      // combiners inside libgrpc. A race with a batch's methods on either
      // stack is such a handoff: gRPC filled our request on one thread and
      // calls OnReadDone on another. Races between our own callbacks (a
      // reactor's OnReadDone against its OnWriteDone) have no batch on
      // their stacks and stay reported.
      "race:grpc::internal::CallOpSet\n"
      "race:grpc::internal::CallbackWithSuccessTag::Clear\n"
      // A reactor's Finish() sets the call's finish tag on our thread (a
      // queue's completion); a gRPC thread runs the tag once libgrpc
      // completes the batch. When the call was already cancelled (the
      // client's deadline passed while a DestroyQueue was parked) the
      // batch completes with no lock TSan can see in between.
      "race:grpc::internal::CallbackWithSuccessTag::Set\n"
      // A unary request deserialized by gRPC into the message and status
      // it allocated on another thread.
      "race:grpc::internal::Callback*Handler*::Deserialize\n"
      // gRPC deletes a call's objects in CallOnDone once its own count of
      // the call's pending callbacks (kept in libgrpc++) reaches zero.
      "race:grpc::internal::Callback*Handler*::CallOnDone\n"
      // The same for the call's context and the interceptors it owns.
      "race:grpc::ServerContextBase::~ServerContextBase\n"
      // gRPC's C++ objects (tags, handlers, server contexts) touched by
      // their own inline methods: the top frame only, so our callbacks
      // below them stay checked.
      "race_top:grpc::\n"
      // Interceptors (ours: server/rpc/call_interceptor.cc, which only
      // reads the batch and counts) run on whichever thread completes each
      // batch, with batch objects gRPC made on another thread.
      "race:grpc::internal::InterceptorBatchMethodsImpl\n"
      // The same for our interceptor's own fields: gRPC constructs it on the
      // thread that starts the call (CreateServerInterceptor) and runs its
      // hooks, POST_RECV_CLOSE among them, on whichever thread completes a
      // batch, ordered by libgrpc.
      "race:server/rpc/call_interceptor.cc\n"
      // gRPC parses a call's deadline with absl::ParseTime in metadata it
      // allocated on another thread.
      "called_from_lib:libabsl_time.so\n"
      // absl::StrAppend inside libabsl_strings copying a status message
      // made on another thread (gRPC's status handoff).
      "called_from_lib:libabsl_strings.so\n"
      // absl::Status: the last owner deletes the shared payload after an
      // atomic decrement inside libabsl_status (uninstrumented); the
      // delete then looks unordered with the other owners' increments and
      // reads of the message. The same for copies made inside the library.
      "race:absl::*::Status::Unref\n"
      "race:libabsl_status.so\n"
      // absl::Cord: the same refcounting pattern in libabsl_cord.
      "race:absl::*::cord_internal::CordRep::Unref\n"
      "race:absl::*::cord_internal::CordRepFlat::Delete\n"
      // And inside the library: a status payload's Cord grown into a btree
      // on one thread (AppendArray) and destroyed by its last owner on
      // another (CordRepBtree::Destroy), ordered by those atomic counts.
      "called_from_lib:libabsl_cord.so\n"
      "called_from_lib:libabsl_cord_internal.so\n"
      // gRPC's own threads (executor, timer manager) end when gRPC decides;
      // whether they were joined by the time the process exits is its
      // business.
      "thread:grpc_core::Thread::Thread\n"
      // The fake CUDA driver (tests/fake_cuda) joins a destroyed stream's
      // worker lazily, at the next stream call; a process that exits in
      // between leaves it unjoined.
      "thread:fakecuda::Fake_cuStreamCreateWithPriority\n";
}

}  // extern "C"
