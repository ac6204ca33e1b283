// Thousands of random, mostly malformed commands from a seeded generator,
// on a real gpustreamd: every one is answered with a code of the error table,
// the daemon keeps serving, another session's data is untouched, and once
// the session closes the device's free memory is back where it was.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

// Draws one random command; ids, sizes and names mix valid and invalid.
class CommandGenerator {
 public:
  CommandGenerator(uint64_t seed, uint64_t default_queue,
                   uint64_t foreign_buffer)
      : rng_(seed),
        default_queue_(default_queue),
        foreign_buffer_(foreign_buffer) {}

  void Fill(v1::Command& c) {
    switch (Pick(16)) {
      case 0: {
        auto* r = c.mutable_create_queue();
        r->set_id(Id());
        r->set_priority(Pick(3) == 0 ? -1 : 0);
        break;
      }
      case 1:
        c.mutable_destroy_queue()->set_queue_id(Id());
        break;
      case 2: {
        auto* r = c.mutable_synchronize_queue();
        r->set_queue_id(Id());
        r->set_timeout_ms(Pick(2) * 5);
        break;
      }
      case 3: {
        auto* r = c.mutable_create_event();
        r->set_id(Id());
        r->set_enable_timing(Pick(2));
        break;
      }
      case 4: {
        auto* r = c.mutable_record_event();
        r->set_queue_id(Id());
        r->set_event_id(Id());
        break;
      }
      case 5: {
        auto* r = c.mutable_wait_event();
        r->set_queue_id(Id());
        r->set_event_id(Id());
        break;
      }
      case 6: {
        auto* r = c.mutable_create_flag();
        r->set_id(Id());
        break;
      }
      case 7: {
        auto* r = c.mutable_signal_flag();
        r->set_flag_id(Id());
        r->set_value(Pick(3));
        break;
      }
      case 8: {
        auto* r = c.mutable_wait_host_value();
        r->set_queue_id(Id());
        r->set_flag_id(Id());
        r->set_value(Pick(3));
        r->set_condition(static_cast<v1::WaitCondition>(Pick(4)));
        break;
      }
      case 9: {
        auto* r = c.mutable_wait_flag();
        r->set_flag_id(Id());
        r->set_value(Pick(3));
        r->set_timeout_ms(Pick(2) * 5);
        break;
      }
      case 10: {
        auto* r = c.mutable_allocate_buffer();
        r->set_id(Id());
        r->set_size_bytes(Size());
        r->set_kind(static_cast<v1::MemoryKind>(Pick(4)));
        break;
      }
      case 11:
        c.mutable_free_buffer()->set_buffer_id(Id());
        break;
      case 12: {
        auto* r = c.mutable_write_buffer();
        r->set_queue_id(Id());
        r->set_buffer_id(Id());
        r->set_offset(Size());
        r->set_data(std::string(Pick(64), 'w'));
        break;
      }
      case 13: {
        auto* r = c.mutable_read_buffer();
        r->set_queue_id(Id());
        r->set_buffer_id(Id());
        r->set_offset(Size());
        r->set_size(Size() % 4096);
        break;
      }
      case 14: {
        auto* r = c.mutable_fill_buffer();
        r->set_queue_id(Id());
        r->set_buffer_id(Id());
        r->set_offset(Size());
        r->set_size(Size());
        r->set_value(Pick(1000));
        break;
      }
      default:
        FillLaunch(*c.mutable_launch_kernel());
        break;
    }
  }

 private:
  uint64_t Pick(uint64_t n) { return rng_() % n; }

  uint64_t Id() {
    switch (Pick(10)) {
      case 0:
        return 0;  // Server-assigned.
      case 8:
      case 9:
        return default_queue_;  // Valid where a queue is wanted.
      case 1:
        return (uint64_t{1} << 63) + Pick(4);  // The server range.
      case 2:
        return foreign_buffer_;  // Another session's buffer.
      case 3:
        return rng_();
      default:
        return 1 + Pick(12);  // A small pool, so ids get reused.
    }
  }

  uint64_t Size() {
    static constexpr uint64_t kSizes[] = {0,
                                          1,
                                          4,
                                          8,
                                          64,
                                          1000,
                                          1 << 20,
                                          uint64_t{1} << 40,
                                          ~uint64_t{0},
                                          ~uint64_t{0} - 3};
    return kSizes[Pick(std::size(kSizes))];
  }

  void FillLaunch(v1::LaunchKernelRequest& r) {
    static const char* kModules[] = {"samples", "samples", "", "nope"};
    static const char* kKernels[] = {"fill_u32", "vector_add_f32", "saxpy_f32",
                                     "add_u64",  "spin_ns",        "noop",
                                     "",         "bogus"};
    static constexpr uint32_t kDims[] = {0, 1, 2, 64, 1024, 65536, 1u << 31};
    r.set_queue_id(Id());
    r.set_module(kModules[Pick(std::size(kModules))]);
    r.set_kernel(kKernels[Pick(std::size(kKernels))]);
    r.mutable_grid()->set_x(kDims[Pick(std::size(kDims))]);
    r.mutable_grid()->set_y(kDims[Pick(3)]);
    r.mutable_block()->set_x(kDims[Pick(5)]);
    r.set_shared_memory_bytes(Pick(2) * 100000);
    for (uint64_t i = 0, n = Pick(5); i < n; ++i) {
      v1::KernelArg* a = r.add_args();
      switch (Pick(9)) {
        case 0:
        case 1:
          a->mutable_buffer()->set_buffer_id(Id());
          a->mutable_buffer()->set_offset(Size() % 128);
          break;
        case 2:
          a->set_i32(static_cast<int32_t>(rng_()));
          break;
        case 3:
          a->set_u32(static_cast<uint32_t>(Pick(5000)));
          break;
        case 4:
        case 5:
          // Small: spin_ns must not spin for ages, n stays modest.
          a->set_u64(Pick(100'000));
          break;
        case 6:
          a->set_f32(1.5f);
          break;
        case 7:
          a->set_bytes("blob");
          break;
        default:
          break;  // An argument with nothing set.
      }
    }
  }

  std::mt19937_64 rng_;
  const uint64_t default_queue_;
  const uint64_t foreign_buffer_;
};

TEST(BadInputTest, RandomCommandsNeverHurtTheDaemon) {
  auto daemon = testing::DaemonProcess::Start(
      {"--cpu_memory_bytes=16777216", "--lease_seconds=30"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = v1::GpuStream::NewStub(grpc::CreateChannel(
      (*daemon)->unix_target(), grpc::InsecureChannelCredentials()));
  auto free_memory = [&] {
    grpc::ClientContext ctx;
    v1::ListDevicesResponse devices;
    EXPECT_TRUE(stub->ListDevices(&ctx, {}, &devices).ok());
    return devices.devices(0).free_memory_bytes();
  };

  // The bystander: a session with a buffer of known contents.
  grpc::ClientContext c1;
  v1::OpenSessionResponse bystander;
  ASSERT_TRUE(stub->OpenSession(&c1, {}, &bystander).ok());
  v1::AllocateBufferRequest alloc;
  alloc.set_session_id(bystander.session_id());
  alloc.set_id(5);
  alloc.set_size_bytes(64);
  v1::AllocateBufferResponse allocated;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub->AllocateBuffer(&c2, alloc, &allocated).ok());
  v1::FillBufferRequest fill;
  fill.set_session_id(bystander.session_id());
  fill.set_queue_id(bystander.default_queue_id());
  fill.set_buffer_id(5);
  fill.set_size(64);
  fill.set_value(0x600d);
  v1::FillBufferResponse filled;
  grpc::ClientContext c3;
  ASSERT_TRUE(stub->FillBuffer(&c3, fill, &filled).ok());
  const uint64_t before = free_memory();

  grpc::ClientContext c4;
  v1::OpenSessionResponse fuzz;
  ASSERT_TRUE(stub->OpenSession(&c4, {}, &fuzz).ok());
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(120));
  auto stream = stub->Submit(&stream_ctx);

  // The answers: every code must be one of the error table.
  const std::set<grpc::StatusCode> allowed = {
      grpc::StatusCode::NOT_FOUND,
      grpc::StatusCode::ALREADY_EXISTS,
      grpc::StatusCode::INVALID_ARGUMENT,
      grpc::StatusCode::OUT_OF_RANGE,
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      grpc::StatusCode::FAILED_PRECONDITION,
      grpc::StatusCode::DEADLINE_EXCEEDED,
      grpc::StatusCode::CANCELLED,
      grpc::StatusCode::INTERNAL};
  std::map<int, int> codes;
  std::vector<std::string> unexpected;
  std::thread reader([&] {
    v1::SubmitResponse resp;
    while (stream->Read(&resp)) {
      for (const auto& r : resp.results()) {
        const auto code = static_cast<grpc::StatusCode>(r.status().code());
        ++codes[code];
        const bool ok =
            code == grpc::StatusCode::OK ||
            (allowed.count(code) > 0 &&
             (code != grpc::StatusCode::INTERNAL ||
              absl::StrContains(r.status().message(), "kernel fault")));
        if (!ok ||
            (code != grpc::StatusCode::OK && r.status().message().empty())) {
          unexpected.push_back(absl::StrCat(code, ": ", r.status().message()));
        }
      }
    }
  });

  CommandGenerator generator(/*seed=*/20261130, fuzz.default_queue_id(),
                             /*foreign_buffer=*/5);
  uint64_t seq = 0;
  for (int batch = 0; batch < 40; ++batch) {
    v1::SubmitRequest req;
    req.set_session_id(fuzz.session_id());
    for (int i = 0; i < 250; ++i) {
      v1::Command* c = req.add_commands();
      c->set_seq(++seq);
      generator.Fill(*c);
    }
    ASSERT_TRUE(stream->Write(req));
  }
  // Closing releases whatever the commands left parked.
  grpc::ClientContext c5;
  v1::CloseSessionRequest close;
  close.set_session_id(fuzz.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub->CloseSession(&c5, close, &closed).ok());
  stream->WritesDone();
  reader.join();
  EXPECT_TRUE(stream->Finish().ok());

  EXPECT_TRUE(unexpected.empty())
      << unexpected.size() << " unexpected, first: " << unexpected.front();
  for (const auto& [code, n] : codes) {
    std::printf("status code %d: %d results\n", code, n);
  }
  // The mix really exercised failures, not just successes.
  EXPECT_GT(codes[grpc::StatusCode::NOT_FOUND], 100);
  EXPECT_GT(codes[grpc::StatusCode::INVALID_ARGUMENT], 100);
  EXPECT_GT(codes[grpc::StatusCode::OUT_OF_RANGE], 10);

  EXPECT_EQ(free_memory(), before);
  v1::ReadBufferRequest read;
  read.set_session_id(bystander.session_id());
  read.set_queue_id(bystander.default_queue_id());
  read.set_buffer_id(5);
  read.set_size(64);
  v1::ReadBufferResponse data;
  grpc::ClientContext c6;
  ASSERT_TRUE(stub->ReadBuffer(&c6, read, &data).ok());
  for (int i = 0; i < 16; ++i) {
    uint32_t v;
    std::memcpy(&v, data.data().data() + 4 * i, 4);
    EXPECT_EQ(v, 0x600du) << i;
  }
  EXPECT_EQ((*daemon)->Stop(SIGTERM), 0) << (*daemon)->log();
}

}  // namespace
}  // namespace gpustream
