// A whole Lane (lane.h) on a FakeWorld: its thread negotiates, fuses and runs collectives
// through a LaneTransport of fakes, as it does through MpiGroup::MakeLaneTransport's in the wheel.
// Covers a collective's result on every rank, a negotiated shutdown failing what is pending
// with the name of the rank that asked, the abort flag stopping the lane, and the linger
// after a working cycle taking the next submission (and a shutdown) at once.
#include <future>

#include "../lane.h"
#include "lane_rank.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using LaneTest = RankThreadsTest;  // the suite of this file

TEST_F(LaneTest, LaneRunsAllreducesOnEveryRank) {
  const int n = 3;
  FakeWorld world(n);
  std::vector<std::vector<float>> a(n), b(n);
  RunRanks(n, [&](int rank) {
    LaneRank me(&world, rank);
    const std::vector<float> x{1.0f * rank, 1.0f, -2.0f}, y{10.0f};
    Status s1, s2;
    auto fa = me.Allreduce("a", x, &a[rank], &s1);
    auto fb = me.Allreduce("b", y, &b[rank], &s2);
    ASSERT_OK(s1);
    ASSERT_OK(s2);
    ASSERT_TRUE(fa.wait_for(kWait) == std::future_status::ready);
    ASSERT_TRUE(fb.wait_for(kWait) == std::future_status::ready);
    EXPECT_OK(fa.get());
    EXPECT_OK(fb.get());
    // Destroying the lane shuts it down, negotiated with the other ranks.
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(a[r][0], 3.0f);  // 0 + 1 + 2
    EXPECT_EQ(a[r][1], 3.0f);
    EXPECT_EQ(a[r][2], -6.0f);
    EXPECT_EQ(b[r][0], 30.0f);
  }
}

TEST_F(LaneTest, LaneShutdownFailsPendingWorkNamingTheRank) {
  FakeWorld world(2);
  std::string message;
  Status after;
  RunRanks(2, [&](int rank) {
    LaneRank me(&world, rank);
    if (rank == 1) {
      me.lane->RequestShutdown();
      me.lane->Join();
      return;
    }
    std::vector<float> out;
    Status submitted;
    auto pending = me.Allreduce("never", {1.0f}, &out, &submitted);
    ASSERT_OK(submitted);
    ASSERT_TRUE(pending.wait_for(kWait) == std::future_status::ready);
    Status status = pending.get();
    EXPECT_TRUE(status.code() == Status::Code::kAborted);
    message = status.message();
    me.lane->Join();
    // A stopped lane refuses new work with the same reason.
    std::vector<float> late;
    me.Allreduce("late", {1.0f}, &late, &after);
  });
  EXPECT_CONTAINS(message, "kerashvd was shut down by rank(s) 1");
  EXPECT_CONTAINS(message, "pending on rank 0");
  EXPECT_EQ(after.message(), message);
}

TEST_F(LaneTest, LaneLingerTakesTheNextSubmissionAndShutdown) {
  // A linger far longer than the test may take: a lane that did not end it on a submission
  // (the next allreduce of a chain, submitted from the previous one's callback as TensorFlow
  // does) or on the shutdown would not finish within kWait.
  Config config;
  config.linger_ms = 30000;
  config.cycle_time_ms = 30000;
  const int n = 2, links = 20;
  FakeWorld world(n);
  std::vector<std::vector<float>> out(n);
  std::vector<int> completed(n, 0);
  RunRanks(n, [&](int rank) {
    LaneRank me(&world, rank, config);
    auto last = std::make_shared<std::promise<Status>>();
    std::vector<float> in{1.0f};
    out[rank] = in;
    std::function<void(int)> link = [&](int i) {
      TensorEntry entry;
      entry.request = MakeRequest("chain." + std::to_string(i), {1});
      entry.inputs = {out[rank].data()};
      entry.outputs = {out[rank].data()};
      entry.done = [&, i](const Status& s, const CollectiveResult&) {
        ++completed[rank];
        if (!s.ok() || i + 1 == links) return last->set_value(s);
        link(i + 1);
      };
      Status submitted = me.lane->Submit(std::move(entry));
      if (!submitted.ok()) last->set_value(submitted);
    };
    link(0);
    auto chain = last->get_future();
    ASSERT_TRUE(chain.wait_for(kWait) == std::future_status::ready);
    EXPECT_OK(chain.get());
    auto stopped = std::async(std::launch::async, [&] {
      me.lane->RequestShutdown();
      me.lane->Join();
    });
    EXPECT_TRUE(stopped.wait_for(kWait) == std::future_status::ready);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(completed[r], links);
    EXPECT_EQ(out[r][0], 1048576.0f);  // doubled by each of the 20 allreduces
  }
}

TEST_F(LaneTest, LaneAbortStopsItAndFailsWhatWaits) {
  // Rank 1 never comes; the peer monitor (here: the test) sets the abort flag.
  FakeWorld world(2);
  LaneRank me(&world, 0);
  std::vector<float> out;
  Status submitted;
  auto pending = me.Allreduce("a", {1.0f}, &out, &submitted);
  ASSERT_OK(submitted);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  me.abort.Set(Status::Aborted("rank 1 exited"));
  me.lane->Wake();
  ASSERT_TRUE(pending.wait_for(kWait) == std::future_status::ready);
  Status status = pending.get();
  EXPECT_TRUE(status.code() == Status::Code::kAborted);
  EXPECT_CONTAINS(status.message(), "rank 1 exited");
  me.lane->Join();
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
