// ShareTickets: single use, bound to the session, expiry, revocation, the
// per-session bound, and that a ticket leaving unredeemed closes its
// region's memfd.
#include "server/share/share_tickets.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace gpustream::share {
namespace {

using backend::SharedRegion;

std::shared_ptr<SharedRegion> NewRegion(uint64_t size = 4096) {
  auto region = SharedRegion::Create(size);
  EXPECT_TRUE(region.ok()) << region.status();
  return *std::move(region);
}

// Whether the region still holds its memfd (taking it puts it back as -1
// would not: the check closes it, so call it last).
bool HoldsFd(const SharedRegion& region) {
  const int fd = region.TakeFd();
  if (fd < 0) return false;
  close(fd);
  return true;
}

TEST(ShareTicketsTest, RedeemedOnceForItsSession) {
  ShareTickets tickets;
  auto region = NewRegion(10000);
  auto ticket = tickets.Issue("alice", region);
  ASSERT_TRUE(ticket.ok());
  EXPECT_EQ(ticket->size(), kTicketBytes);
  EXPECT_EQ(tickets.outstanding(), 1u);
  auto redeemed = tickets.Redeem("alice", *ticket);
  ASSERT_TRUE(redeemed.ok()) << redeemed.status();
  EXPECT_EQ(redeemed->size, 10000u);
  struct stat st;
  ASSERT_EQ(fstat(redeemed->fd, &st), 0);
  EXPECT_EQ(st.st_size, 12288);  // Whole pages.
  close(redeemed->fd);
  EXPECT_EQ(tickets.Redeem("alice", *ticket).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(tickets.outstanding(), 0u);
  EXPECT_FALSE(HoldsFd(*region));  // Handed out: the daemon keeps none.
}

TEST(ShareTicketsTest, AnotherSessionUsesItUpAndGetsNothing) {
  ShareTickets tickets;
  auto region = NewRegion();
  auto ticket = tickets.Issue("alice", region);
  ASSERT_TRUE(ticket.ok());
  EXPECT_EQ(tickets.Redeem("bob", *ticket).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(tickets.Redeem("alice", *ticket).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(HoldsFd(*region));
}

TEST(ShareTicketsTest, ExpiresAndClosesTheDescriptor) {
  ShareTickets tickets(absl::Milliseconds(50));
  auto region = NewRegion();
  auto ticket = tickets.Issue("alice", region);
  ASSERT_TRUE(ticket.ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(tickets.Redeem("alice", *ticket).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(HoldsFd(*region));
  // Expired tickets also go when others are issued, presented or not.
  auto other = NewRegion();
  ASSERT_TRUE(tickets.Issue("alice", other).ok());
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(tickets.Issue("alice", NewRegion()).ok());
  EXPECT_EQ(tickets.outstanding(), 1u);
  EXPECT_FALSE(HoldsFd(*other));
}

TEST(ShareTicketsTest, RevokeAndForgetDropTickets) {
  ShareTickets tickets;
  auto freed = NewRegion(), kept = NewRegion(), closed = NewRegion();
  auto t1 = tickets.Issue("alice", freed);
  auto t2 = tickets.Issue("alice", kept);
  auto t3 = tickets.Issue("bob", closed);
  ASSERT_TRUE(t1.ok() && t2.ok() && t3.ok());
  tickets.Revoke(freed.get());
  EXPECT_EQ(tickets.Redeem("alice", *t1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(HoldsFd(*freed));
  tickets.Forget("bob");
  EXPECT_EQ(tickets.Redeem("bob", *t3).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(HoldsFd(*closed));
  // Alice's other ticket is untouched.
  auto redeemed = tickets.Redeem("alice", *t2);
  ASSERT_TRUE(redeemed.ok()) << redeemed.status();
  close(redeemed->fd);
}

TEST(ShareTicketsTest, NothingOnceTheRegionIsGone) {
  ShareTickets tickets;
  auto region = NewRegion();
  auto ticket = tickets.Issue("alice", region);
  ASSERT_TRUE(ticket.ok());
  region.reset();
  EXPECT_EQ(tickets.Redeem("alice", *ticket).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ShareTicketsTest, BoundedPerSession) {
  ShareTickets tickets;
  std::vector<std::shared_ptr<SharedRegion>> regions;
  std::vector<std::string> issued;
  for (size_t i = 0; i < kMaxTicketsPerSession; ++i) {
    regions.push_back(NewRegion());
    auto ticket = tickets.Issue("alice", regions.back());
    ASSERT_TRUE(ticket.ok()) << i;
    issued.push_back(*ticket);
  }
  auto refused = tickets.Issue("alice", NewRegion());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(tickets.Issue("bob", NewRegion()).ok());
  // Redeeming one makes room again.
  auto redeemed = tickets.Redeem("alice", issued[0]);
  ASSERT_TRUE(redeemed.ok());
  close(redeemed->fd);
  EXPECT_TRUE(tickets.Issue("alice", NewRegion()).ok());
}

}  // namespace
}  // namespace gpustream::share
