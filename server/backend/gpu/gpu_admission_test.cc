// GpuAdmission alone, with simulated queues: shares, borrowing, floors,
// round-robin turns and busy time. Deterministic: nothing runs on threads.
#include "server/backend/gpu/gpu_admission.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/backend/work_account.h"

namespace gpustream::backend {
namespace {

using Admission = GpuAdmission;
constexpr uint64_t kBudget = Admission::kDefaultBudget;

// A queue as admission sees it: work held, work in flight. Enqueue admits
// like GpuQueueCore::Submit/PumpLocked outside a turn; PumpAdmitted takes
// one grant per turn, as the queue does.
class SimQueue : public Admission::Client,
                 public std::enable_shared_from_this<SimQueue> {
 public:
  SimQueue(Admission* admission, int id, std::vector<int>* turns)
      : admission_(admission), id_(id), turns_(turns) {}

  void Join(std::shared_ptr<WorkAccount> account, uint64_t session) {
    member_ = admission_->Join(std::move(account), session, weak_from_this());
  }

  void Enqueue(uint64_t n) {
    held_ += n;
    Issue(admission_->Admit(*member_, held_, inflight_, /*pumped=*/false));
  }
  // `n` of the oldest operations in flight completed.
  void Complete(uint64_t n, int64_t start_ns = 0, int64_t end_ns = 0) {
    n = std::min(n, inflight_);
    inflight_ -= n;
    admission_->Completed(*member_, n, start_ns, end_ns);
  }
  void PumpAdmitted() override {
    if (turns_ != nullptr) turns_->push_back(id_);
    Issue(admission_->Admit(*member_, std::min(held_, Admission::kGrant),
                            inflight_, /*pumped=*/true));
  }
  void Leave() { member_.reset(); }

  uint64_t inflight() const { return inflight_; }
  uint64_t held() const { return held_; }

 private:
  void Issue(uint64_t granted) {
    inflight_ += granted;
    held_ -= granted;
    if (held_ != 0) admission_->Wait(*member_);
  }

  Admission* const admission_;
  const int id_;
  std::vector<int>* const turns_;
  std::unique_ptr<Admission::Member> member_;
  uint64_t inflight_ = 0;
  uint64_t held_ = 0;
};

class GpuAdmissionTest : public ::testing::Test {
 protected:
  std::shared_ptr<SimQueue> NewQueue(std::shared_ptr<WorkAccount> account,
                                     uint64_t session = 0) {
    auto q = std::make_shared<SimQueue>(&admission_, next_id_++, &turns_);
    q->Join(std::move(account), session);
    queues_.push_back(q);
    return q;
  }
  Admission::AccountView View(const std::shared_ptr<WorkAccount>& a) {
    return admission_.View(a.get());
  }

  Admission admission_{kBudget};
  std::vector<int> turns_;
  std::vector<std::shared_ptr<SimQueue>> queues_;
  int next_id_ = 0;
};

TEST_F(GpuAdmissionTest, LoneAccountGetsTheWholeBudget) {
  auto a = std::make_shared<WorkAccount>("a");
  auto q1 = NewQueue(a), q2 = NewQueue(a);
  q1->Enqueue(3000);
  EXPECT_EQ(q1->inflight(), kBudget);
  EXPECT_EQ(View(a).limit, kBudget);
  // The next queue still gets its floor, and waits for the rest.
  q2->Enqueue(100);
  EXPECT_EQ(q2->inflight(), Admission::kQueueFloor);
  EXPECT_TRUE(View(a).waiting);
  // As work completes, the waiting queues get turns (one grant each)
  // until the budget is used again.
  q1->Complete(2 * Admission::kGrant);
  admission_.Pump();
  EXPECT_EQ(View(a).inflight, kBudget);
  EXPECT_EQ(q1->inflight(), kBudget - Admission::kGrant);
  EXPECT_GT(q2->inflight(), Admission::kQueueFloor);
}

TEST_F(GpuAdmissionTest, WeightedSharesHoldWhileBothAreBacklogged) {
  auto a = std::make_shared<WorkAccount>("a", 2);
  auto b = std::make_shared<WorkAccount>("b", 1);
  const uint64_t limit_a = kBudget * 2 / 3, limit_b = kBudget / 3;
  auto qb = NewQueue(b);
  qb->Enqueue(100000);  // Alone: the whole budget.
  EXPECT_EQ(qb->inflight(), kBudget);
  std::vector<std::shared_ptr<SimQueue>> qa;
  for (int i = 0; i < 4; ++i) {
    qa.push_back(NewQueue(a, /*session=*/i));
    qa.back()->Enqueue(100000);
  }
  // A newcomer within its share is admitted at once, whatever B borrowed.
  EXPECT_EQ(View(a).limit, limit_a);
  EXPECT_EQ(View(b).limit, limit_b);
  EXPECT_GE(View(a).inflight, limit_a);
  EXPECT_LE(View(a).inflight, limit_a + 3 * Admission::kQueueFloor);
  // Both backlogged: each completes batches as its streams would; the
  // pump refills. After B drains its borrowing, both stay within their
  // shares and are refilled to them.
  std::vector<std::shared_ptr<SimQueue>> all = qa;
  all.push_back(qb);
  uint64_t sum_a = 0, sum_b = 0, samples = 0;
  for (int step = 0; step < 400; ++step) {
    for (auto& q : all) q->Complete(std::min<uint64_t>(q->inflight(), 16));
    admission_.Pump();
    if (step < 100) continue;  // B's borrowed work drains first.
    const auto va = View(a), vb = View(b);
    ASSERT_TRUE(va.waiting && vb.waiting);
    EXPECT_LE(va.inflight, limit_a + 4 * Admission::kQueueFloor) << step;
    EXPECT_LE(vb.inflight, limit_b + Admission::kQueueFloor) << step;
    EXPECT_GE(va.inflight, limit_a - Admission::kGrant) << step;
    EXPECT_GE(vb.inflight, limit_b - Admission::kGrant) << step;
    sum_a += va.inflight;
    sum_b += vb.inflight;
    ++samples;
  }
  ASSERT_GT(samples, 0u);
  const double ratio = static_cast<double>(sum_a) / sum_b;
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.2);
}

TEST_F(GpuAdmissionTest, BorrowsFreeBudgetOnlyWhileNobodyElseWaits) {
  auto a = std::make_shared<WorkAccount>("a", 2);
  auto b = std::make_shared<WorkAccount>("b", 1);
  const uint64_t limit_a = kBudget * 2 / 3;
  auto qb = NewQueue(b);
  qb->Enqueue(10);  // B is active but not backlogged.
  auto qa = NewQueue(a);
  qa->Enqueue(100000);
  EXPECT_EQ(qa->inflight(), limit_a);
  // Work-conserving: the pump lends A the budget B leaves unused.
  admission_.Pump();
  EXPECT_EQ(admission_.total_inflight(), kBudget);
  EXPECT_EQ(qa->inflight(), kBudget - 10);
  // B gets more work: its share at once, although the total goes over.
  qb->Enqueue(100000);
  EXPECT_EQ(View(b).inflight, kBudget / 3);
  EXPECT_TRUE(View(b).waiting);
  // Now A gets nothing until it is back under its own limit.
  for (int i = 0; i < 4; ++i) {
    qa->Complete(Admission::kGrant);
    admission_.Pump();
  }
  EXPECT_EQ(qa->inflight(), kBudget - 10 - 4 * Admission::kGrant);
  while (qa->inflight() > limit_a) qa->Complete(Admission::kGrant);
  admission_.Pump();
  EXPECT_EQ(View(a).inflight, limit_a);
}

TEST_F(GpuAdmissionTest, AccountFloorForASmallWeight) {
  auto big = std::make_shared<WorkAccount>("big", 1000);
  auto small = std::make_shared<WorkAccount>("small", 1);
  NewQueue(big)->Enqueue(100000);
  auto q = NewQueue(small);
  q->Enqueue(100000);
  EXPECT_EQ(View(small).limit, Admission::kAccountFloor);
  EXPECT_EQ(q->inflight(), Admission::kAccountFloor);
}

TEST_F(GpuAdmissionTest, WeightIsReadAtSchedulingTime) {
  auto a = std::make_shared<WorkAccount>("a", 1);
  auto b = std::make_shared<WorkAccount>("b", 1);
  NewQueue(a)->Enqueue(100000);
  NewQueue(b)->Enqueue(100000);
  EXPECT_EQ(View(a).limit, kBudget / 2);
  a->weight.store(3);  // A reload.
  EXPECT_EQ(View(a).limit, kBudget * 3 / 4);
  // Others see it once A's work is admitted or completes.
  queues_[0]->Complete(1);
  EXPECT_EQ(View(b).limit, kBudget / 4);
}

// Queues of a tenant wait for each other: however its in-flight work is
// parked, every queue of it may keep kQueueFloor operations in flight.
TEST_F(GpuAdmissionTest, EveryQueueKeepsItsFloor) {
  auto a = std::make_shared<WorkAccount>("a");
  auto parked = NewQueue(a);
  parked->Enqueue(kBudget * 2);  // Never completes in this test.
  auto other = NewQueue(a);
  other->Enqueue(1000);
  EXPECT_EQ(other->inflight(), Admission::kQueueFloor);
  for (int i = 0; i < 10; ++i) {
    other->Complete(Admission::kQueueFloor);
    admission_.Pump();  // No turn: the account is over its limit...
    other->Enqueue(0);  // ...but the queue's own pump gets the floor.
  }
  EXPECT_EQ(other->held(), 1000 - 11 * Admission::kQueueFloor);
}

TEST_F(GpuAdmissionTest, TurnsGoRoundRobinBySessionThenQueue) {
  auto a = std::make_shared<WorkAccount>("a");
  Admission small(Admission::kAccountFloor);  // Limit 128: turns are rare.
  std::vector<std::shared_ptr<SimQueue>> q;
  std::vector<int> turns;
  // Session 1: queues 0, 1, 2; session 2: queue 3.
  for (int i = 0; i < 4; ++i) {
    q.push_back(std::make_shared<SimQueue>(&small, i, &turns));
    q.back()->Join(a, i < 3 ? 1 : 2);
    q.back()->Enqueue(100000);
  }
  for (int step = 0; step < 60; ++step) {
    auto busiest =
        *std::max_element(q.begin(), q.end(), [](const auto& x, const auto& y) {
          return x->inflight() < y->inflight();
        });
    busiest->Complete(Admission::kGrant / 2);
    small.Pump();
  }
  ASSERT_GE(turns.size(), 12u);
  // Sessions alternate; session 1's queues take their turns in order.
  int next_in_session1 = -1;
  for (size_t i = 0; i < turns.size(); ++i) {
    const bool session2 = turns[i] == 3;
    if (i > 0) {
      EXPECT_NE(session2, turns[i - 1] == 3) << "turn " << i;
    }
    if (!session2) {
      if (next_in_session1 >= 0) {
        EXPECT_EQ(turns[i], next_in_session1) << i;
      }
      next_in_session1 = (turns[i] + 1) % 3;
    }
  }
  for (auto& x : q) x->Leave();
}

TEST_F(GpuAdmissionTest, LeavingReleasesWhatTheQueueHadInFlight) {
  auto a = std::make_shared<WorkAccount>("a");
  auto b = std::make_shared<WorkAccount>("b");
  auto qa = NewQueue(a), qb = NewQueue(b);
  qa->Enqueue(100000);
  qb->Enqueue(100000);
  EXPECT_EQ(View(b).limit, kBudget / 2);
  qa->Leave();  // Its account is no longer active: B may use everything.
  EXPECT_EQ(View(a).inflight, 0u);
  EXPECT_EQ(View(b).limit, kBudget);
  admission_.Pump();
  EXPECT_EQ(qb->inflight(), kBudget);
  qb->Complete(qb->inflight());
  qb->Leave();
  EXPECT_EQ(admission_.total_inflight(), 0u);
  EXPECT_FALSE(admission_.HasWaiting());
}

TEST_F(GpuAdmissionTest, BusyTimeIsTheUnionOfTheAccountsBatches) {
  auto a = std::make_shared<WorkAccount>("a");
  auto q1 = NewQueue(a), q2 = NewQueue(a);
  q1->Enqueue(4);
  q2->Enqueue(4);
  q1->Complete(2, 0, 10);
  q2->Complete(2, 5, 20);   // Overlaps: +10.
  q1->Complete(2, 30, 40);  // Disjoint: +10.
  q2->Complete(2, 35, 38);  // Inside: +0.
  EXPECT_EQ(a->busy_ns.load(), 30u);
}

}  // namespace
}  // namespace gpustream::backend
