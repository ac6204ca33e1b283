// Fuzz target: a sequence of Submit commands, decoded from the input by
// CommandDecoder, run against one in-process session, as the Submit stream
// runs them (server/rpc/submit_reactor.cc), on the CPU backend or, built
// with GS_FUZZ_CUDA_FAKE, on the CUDA backend over //tests/fake_cuda, or,
// with GS_FUZZ_HIP_FAKE, on the HIP backend over //tests/fake_hip.
//
// Invariants checked after every input (a violation aborts, which libFuzzer
// reports as a crash and the corpus test as a failure):
// - every command completes exactly once, within a bound, also after the
//   session closed;
// - every status is OK or a code of the API's error table that a session
//   command can return, and an error names what failed (non-empty message);
// - once the session is closed, the tenant's sessions, queues, memory,
//   staged bytes and in-flight commands are back to zero, and the device's
//   memory is back where it was before the input;
// - on a fake device (which records every kernel access), no launch that
//   passed the daemon's checks touched memory outside the allocation it
//   started in: the declared extents bound every kernel.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "server/backend/backend_factory.h"
#include "server/log/log.h"
#include "server/session/ops.h"
#include "server/session/server_core.h"
#include "tests/fuzz/command_decoder.h"

#ifdef GS_FUZZ_HIP_FAKE
#include "server/backend/hip/hip_api.h"
#endif

namespace gpustream::fuzz {
namespace {

using session::Session;

// How long an input may take to finish once its session is closed: waits
// are 3 ms at most and the teardown drains in far less unless the server
// misbehaves.
constexpr absl::Duration kSettleLimit = absl::Seconds(20);

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "session_commands_fuzzer: INVARIANT VIOLATED: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The daemon's core with one device, shared by every input: creating a
// device per input would cost more than the input itself. Each input opens
// and closes its own session, so no state but the device's carries over.
struct Harness {
  std::unique_ptr<session::ServerCore> core;
  session::Principal who;
  uint64_t device_memory_at_start = 0;
  std::string argv0;
  // The device failed for good (a HIP device cannot be reset in-process):
  // the next input starts a new core, as a supervisor restarts the daemon.
  std::atomic<bool> device_lost{false};
};
Harness* harness = nullptr;

#if defined(GS_FUZZ_CUDA_FAKE) || defined(GS_FUZZ_HIP_FAKE)
// A fake driver in the runfiles: a test's TEST_SRCDIR, else beside the
// binary (bazel-bin/tests/fuzz/<name>.runfiles).
std::string FakeDriverPath(const char* argv0, const char* library) {
  const char* root = std::getenv("TEST_SRCDIR");
  if (root == nullptr) root = std::getenv("RUNFILES_DIR");
  const std::string base =
      root != nullptr ? root : std::string(argv0) + ".runfiles";
  return base + "/gpustream/tests/" + library;
}

#ifdef GS_FUZZ_CUDA_FAKE
constexpr char kFakeLibrary[] = "fake_cuda/libfakecuda.so";
#else
constexpr char kFakeLibrary[] = "fake_hip/libfakehip.so";
#endif

// Kernel accesses so far that the fake saw leave their allocation.
uint64_t StrayAccesses(const char* argv0) {
  using StrayFn = uint64_t (*)();
  static const StrayFn strays = [argv0] {
    void* fake = dlopen(FakeDriverPath(argv0, kFakeLibrary).c_str(),
                        RTLD_NOW | RTLD_NOLOAD);
    if (fake == nullptr) Fail("the fake driver is not loaded");
    auto fn = reinterpret_cast<StrayFn>(dlsym(fake, "fakegpu_stray_accesses"));
    if (fn == nullptr) Fail("the fake driver lacks fakegpu_stray_accesses");
    return fn;
  }();
  return strays();
}
#endif

std::unique_ptr<backend::Device> OpenDevice(const char* argv0) {
  backend::BackendOptions options;
#if defined(GS_FUZZ_CUDA_FAKE) || defined(GS_FUZZ_HIP_FAKE)
#ifdef GS_FUZZ_CUDA_FAKE
  options.backend = "cuda";
  options.cuda_driver = FakeDriverPath(argv0, "fake_cuda/libfakecuda.so");
#else
  options.backend = "hip";
  options.hip_runtime = FakeDriverPath(argv0, "fake_hip/libfakehip.so");
  // A fault aborts a HIP process by design (ROCm 5.x): here it is the
  // context's sticky error; the daemon cannot reset a HIP device, so the
  // harness starts a new core after it (RestartAfterDeviceLoss), as a
  // supervisor restarts the daemon, and one process fuzzes every input.
  setenv("FAKEHIP_FAULT_ABORTS", "0", /*overwrite=*/0);
#endif
  setenv("FAKEGPU_MEMORY_BYTES", "67108864", /*overwrite=*/0);
  // One process runs every input: a fault in one input is recovered from
  // before the next (recovery's refusal of a fault that survives the reset
  // is cuda_recovery_fake_test's and e2e_test's).
  setenv("FAKEGPU_RESET_CLEARS_STICKY", "1", /*overwrite=*/0);
#else
  (void)argv0;
  options.backend = "cpu";
  options.cpu.memory_limit_bytes = uint64_t{64} << 20;
  options.cpu.threads = 2;
  options.cpu.priority_greatest = -5;
  // Bounds a launch the decoder let through with a long loop.
  options.cpu.kernel_time_limit = absl::Milliseconds(50);
#endif
  auto devices = backend::CreateDevices(options);
  if (!devices.ok())
    Fail(absl::StrCat("no device: ", devices.status().ToString()));
  return std::move(devices->devices.front());
}

bool AllowedCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kCancelled:
      return true;
#if defined(GS_FUZZ_CUDA_FAKE) || defined(GS_FUZZ_HIP_FAKE)
    // A kernel that faults loses the (fake) GPU's context: the device's
    // sessions end with ABORTED.
    case absl::StatusCode::kAborted:
      return true;
#endif
    default:
      return false;
  }
}

// The completions of one input's commands. Thread-safe: `done` callbacks
// run on backend and timer threads.
class Completions {
 public:
  // A callback for command `index` (from 0, in order).
  Session::Done Expect(size_t index) {
    {
      absl::MutexLock lock(&mu_);
      statuses_.emplace_back();
      ++pending_;
    }
    return [this, index](absl::Status status) {
      absl::MutexLock lock(&mu_);
      if (statuses_[index].has_value()) {
        Fail(absl::StrCat("command #", index,
                          " completed twice: ", statuses_[index]->ToString(),
                          ", then ", status.ToString()));
      }
      statuses_[index] = std::move(status);
      --pending_;
    };
  }

  // The status of command `index` if it completed already.
  std::optional<absl::Status> Get(size_t index) {
    absl::MutexLock lock(&mu_);
    return statuses_[index];
  }

  // Waits for every command to complete, then checks their codes.
  void Check(const std::vector<std::unique_ptr<v1::Command>>& commands) {
    absl::MutexLock lock(&mu_);
    auto all_done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return pending_ == 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&all_done), kSettleLimit)) {
      for (size_t i = 0; i < statuses_.size(); ++i) {
        if (!statuses_[i].has_value()) {
          Fail(absl::StrCat("command #", i, " never completed: ",
                            commands[i]->ShortDebugString()));
        }
      }
    }
    for (size_t i = 0; i < statuses_.size(); ++i) {
      const absl::Status& s = *statuses_[i];
      if (!AllowedCode(s.code()) || (!s.ok() && s.message().empty())) {
        Fail(absl::StrCat("command #", i, " ", commands[i]->ShortDebugString(),
                          " returned ", s.ToString(),
                          ": not a code of the error table, or no message"));
      }
    }
  }

 private:
  absl::Mutex mu_;
  std::vector<std::optional<absl::Status>> statuses_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs one command on `session` as the Submit stream does.
void Run(const v1::Command& command, Session& session,
         const std::string& session_id, v1::CommandResult& result,
         Session::Done done) {
  switch (command.op_case()) {
#define GS_FUZZ_CASE(Name, field)                               \
  case v1::Command::k##Name:                                    \
    session::Invoke(session, &Session::Name, command.field(),   \
                    result.mutable_##field(), std::move(done)); \
    return;
    GPUSTREAM_SESSION_OPS(GS_FUZZ_CASE)
#undef GS_FUZZ_CASE
    case v1::Command::kCloseSession: {
      v1::CloseSessionRequest req;
      req.set_session_id(session_id);
      harness->core->CloseSession(
          harness->who, req, result.mutable_close_session(), std::move(done));
      return;
    }
    case v1::Command::kKeepAlive: {
      v1::KeepAliveRequest req;
      req.set_session_id(session_id);
      done(harness->core->KeepAlive(harness->who, req,
                                    result.mutable_keep_alive()));
      return;
    }
    case v1::Command::OP_NOT_SET:
      break;
  }
  done(absl::InvalidArgumentError(
      absl::StrCat("command seq ", command.seq(), " has no op set")));
}

// What the tenant and the device still hold, or "" when nothing.
std::string Leftovers() {
  v1::GetStatsResponse stats;
  harness->core->Stats(&stats);
  std::string out;
  for (const v1::TenantStats& t : stats.tenants()) {
    if (t.sessions() != 0 || t.queues() != 0 || t.memory_bytes() != 0 ||
        t.inflight_commands() != 0 || t.staged_bytes() != 0) {
      absl::StrAppend(&out, "tenant ", t.ShortDebugString(), "; ");
    }
  }
  for (const v1::DeviceStats& d : stats.devices()) {
    // A device lost for good (HIP) holds its failed context's memory until
    // the process ends; the next input starts a new core.
    if (harness->device_lost) break;
    if (d.memory_used_bytes() != harness->device_memory_at_start) {
      absl::StrAppend(&out, "device memory_used_bytes ", d.memory_used_bytes(),
                      " (", harness->device_memory_at_start,
                      " before the input); ");
    }
  }
  return out;
}

// Work the teardown let go of may still be finishing (a GPU stream runs
// what it was handed): counters get a moment to settle before a leak is
// declared.
void CheckNothingLeft() {
  const absl::Time deadline = absl::Now() + kSettleLimit;
  std::string left = Leftovers();
  while (!left.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
    left = Leftovers();
  }
  if (!left.empty()) Fail("after the session closed: " + left);
}

std::shared_ptr<Session> OpenSession(std::string* id) {
  // A device recovering from a fault (cuda_fake) may refuse for a moment.
  const absl::Time deadline = absl::Now() + kSettleLimit;
  while (true) {
    v1::OpenSessionResponse opened;
    absl::Status s = harness->core->OpenSession(harness->who, {}, &opened);
    if (s.ok()) {
      *id = opened.session_id();
      auto session = harness->core->FindSession(harness->who, *id);
      if (!session.ok())
        Fail(absl::StrCat("opened, not found: ", session.status().ToString()));
      return *session;
    }
#ifdef GS_FUZZ_HIP_FAKE
    if (harness->device_lost) return nullptr;  // The caller restarts.
#endif
    if (absl::Now() > deadline)
      Fail(absl::StrCat("OpenSession: ", s.ToString()));
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace
}  // namespace gpustream::fuzz

#if defined(GS_FUZZ_CUDA_FAKE) || defined(GS_FUZZ_HIP_FAKE)
// LeakSanitizer's scan at exit crashes ("Tracer caught signal 11") while the
// fake driver's stream threads are alive, failing a run that found nothing.
// What the daemon holds is checked after every input instead (tenant and
// device counters back to their starting values).
extern "C" int __lsan_is_turned_off() { return 1; }
#endif

namespace gpustream::fuzz {
namespace {

// (Re)starts the harness's core on a new device.
void StartCore() {
  session::ManagerOptions options;
  // Small limits, so that inputs reach them.
  options.session_limits.max_queues = 6;
  options.session_limits.max_objects = 48;
  std::vector<std::unique_ptr<backend::Device>> devices;
  devices.push_back(OpenDevice(harness->argv0.c_str()));
  auto core = session::ServerCore::Create(std::move(devices), {}, options);
  if (!core.ok()) Fail(absl::StrCat("ServerCore: ", core.status().ToString()));
  harness->core = *std::move(core);
  harness->core->SetDeviceLostHandler(
      [](uint32_t, const absl::Status&) { harness->device_lost = true; });
  harness->who = *harness->core->Authenticate({});
  v1::GetStatsResponse stats;
  harness->core->Stats(&stats);
  harness->device_memory_at_start = stats.devices(0).memory_used_bytes();
}

#ifdef GS_FUZZ_HIP_FAKE
// The daemon cannot reset a HIP device; its supervisor restarts it, and a
// new process gets a clean device. Here: a new core, after the fake's
// context is reset behind the daemon's back (FAKEGPU_RESET_CLEARS_STICKY).
void RestartAfterDeviceLoss() {
  harness->core.reset();
  void* fake = dlopen(
      FakeDriverPath(harness->argv0.c_str(), "fake_hip/libfakehip.so").c_str(),
      RTLD_NOW | RTLD_NOLOAD);
  if (fake == nullptr) Fail("the fake HIP runtime is not loaded");
  using ResetFn = backend::hipapi::Error (*)(backend::hipapi::Device);
  auto reset =
      reinterpret_cast<ResetFn>(dlsym(fake, "hipDevicePrimaryCtxReset"));
  if (reset == nullptr || reset(0) != backend::hipapi::kSuccess) {
    Fail("cannot reset the fake device");
  }
  harness->device_lost = false;
  StartCore();
}
#endif

}  // namespace
}  // namespace gpustream::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace gpustream;
  // Session open and close lines for every input would drown the output.
  log::Init(log::Level::kError, log::Format::kText);
  fuzz::harness = new fuzz::Harness;
  fuzz::harness->argv0 = (*argv)[0];
  fuzz::StartCore();
  (void)argc;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpustream;
#ifdef GS_FUZZ_HIP_FAKE
  if (fuzz::harness->device_lost) fuzz::RestartAfterDeviceLoss();
#endif
  std::string id;
  std::shared_ptr<session::Session> session = fuzz::OpenSession(&id);
#ifdef GS_FUZZ_HIP_FAKE
  if (session == nullptr) {  // The device was lost after the last input.
    fuzz::RestartAfterDeviceLoss();
    session = fuzz::OpenSession(&id);
    if (session == nullptr) fuzz::Fail("a restarted core lost its device");
  }
#endif
  fuzz::CommandDecoder decoder(data, size, session->default_queue_id());
  fuzz::Completions completions;
  std::vector<std::unique_ptr<v1::Command>> commands;
  // Responses are written until each command's done runs.
  std::vector<std::unique_ptr<v1::CommandResult>> results;
  while (decoder.HasNext()) {
    commands.push_back(std::make_unique<v1::Command>(decoder.Next()));
    results.push_back(std::make_unique<v1::CommandResult>());
    const size_t index = commands.size() - 1;
    fuzz::Run(*commands[index], *session, id, *results[index],
              completions.Expect(index));
    // Creates complete at once: learn their ids for the commands after.
    if (auto status = completions.Get(index)) {
      decoder.Observe(*commands[index], *results[index], *status);
    }
  }
  // Closing cancels what still waits; every command then completes.
  commands.push_back(std::make_unique<v1::Command>());
  commands.back()->mutable_close_session();
  results.push_back(std::make_unique<v1::CommandResult>());
  fuzz::Run(*commands.back(), *session, id, *results.back(),
            completions.Expect(commands.size() - 1));
  completions.Check(commands);
  session.reset();
  fuzz::CheckNothingLeft();
#if defined(GS_FUZZ_CUDA_FAKE) || defined(GS_FUZZ_HIP_FAKE)
  if (const uint64_t strays = fuzz::StrayAccesses(fuzz::harness->argv0.c_str());
      strays != 0) {
    fuzz::Fail(
        absl::StrCat(strays, " kernel accesses reached outside their buffers"));
  }
#endif
  return 0;
}
