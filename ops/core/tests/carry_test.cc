// Carried allreduces (carry.h): the message's reduction, the prediction every rank makes alike,
// whole cycles of controllers on a FakeWorld in which a predicted allreduce is carried when
// every rank has it pending and runs as usual when one does not, and lanes whose results do not
// depend on which.
#include <cstring>

#include "../carry.h"
#include "../controller.h"
#include "fake_world.h"
#include "lane_rank.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using CarryTest = RankThreadsTest;  // the suite of this file

// One allreduce of `in` on `me`'s lane, waited for; its result in `out`.
void AllreduceAndWait(LaneRank& me, const std::string& name, const std::vector<float>& in,
                      std::vector<float>* out) {
  Status submitted;
  auto done = me.Allreduce(name, in, out, &submitted);
  ASSERT_OK(submitted);
  ASSERT_TRUE(done.wait_for(kWait) == std::future_status::ready);
  ASSERT_OK(done.get());
}

CarryLayout FloatLayout(int and_words, int64_t count, ReduceOp op = ReduceOp::kSum) {
  CarryLayout layout;
  layout.and_words = and_words;
  layout.count = count;
  layout.dtype = DataType::kFloat32;
  layout.op = op;
  return layout;
}

std::vector<uint64_t> Message(const CarryLayout& layout, std::vector<uint64_t> words,
                              const std::vector<float>& payload) {
  std::vector<uint64_t> message = layout.NewMessage();
  std::copy(words.begin(), words.end(), message.begin() + layout.words_offset());
  std::memcpy(message.data() + layout.payload_offset(), payload.data(), payload.size() * 4);
  return message;
}

std::vector<float> Payload(const CarryLayout& layout, const std::vector<uint64_t>& message) {
  std::vector<float> out(layout.count);
  std::memcpy(out.data(), message.data() + layout.payload_offset(), out.size() * 4);
  return out;
}

TEST_F(CarryTest, CombineAndsTheWordsAndReducesThePayload) {
  const CarryLayout layout = FloatLayout(2, 3);  // 12 bytes: padded to 2 words
  EXPECT_EQ(layout.total_words(), 2 + 2 + 2);
  std::vector<uint64_t> a = Message(layout, {0b1110, ~uint64_t{0}}, {1.5f, -2.0f, 0.1f});
  std::vector<uint64_t> b = Message(layout, {0b0111, 0}, {2.0f, 4.0f, 0.2f});
  std::vector<uint64_t> ab = b, ba = a;
  CombineCarry(a.data(), ab.data());
  CombineCarry(b.data(), ba.data());
  EXPECT_TRUE(ab == ba);  // commutative on bits
  EXPECT_TRUE(layout.HeaderIntact(ab.data()));
  EXPECT_EQ(ab[2], uint64_t{0b0110});
  EXPECT_EQ(ab[3], uint64_t{0});
  EXPECT_TRUE(Payload(layout, ab) == (std::vector<float>{3.5f, 2.0f, 0.1f + 0.2f}));

  const CarryLayout max = FloatLayout(0, 2, ReduceOp::kMax);
  std::vector<uint64_t> m1 = Message(max, {}, {1.0f, -3.0f}), m2 = Message(max, {}, {0.5f, 7.0f});
  CombineCarry(m1.data(), m2.data());
  EXPECT_TRUE(Payload(max, m2) == (std::vector<float>{1.0f, 7.0f}));
}

TEST_F(CarryTest, LayoutsThatDifferPoisonTheHeader) {
  const CarryLayout sum = FloatLayout(1, 2), max = FloatLayout(1, 2, ReduceOp::kMax);
  std::vector<uint64_t> a = Message(sum, {1}, {1.0f, 2.0f}), b = Message(max, {1}, {1.0f, 2.0f});
  CombineCarry(a.data(), b.data());
  EXPECT_TRUE(!max.HeaderIntact(b.data()));
  EXPECT_TRUE(!sum.HeaderIntact(b.data()));
}

TEST_F(CarryTest, OnlySmallLoneHostAllreducesAreCarriable) {
  EXPECT_TRUE(Carriable(MakeRequest("a", {1000}), 4096));
  EXPECT_TRUE(!Carriable(MakeRequest("a", {1025}), 4096));  // 4100 bytes
  EXPECT_TRUE(!Carriable(MakeRequest("a", {0}), 4096));
  EXPECT_TRUE(!Carriable(MakeRequest("a", {1 << 20}), 1 << 30));  // kCarryMaxBytes
  Request gpu = MakeRequest("a", {4});
  gpu.device = 0;
  EXPECT_TRUE(!Carriable(gpu, 4096));
  Request grouped = MakeRequest("a", {4});
  grouped.shapes.push_back({4});
  EXPECT_TRUE(!Carriable(grouped, 4096));
  EXPECT_TRUE(!Carriable(MakeRequest("a", {4}, DataType::kFloat32, OpType::kAllgather), 4096));
  Request half_max = MakeRequest("a", {4}, DataType::kFloat16);
  half_max.reduce_op = ReduceOp::kMax;  // travels as float32 (WireType)
  EXPECT_TRUE(!Carriable(half_max, 4096));
  EXPECT_TRUE(Carriable(MakeRequest("a", {4}, DataType::kFloat16), 4096));
  EXPECT_TRUE(OrderMatters(MakeRequest("a", {4}), 3));
  EXPECT_TRUE(!OrderMatters(MakeRequest("a", {4}), 2));
  EXPECT_TRUE(!OrderMatters(MakeRequest("a", {4}, DataType::kInt32), 4));
}

TEST_F(CarryTest, PredictorLearnsWhatFollowsWhat) {
  CarryPredictor p;
  EXPECT_EQ(p.Predict(), -1);
  for (int32_t slot : {0, 1, 2}) p.Observe(slot);  // a chain 0 -> 1 -> 2
  EXPECT_EQ(p.Predict(), -1);                      // nothing followed 2 yet
  p.Observe(0);
  EXPECT_EQ(p.Predict(), 1);
  p.Observe(-1);  // a cycle of several collectives
  EXPECT_EQ(p.Predict(), -1);
  p.Observe(1);
  EXPECT_EQ(p.Predict(), 2);
  p.Reset();
  EXPECT_EQ(p.Predict(), -1);
}

// Ranks as controllers with carrying on: "a" (4 floats) is negotiated, then cached, then
// predicted and carried; in the cycle where rank 2 has not submitted it, nothing runs, and
// when rank 2 catches up, it is carried with every rank's data.
TEST_F(CarryTest, APredictedAllreduceIsCarriedWhenEveryRankHasIt) {
  const int n = 3;
  FakeWorld world(n);
  std::vector<std::vector<int>> carried(n);
  std::vector<std::vector<float>> results(n);
  RunRanks(n, [&](int rank) {
    FakeControlPlane control(&world, rank);
    std::vector<int> ranks{0, 1, 2};
    Controller controller(&control, Config(), ranks);
    controller.set_carry_bytes(1024);
    const std::vector<float> input{1.0f * rank, 2.0f, -1.0f, 0.5f};
    auto Cycle = [&](bool submit, CycleResult* out) {
      std::deque<TensorEntry> incoming;
      if (submit) {
        TensorEntry entry = MakeEntry(MakeRequest("a", {4}));
        entry.inputs = {input.data()};
        incoming.push_back(std::move(entry));
      }
      return controller.RunCycle(std::move(incoming), false, out);
    };
    for (int step = 0; step < 5; ++step) {
      // Step 3: rank 2 is one cycle late.
      const bool late = step == 3 && rank == 2;
      CycleResult out;
      ASSERT_OK(Cycle(!late, &out));
      if (step == 3) {
        ASSERT_EQ(out.work.size(), 0u);
        CycleResult caught_up;
        ASSERT_OK(Cycle(late, &caught_up));
        out = std::move(caught_up);
      }
      ASSERT_EQ(out.work.size(), 1u);
      carried[rank].push_back(!out.work[0].carried.empty());
      if (!out.work[0].carried.empty()) {
        std::vector<float> sum(4);
        std::memcpy(sum.data(), out.work[0].carried.data(), 16);
        results[rank] = sum;
      }
    }
  });
  for (int r = 0; r < n; ++r) {
    // Negotiated, cached (nothing to predict from yet), then carried every time.
    EXPECT_TRUE(carried[r] == (std::vector<int>{0, 0, 1, 1, 1}));
    EXPECT_TRUE(results[r] == (std::vector<float>{3.0f, 6.0f, -3.0f, 1.5f}));
  }
}

// Whole lanes: a chain of small allreduces, as a graph runs them, carried or not, gives every
// rank the sums.
TEST_F(CarryTest, LanesCarryAChainOfAllreduces) {
  const int n = 3;
  FakeWorld world(n);
  std::vector<std::vector<float>> last(n);
  RunRanks(n, [&](int rank) {
    LaneRank me(&world, rank);
    std::vector<float> value{1.0f + rank, -1.0f};
    for (int round = 0; round < 4; ++round)
      for (int link = 0; link < 3; ++link) {
        std::vector<float> out;
        AllreduceAndWait(me, "chain" + std::to_string(link), value, &out);
        for (float& v : out) v /= n;
        value = out;
      }
    last[rank] = value;
  });
  // The mean of 1, 2, 3 is 2, and a mean of equal values stays.
  for (int r = 0; r < n; ++r) EXPECT_TRUE(last[r] == (std::vector<float>{2.0f, -1.0f}));
}

// A result does not depend on whether the guess held (carry.h, "Bits"). The values make the
// order of the sum visible: 1 + 1e8 - 1e8 is 0 in float32 from rank 0 up (FakeBackend's
// order) and 1 from the last rank down (the fake control plane's, which carried messages
// take). Calls broken up by another allreduce are not carried, and must take the carried
// order all the same (Controller::ReduceAlone), not the backend's.
TEST_F(CarryTest, AllreducesNotCarriedAreReducedAsCarriedOnes) {
  const int n = 3;
  FakeWorld world(n);
  std::vector<std::vector<float>> results(n);
  RunRanks(n, [&](int rank) {
    LaneRank me(&world, rank);
    const std::vector<float> input{rank == 0 ? 1.0f : rank == 1 ? 1e8f : -1e8f};
    const std::vector<float> other{1.0f};
    for (int call = 0; call < 12; ++call) {
      std::vector<float> out;
      if (call % 3 == 2)  // breaks the prediction: the next call is not carried
        AllreduceAndWait(me, "breaker", other, &out);
      AllreduceAndWait(me, "x", input, &out);
      results[rank].push_back(out[0]);
    }
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r] == std::vector<float>(12, 1.0f));
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
