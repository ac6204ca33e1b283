// A soak client: one session, eight queues, a seeded random mix of launches,
// copies, fills, writes, event, queue and flag waits, every read checked
// against a model kept here; prints a one-line JSON summary (tools/soak/).
//
// The model is exact because every cross-queue read is ordered both ways:
// the reading queue waits for the source queue (by event, queue or flag) and
// the source queue then waits for the reader, so applying the operations to
// the model in issue order gives what the daemon computes.
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/gpustream.h"
#include "server/usage.h"
#include "server/version.h"

ABSL_FLAG(std::string, target, "unix:/tmp/gpustreamd.sock",
          "The daemon: unix:/path or 127.0.0.1:port");
ABSL_FLAG(std::string, token, "", "Bearer token, where tenants are configured");
ABSL_FLAG(std::string, name, "soak", "client_name of the session");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the mix: equal seeds, equal runs");
ABSL_FLAG(uint64_t, ops, 2000, "Operations of the mix");
ABSL_FLAG(int, queues, 8, "Queues besides the default one");
ABSL_FLAG(int, pace_us, 0,
          "Sleep after each operation (lets a driver kill "
          "the client mid-mix)");
ABSL_FLAG(uint32_t, lease_seconds, 0,
          "Session lease (0: the daemon's); short leases reclaim killed "
          "clients fast");
ABSL_FLAG(int, call_timeout_s, 60, "Timeout of each blocking call");
ABSL_FLAG(int, deadline_s, 600,
          "The whole run: past it the client reports and exits 3");

namespace gs = gpustream::client;

namespace {

constexpr uint64_t kWords = 2048;  // u32 words of each queue's buffer.
constexpr uint64_t kFloats = 512;  // Elements of each float vector.

// Per-queue objects and the model of their contents.
struct Lane {
  gs::Queue queue;
  gs::Buffer words, fa, fb, fc, counter;
  gs::Event event;
  gs::Flag gate, done, cross;
  uint64_t gate_ticket = 0, done_ticket = 0, cross_ticket = 0;
  bool gate_pending = false;
  std::vector<uint32_t> m_words = std::vector<uint32_t>(kWords, 0);
  std::vector<float> m_fa = std::vector<float>(kFloats, 0.0f);
  std::vector<float> m_fb = m_fa, m_fc = m_fa;
  uint64_t m_counter = 0;
  uint64_t host_funcs_enqueued = 0;
  std::atomic<uint64_t> host_funcs_run{0};
};

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

class Mix {
 public:
  Mix(gs::Session& session, uint64_t seed, int queues)
      : s_(session), rng_(seed), lanes_(queues) {}

  // Creates the objects; false (with first_error_ set) on failure.
  bool Setup() {
    for (Lane& l : lanes_) {
      l.queue = s_.create_queue();
      for (auto [buf, size] :
           {std::pair{&l.words, kWords * 4}, std::pair{&l.fa, kFloats * 4},
            std::pair{&l.fb, kFloats * 4}, std::pair{&l.fc, kFloats * 4},
            std::pair{&l.counter, uint64_t{8}}}) {
        auto b = s_.allocate(size);
        if (!Check(b.status(), "allocate")) return false;
        *buf = *std::move(b);
      }
      l.event = s_.create_event();
      l.gate = s_.create_flag();
      l.done = s_.create_flag();
      l.cross = s_.create_flag();
    }
    return true;
  }

  // One operation of the mix; false once the run must stop.
  bool Step() {
    ++ops_;
    Lane& l = lanes_[Pick(lanes_.size())];
    // Releases a gate now and then, so gated work waits a random while.
    if (Pick(4) == 0) {
      if (!SignalGate(lanes_[Pick(lanes_.size())])) return false;
    }
    switch (Pick(20)) {
      case 0:
      case 1:
        return Fill(l);
      case 2:
      case 3:
        return WriteWords(l);
      case 4:
      case 5:
        return LaunchFill(l);
      case 6:
        return LaunchAdd(l);
      case 7:
        return LaunchFloat(l);
      case 8:
        return WriteFloats(l);
      case 9:
        return CopyLocal(l);
      case 10:
      case 11:
        return CrossCopy(l);
      case 12:
        return Gate(l);
      case 13:
      case 14:
        return ReadWords(l);
      case 15:
        return ReadSmall(l);
      case 16:
        return FlagRoundTrip(l);
      case 17:
        return EventSync(l);
      case 18:
        return HostFunc(l);
      default:
        return Sync(l);
    }
  }

  // Drains every queue and checks every buffer whole; the session's end.
  bool Finish() {
    if (!SignalAll()) return false;
    for (Lane& l : lanes_) {
      if (!Check(l.queue.synchronize(Timeout()), "final synchronize"))
        return false;
    }
    for (Lane& l : lanes_) {
      if (!VerifyRange(l, l.words, l.m_words.data(), 0, kWords * 4, "words") ||
          !VerifyRange(l, l.fa, l.m_fa.data(), 0, kFloats * 4, "fa") ||
          !VerifyRange(l, l.fb, l.m_fb.data(), 0, kFloats * 4, "fb") ||
          !VerifyRange(l, l.fc, l.m_fc.data(), 0, kFloats * 4, "fc") ||
          !VerifyRange(l, l.counter, &l.m_counter, 0, 8, "counter")) {
        return false;
      }
      ++verified_;
      if (l.host_funcs_run.load() != l.host_funcs_enqueued) {
        Mismatch(absl::StrCat("host functions run ", l.host_funcs_run.load(),
                              ", enqueued ", l.host_funcs_enqueued));
      }
    }
    return Check(s_.close(), "close");
  }

  std::string Summary(const std::string& name, uint64_t seed,
                      double seconds) const {
    char checksum[17];
    std::snprintf(checksum, sizeof checksum, "%016" PRIx64, checksum_);
    return absl::StrCat(
        "{\"client\":\"", JsonEscape(name), "\",\"seed\":", seed,
        ",\"ops\":", ops_, ",\"commands\":", commands_,
        ",\"verified\":", verified_, ",\"verified_bytes\":", verified_bytes_,
        ",\"mismatches\":", mismatches_, ",\"errors\":", errors_,
        ",\"checksum\":\"", checksum,
        "\",\"elapsed_s\":", static_cast<int64_t>(seconds * 1000) / 1000.0,
        ",\"first_error\":\"", JsonEscape(first_error_), "\"}");
  }

  bool failed() const { return mismatches_ + errors_ > 0; }

 private:
  uint64_t Pick(uint64_t n) { return rng_() % n; }
  absl::Duration Timeout() const {
    return absl::Seconds(absl::GetFlag(FLAGS_call_timeout_s));
  }

  // A random [begin, end) of `n` elements, non-empty.
  std::pair<uint64_t, uint64_t> Range(uint64_t n) {
    const uint64_t begin = Pick(n);
    return {begin, begin + 1 + Pick(std::min<uint64_t>(n - begin, 512))};
  }

  bool Check(const absl::Status& s, const char* what) {
    if (s.ok()) return true;
    ++errors_;
    if (first_error_.empty())
      first_error_ = absl::StrCat(what, ": ", s.ToString());
    return false;
  }
  void Mismatch(std::string what) {
    ++mismatches_;
    if (first_error_.empty()) first_error_ = std::move(what);
  }

  // Host stores may not wait behind a gate: release them before blocking.
  bool SignalGate(Lane& l) {
    if (!l.gate_pending) return true;
    l.gate_pending = false;
    ++commands_;
    return Check(l.gate.signal(l.gate_ticket), "signal gate");
  }
  bool SignalAll() {
    for (Lane& l : lanes_) {
      if (!SignalGate(l)) return false;
    }
    return true;
  }

  bool Fill(Lane& l) {
    auto [b, e] = Range(kWords);
    const uint32_t v = static_cast<uint32_t>(rng_());
    l.queue.fill(l.words, b * 4, (e - b) * 4, v);
    std::fill(l.m_words.begin() + b, l.m_words.begin() + e, v);
    ++commands_;
    return true;
  }

  bool WriteWords(Lane& l) {
    auto [b, e] = Range(kWords);
    for (uint64_t i = b; i < e; ++i)
      l.m_words[i] = static_cast<uint32_t>(rng_());
    l.queue.write(
        l.words, b * 4,
        absl::string_view(reinterpret_cast<const char*>(l.m_words.data() + b),
                          (e - b) * 4));
    ++commands_;
    return true;
  }

  bool LaunchFill(Lane& l) {
    auto [b, e] = Range(kWords);
    const uint32_t v = static_cast<uint32_t>(rng_());
    const uint64_t n = e - b;
    l.queue.launch("samples", "fill_u32",
                   {static_cast<uint32_t>((n + 63) / 64)}, {64},
                   {gs::Arg(l.words, b * 4), v, n});
    std::fill(l.m_words.begin() + b, l.m_words.begin() + e, v);
    ++commands_;
    return true;
  }

  bool LaunchAdd(Lane& l) {
    const uint64_t v = rng_() >> 8;
    l.queue.launch("samples", "add_u64", {1}, {1}, {l.counter, v});
    l.m_counter += v;
    ++commands_;
    return true;
  }

  // Float vectors hold small integers, so every sum and product is exact
  // whatever the kernel's instruction order (or FMA on a GPU).
  bool LaunchFloat(Lane& l) {
    const uint64_t n = 1 + Pick(kFloats);
    const gs::Dim3 grid{static_cast<uint32_t>((n + 63) / 64)}, block{64};
    if (Pick(2) == 0) {
      l.queue.launch("samples", "vector_add_f32", grid, block,
                     {l.fa, l.fb, l.fc, n});
      for (uint64_t i = 0; i < n; ++i) l.m_fc[i] = l.m_fa[i] + l.m_fb[i];
    } else {
      const float alpha = static_cast<float>(static_cast<int>(Pick(5)) - 2);
      l.queue.launch("samples", "saxpy_f32", grid, block,
                     {alpha, l.fa, l.fb, n});
      for (uint64_t i = 0; i < n; ++i)
        l.m_fb[i] = alpha * l.m_fa[i] + l.m_fb[i];
    }
    ++commands_;
    // Keeps the values far below 2^24, where floats stop being exact.
    for (float v : l.m_fb) {
      if (v > 1e6f || v < -1e6f) {
        l.queue.fill(l.fb, 0, kFloats * 4, 0);
        std::fill(l.m_fb.begin(), l.m_fb.end(), 0.0f);
        ++commands_;
        break;
      }
    }
    return true;
  }

  bool WriteFloats(Lane& l) {
    auto [b, e] = Range(kFloats);
    const bool to_a = Pick(2) == 0;
    std::vector<float>& m = to_a ? l.m_fa : l.m_fb;
    for (uint64_t i = b; i < e; ++i)
      m[i] = static_cast<float>(static_cast<int>(Pick(2001)) - 1000);
    l.queue.write(to_a ? l.fa : l.fb, b * 4,
                  absl::string_view(reinterpret_cast<const char*>(m.data() + b),
                                    (e - b) * 4));
    ++commands_;
    return true;
  }

  // Copies between two disjoint ranges of the lane's own buffer.
  bool CopyLocal(Lane& l) {
    const uint64_t half = kWords / 2;
    const uint64_t n = 1 + Pick(half);
    const uint64_t src = Pick(half - n + 1);
    const uint64_t dst = half + Pick(half - n + 1);
    const bool up = Pick(2) == 0;
    const uint64_t from = up ? src : dst, to = up ? dst : src;
    l.queue.copy(l.words, from * 4, l.words, to * 4, n * 4);
    std::copy_n(l.m_words.begin() + from, n, l.m_words.begin() + to);
    ++commands_;
    return true;
  }

  // The reader `l` copies from another lane once ordered after it by an
  // event, a queue wait or a flag; the source then waits for the reader so
  // it cannot overwrite what is being read.
  bool CrossCopy(Lane& l) {
    Lane& src = lanes_[Pick(lanes_.size())];
    if (&src == &l) return CopyLocal(l);
    switch (Pick(3)) {
      case 0:
        src.queue.record_event(src.event);
        l.queue.wait_for(src.event);
        break;
      case 1:
        l.queue.wait_for(src.queue);
        break;
      default:
        src.queue.write_flag(src.cross, ++src.cross_ticket);
        l.queue.wait_for_host_value(src.cross, src.cross_ticket,
                                    gs::WaitCondition::kGreaterEqual);
        ++commands_;
    }
    auto [b, e] = Range(kWords);
    const uint64_t dst = Pick(kWords - (e - b) + 1);
    l.queue.copy(src.words, b * 4, l.words, dst * 4, (e - b) * 4);
    std::copy(src.m_words.begin() + b, src.m_words.begin() + e,
              l.m_words.begin() + dst);
    src.queue.wait_for(l.queue);
    commands_ += 3;
    return true;
  }

  // Later work on the lane waits for the host; signalled some steps later.
  bool Gate(Lane& l) {
    l.queue.wait_for_host_value(l.gate, ++l.gate_ticket,
                                gs::WaitCondition::kGreaterEqual);
    l.gate_pending = true;
    ++commands_;
    return true;
  }

  bool VerifyRange(Lane& l, const gs::Buffer& buf, const void* model,
                   uint64_t offset, uint64_t size, const char* what) {
    auto data = l.queue.read(buf, offset, size);
    ++commands_;
    if (!Check(data.status(), "read")) return false;
    ++verified_;
    verified_bytes_ += size;
    for (unsigned char c : *data)
      checksum_ = (checksum_ ^ c) * 0x100000001b3ull;
    const char* want = static_cast<const char*>(model) + offset;
    if (data->size() != size || std::memcmp(data->data(), want, size) != 0) {
      uint64_t at = 0;
      while (at < std::min<uint64_t>(size, data->size()) &&
             (*data)[at] == want[at]) {
        ++at;
      }
      Mismatch(absl::StrCat(what, " of queue ", l.queue.id(), ": ", size,
                            " bytes at offset ", offset, " differ from byte ",
                            at, " (got ", data->size(), " bytes)"));
    }
    return true;
  }

  bool ReadWords(Lane& l) {
    if (!SignalAll()) return false;
    auto [b, e] = Range(kWords);
    return VerifyRange(l, l.words, l.m_words.data(), b * 4, (e - b) * 4,
                       "words");
  }

  bool ReadSmall(Lane& l) {
    if (!SignalAll()) return false;
    switch (Pick(3)) {
      case 0:
        return VerifyRange(l, l.counter, &l.m_counter, 0, 8, "counter");
      case 1:
        return VerifyRange(l, l.fb, l.m_fb.data(), 0, kFloats * 4, "fb");
      default:
        return VerifyRange(l, l.fc, l.m_fc.data(), 0, kFloats * 4, "fc");
    }
  }

  // The queue stores a ticket when it gets there; the host waits for it.
  bool FlagRoundTrip(Lane& l) {
    if (!SignalAll()) return false;
    l.queue.write_flag(l.done, ++l.done_ticket);
    auto seen =
        l.done.wait(l.done_ticket, gs::WaitCondition::kGreaterEqual, Timeout());
    commands_ += 2;
    if (!Check(seen.status(), "flag wait")) return false;
    ++verified_;
    if (*seen != l.done_ticket) {
      Mismatch(absl::StrCat("flag of queue ", l.queue.id(), " is ", *seen,
                            ", want ", l.done_ticket));
    }
    return true;
  }

  bool EventSync(Lane& l) {
    if (!SignalAll()) return false;
    l.queue.record_event(l.event);
    commands_ += 2;
    if (!Check(l.event.synchronize(Timeout()), "event synchronize"))
      return false;
    auto complete = l.event.is_complete();
    ++commands_;
    if (!Check(complete.status(), "query event")) return false;
    ++verified_;
    if (!*complete) Mismatch("event incomplete after its synchronize");
    return true;
  }

  bool HostFunc(Lane& l) {
    ++l.host_funcs_enqueued;
    l.queue.enqueue_host_func([&l] { l.host_funcs_run.fetch_add(1); });
    ++commands_;
    return true;
  }

  bool Sync(Lane& l) {
    if (!SignalAll()) return false;
    ++commands_;
    return Check(l.queue.synchronize(Timeout()), "synchronize");
  }

  gs::Session& s_;
  std::mt19937_64 rng_;
  std::vector<Lane> lanes_;
  uint64_t ops_ = 0, commands_ = 0, verified_ = 0, verified_bytes_ = 0;
  uint64_t mismatches_ = 0, errors_ = 0;
  uint64_t checksum_ = 0xcbf29ce484222325ull;  // FNV-1a of every read.
  std::string first_error_;
};

int Run() {
  const std::string name = absl::GetFlag(FLAGS_name);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const absl::Time start = absl::Now();
  // A hung daemon must not hang the soak: report and leave.
  std::thread([name, seed] {
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_deadline_s)));
    std::printf("{\"client\":\"%s\",\"seed\":%" PRIu64
                ",\"errors\":1,\"first_error\":\"deadline of %d s passed\"}\n",
                JsonEscape(name).c_str(), seed,
                absl::GetFlag(FLAGS_deadline_s));
    std::fflush(stdout);
    _exit(3);
  }).detach();

  auto client = gs::Client::Connect(absl::GetFlag(FLAGS_target),
                                    {.token = absl::GetFlag(FLAGS_token)});
  if (!client.ok()) {
    std::fprintf(stderr, "soak_client: connect: %s\n",
                 client.status().ToString().c_str());
    return 2;
  }
  auto session = client->open_session(
      {.client_name = name,
       .lease_seconds = absl::GetFlag(FLAGS_lease_seconds)});
  if (!session.ok()) {
    std::fprintf(stderr, "soak_client: open_session: %s\n",
                 session.status().ToString().c_str());
    return 2;
  }
  Mix mix(**session, seed, absl::GetFlag(FLAGS_queues));
  bool ok = mix.Setup();
  // The driver's kill storm waits for this line, so it kills clients that
  // hold a session and its objects with commands in flight.
  if (ok) {
    std::printf("READY\n");
    std::fflush(stdout);
  }
  const uint64_t ops = absl::GetFlag(FLAGS_ops);
  const int pace_us = absl::GetFlag(FLAGS_pace_us);
  for (uint64_t i = 0; ok && i < ops; ++i) {
    ok = mix.Step();
    if (pace_us > 0) absl::SleepFor(absl::Microseconds(pace_us));
  }
  if (ok) mix.Finish();
  std::printf("%s\n", mix.Summary(name, seed,
                                  absl::ToDoubleSeconds(absl::Now() - start))
                          .c_str());
  std::fflush(stdout);
  return mix.failed() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  gpustream::SetUsage("soak_client",
                      "one soak client: a seeded random mix of commands on "
                      "eight queues, every read checked; prints a JSON "
                      "summary.\nUsage: soak_client --target=ADDR [flags]");
  absl::ParseCommandLine(argc, argv);
  return Run();
}
