// HOST_SHARED buffers against a real gpustreamd on every backend: bytes
// written through the client's mapping reach device memory by CopyBuffer
// and come back the other way, and the share socket gives a buffer's
// memory only for its own fresh ticket, once, to its own session, never to
// garbage, with the main socket's permissions.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "client/gpustream.h"
#include "gtest/gtest.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream {
namespace {

using client::SharedMapping;

class SharedMemoryTest : public testing::BackendDaemonTest {
 protected:
  void SetUp() override {
    BackendDaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto c = client::Client::Connect(daemon_->unix_target());
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*std::move(c));
    auto info = client_->server_info();
    ASSERT_TRUE(info.ok()) << info.status();
    share_socket_ = info->share_socket();
    ASSERT_FALSE(share_socket_.empty());
    stub_ = v1::GpuStream::NewStub(grpc::CreateChannel(
        daemon_->unix_target(), grpc::InsecureChannelCredentials()));
  }

  // A session of raw calls (its secret id), for presenting tickets by hand.
  std::string OpenRawSession() {
    grpc::ClientContext ctx;
    v1::OpenSessionResponse resp;
    EXPECT_TRUE(stub_->OpenSession(&ctx, {}, &resp).ok());
    return resp.session_id();
  }
  // AllocateBuffer(HOST_SHARED) in `session`: the share ticket.
  std::string AllocateShared(const std::string& session, uint64_t id,
                             uint64_t size) {
    grpc::ClientContext ctx;
    v1::AllocateBufferRequest req;
    req.set_session_id(session);
    req.set_id(id);
    req.set_size_bytes(size);
    req.set_kind(v1::MEMORY_KIND_HOST_SHARED);
    v1::AllocateBufferResponse resp;
    grpc::Status s = stub_->AllocateBuffer(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.share_ticket().size(), 16u);
    return resp.share_ticket();
  }
  // Whether the daemon still answers a unary call.
  bool Serving() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    v1::GetServerInfoResponse resp;
    return stub_->GetServerInfo(&ctx, {}, &resp).ok();
  }
  // A connection to the share socket; -1 (and a failure) if none.
  int ConnectShareSocket() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, share_socket_.data(), share_socket_.size());
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ADD_FAILURE() << "connect: " << std::strerror(errno);
      close(fd);
      return -1;
    }
    return fd;
  }
  // Connects to the share socket, sends `bytes` (may be partial or
  // garbage), and reports whether the daemon closed the connection without
  // sending anything (within 5 s).
  bool ClosedWithoutAnswer(const std::string& bytes) {
    const int fd = ConnectShareSocket();
    if (fd < 0) return false;
    if (!bytes.empty()) send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[16];
    const ssize_t got = recv(fd, buf, sizeof(buf), 0);
    const int err = errno;
    close(fd);
    // Unread bytes at the daemon's close reset the connection instead.
    EXPECT_TRUE(got == 0 || (got < 0 && err == ECONNRESET))
        << "got " << got << ", " << std::strerror(err);
    return got == 0 || (got < 0 && err == ECONNRESET);
  }

  std::optional<client::Client> client_;
  std::unique_ptr<v1::GpuStream::Stub> stub_;
  std::string share_socket_;
};

TEST_P(SharedMemoryTest, BytesCrossBetweenTheMappingAndDeviceMemory) {
  auto session = client_->open_session();
  ASSERT_TRUE(session.ok()) << session.status();
  constexpr uint64_t kBytes = (1 << 20) + 12;  // Not a whole page.
  auto shared = (*session)->allocate_shared(kBytes);
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_EQ(shared->size(), kBytes);
  ASSERT_EQ(shared->span().size(), kBytes);
  // Zeroed, like every buffer.
  for (uint64_t i = 0; i < kBytes; i += 4096)
    ASSERT_EQ(shared->data()[i], std::byte{0});
  for (uint64_t i = 0; i < kBytes; ++i) {
    shared->data()[i] = static_cast<std::byte>(i * 7 + 3);
  }
  auto device = (*session)->allocate(kBytes);
  ASSERT_TRUE(device.ok()) << device.status();
  client::Queue& q = (*session)->default_queue();
  q.copy(*shared, 0, *device, 0, kBytes);
  auto back = q.read(*device, 0, kBytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(static_cast<uint8_t>((*back)[i]), static_cast<uint8_t>(i * 7 + 3))
        << "byte " << i;
  }
  // The other way: device work's bytes are visible in the mapping once the
  // queue is synchronized.
  q.fill(*device, 0, 4096, 0xA5A5A5A5u);
  q.copy(*device, 0, *shared, 8, 4096);
  ASSERT_TRUE(q.synchronize().ok());
  for (int i = 0; i < 4096; ++i) {
    ASSERT_EQ(shared->data()[8 + i], std::byte{0xA5}) << "byte " << 8 + i;
  }
  EXPECT_EQ(shared->data()[4096 + 8],
            static_cast<std::byte>((4096 + 8) * 7 + 3));

  // The mapping outlives the buffer: freed, its bytes are still this
  // process's to touch, and what the daemon had written stays.
  std::shared_ptr<SharedMapping> kept = shared->mapping();
  *shared = client::SharedBuffer();
  ASSERT_TRUE((*session)->flush().ok());
  ASSERT_TRUE(q.synchronize().ok());
  kept->data()[0] = std::byte{1};
  EXPECT_EQ(kept->data()[8], std::byte{0xA5});
}

TEST_P(SharedMemoryTest, TicketIsSingleUseAndBoundToItsSession) {
  const std::string alice = OpenRawSession(), bob = OpenRawSession();
  const std::string ticket = AllocateShared(alice, 1, 8192);
  // Bob presents Alice's ticket: nothing, and the ticket is used up.
  auto stolen = SharedMapping::Fetch(share_socket_, bob, ticket);
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied);
  auto after = SharedMapping::Fetch(share_socket_, alice, ticket);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kPermissionDenied);

  const std::string second = AllocateShared(alice, 2, 8192);
  auto mapped = SharedMapping::Fetch(share_socket_, alice, second);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->size(), 8192u);
  // Replayed: nothing.
  auto replayed = SharedMapping::Fetch(share_socket_, alice, second);
  EXPECT_EQ(replayed.status().code(), absl::StatusCode::kPermissionDenied);
  // A made-up ticket, and one of a buffer freed before it was presented.
  EXPECT_EQ(SharedMapping::Fetch(share_socket_, alice, std::string(16, 'x'))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  const std::string orphan = AllocateShared(alice, 3, 4096);
  {
    grpc::ClientContext ctx;
    v1::FreeBufferRequest req;
    req.set_session_id(alice);
    req.set_buffer_id(3);
    v1::FreeBufferResponse resp;
    ASSERT_TRUE(stub_->FreeBuffer(&ctx, req, &resp).ok());
  }
  // FreeBuffer revokes the ticket at once (the memory itself may stay
  // until the device's cleanup thread lets go of it).
  EXPECT_EQ(SharedMapping::Fetch(share_socket_, alice, orphan).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A closed session's tickets are dropped with it (and a freed buffer's:
  // share_tickets_test checks that Forget and Revoke do this themselves).
  const std::string last = AllocateShared(bob, 4, 4096);
  {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session_id(bob);
    v1::CloseSessionResponse resp;
    ASSERT_TRUE(stub_->CloseSession(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(SharedMapping::Fetch(share_socket_, bob, last).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Serving());
}

TEST_P(SharedMemoryTest, StalledConnectionsDelayNoFetch) {
  // Peers that connect and send nothing (or half a request) hold no one
  // up: a good fetch beside 100 of them answers at once, not after their
  // deadlines.
  std::vector<int> stalled;
  for (int i = 0; i < 100; ++i) {
    const int fd = ConnectShareSocket();
    ASSERT_GE(fd, 0);
    if (i % 2 == 1) send(fd, "GSSHARE1", 8, MSG_NOSIGNAL);
    stalled.push_back(fd);
  }
  const std::string session = OpenRawSession();
  const std::string ticket = AllocateShared(session, 1, 4096);
  const absl::Time start = absl::Now();
  auto mapped = SharedMapping::Fetch(share_socket_, session, ticket);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  // The stalled peers' deadline is 1 s; served one by one they would hold
  // the fetch up for 100 s.
  EXPECT_LT(took, absl::Milliseconds(900));
  for (int fd : stalled) close(fd);
}

TEST_P(SharedMemoryTest, UnredeemedTicketsAreBoundedPerSession) {
  const std::string session = OpenRawSession();
  for (uint64_t id = 1; id <= 64; ++id) AllocateShared(session, id, 0);
  grpc::ClientContext ctx;
  v1::AllocateBufferRequest req;
  req.set_session_id(session);
  req.set_id(65);
  req.set_size_bytes(0);
  req.set_kind(v1::MEMORY_KIND_HOST_SHARED);
  v1::AllocateBufferResponse resp;
  grpc::Status s = stub_->AllocateBuffer(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "share tickets"))
      << s.error_message();
  // Another session is not held back.
  const std::string other = OpenRawSession();
  AllocateShared(other, 1, 0);
}

TEST_P(SharedMemoryTest, GarbageGetsTheConnectionClosedAndNothingElse) {
  EXPECT_TRUE(ClosedWithoutAnswer("GET / HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(ClosedWithoutAnswer(std::string(4096, '\xff')));
  // Lengths past the limits.
  EXPECT_TRUE(ClosedWithoutAnswer(std::string("GSSHARE1\xff\xff", 10)));
  // A request that stops half-way: closed after the daemon's deadline.
  EXPECT_TRUE(
      ClosedWithoutAnswer(std::string("GSSHARE1\x04\x00"
                                      "ab",
                                      12)));
  // Nothing at all.
  EXPECT_TRUE(ClosedWithoutAnswer(""));
  // The daemon serves on, the share socket too.
  EXPECT_TRUE(Serving());
  const std::string session = OpenRawSession();
  const std::string ticket = AllocateShared(session, 1, 100);
  auto mapped = SharedMapping::Fetch(share_socket_, session, ticket);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->size(), 100u);
}

TEST_P(SharedMemoryTest, ShareSocketHasTheMainSocketsPermissions) {
  const std::string main_path =
      daemon_->unix_target().substr(std::strlen("unix:"));
  struct stat main_st, share_st;
  ASSERT_EQ(stat(main_path.c_str(), &main_st), 0);
  ASSERT_EQ(stat(share_socket_.c_str(), &share_st), 0);
  EXPECT_TRUE(S_ISSOCK(share_st.st_mode));
  EXPECT_EQ(share_st.st_mode & 07777, main_st.st_mode & 07777);
  EXPECT_EQ(share_st.st_mode & 07777, 0660u);
  EXPECT_EQ(share_st.st_gid, main_st.st_gid);
}

TEST_P(SharedMemoryTest, SharingOffRefusesSharedAllocations) {
  daemon_.reset();
  auto daemon = testing::StartDaemonOn(backend(), {"--share_socket=off"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto c = client::Client::Connect((*daemon)->unix_target());
  ASSERT_TRUE(c.ok()) << c.status();
  auto info = c->server_info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->share_socket(), "");
  auto session = c->open_session();
  ASSERT_TRUE(session.ok());
  auto shared = (*session)->allocate_shared(64);
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);

  auto stub = v1::GpuStream::NewStub(grpc::CreateChannel(
      (*daemon)->unix_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(stub->OpenSession(&ctx, {}, &opened).ok());
  grpc::ClientContext ctx2;
  v1::AllocateBufferRequest req;
  req.set_session_id(opened.session_id());
  req.set_size_bytes(64);
  req.set_kind(v1::MEMORY_KIND_HOST_SHARED);
  v1::AllocateBufferResponse resp;
  grpc::Status s = stub->AllocateBuffer(&ctx2, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "MEMORY_KIND_HOST_SHARED"))
      << s.error_message();
}

INSTANTIATE_TEST_SUITE_P(Backends, SharedMemoryTest,
                         ::testing::ValuesIn(conformance::BackendsUnderTest()),
                         testing::BackendName);

}  // namespace
}  // namespace gpustream
