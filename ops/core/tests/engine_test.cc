// The whole Engine (engine.h) on a FakeWorld: each rank is a thread with an engine of its own,
// built from a FakeGroup as the wheel builds it from CreateMpiWorld. Covers the parts the
// engine wires together: the world's lane, a process set's lane (SetLanes) started and stopped
// by the registry, the registry's membership check on submission, the DeviceRouter refusing a
// GPU tensor in a build without a GPU plane, and shutdown failing what is pending. The peer
// monitor runs for real, over loopback TCP (a peer failure needs a process that dies: the
// Python tests kill one).
#include <future>

#include "../engine.h"
#include "fake_world.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using EngineTest = RankThreadsTest;  // the suite of this file

constexpr auto kWait = std::chrono::seconds(10);

// One rank's engine over `world`.
struct EngineRank {
  EngineRank(std::shared_ptr<FakeWorld> world, int rank) {
    auto make_world = [world, rank, this](const Config&, const AbortFlag* abort,
                                          std::unique_ptr<Group>* out) {
      auto group = std::make_unique<FakeGroup>(world, rank, std::chrono::milliseconds(5000), abort);
      world_group = group.get();
      *out = std::move(group);
      return Status::Ok();
    };
    created = Engine::Create(Config(), make_world, &engine);
  }
  // An allreduce (sum) of `in` into `out` on process set `set`; the future gets its status.
  std::future<Status> Allreduce(const std::string& name, int set, const std::vector<float>& in,
                                std::vector<float>* out, Status* submitted, int device = -1) {
    auto done = std::make_shared<std::promise<Status>>();
    TensorEntry entry;
    entry.request = MakeRequest(name, {static_cast<int64_t>(in.size())});
    entry.request.device = device;
    entry.process_set = set;
    entry.inputs = {in.data()};
    out->assign(in.size(), 0.0f);
    entry.outputs = {out->data()};
    entry.done = [done](const Status& s, const CollectiveResult&) { done->set_value(s); };
    *submitted = engine->Submit(std::move(entry));
    return done->get_future();
  }
  // join(); the future gets its status and the rank that joined last.
  std::future<std::pair<Status, int>> Join(Status* submitted) {
    auto done = std::make_shared<std::promise<std::pair<Status, int>>>();
    TensorEntry entry;
    entry.request = MakeRequest("join", {}, DataType::kInt32, OpType::kJoin);
    entry.request.shapes.clear();
    entry.done = [done](const Status& s, const CollectiveResult& r) {
      done->set_value({s, r.last_joined_rank});
    };
    *submitted = engine->Submit(std::move(entry));
    return done->get_future();
  }
  // The status of a collective that must complete.
  static Status Wait(std::future<Status>& pending) {
    if (pending.wait_for(kWait) != std::future_status::ready)
      return Status::Internal("collective did not complete");
    return pending.get();
  }
  Status created;
  FakeGroup* world_group = nullptr;
  std::unique_ptr<Engine> engine;
};

TEST_F(EngineTest, EngineRunsTheWorldsAndASetsCollectives) {
  const int n = 3;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<std::vector<float>> all(n), evens(n);
  std::vector<std::string> outsider(n), gpu(n), removed(n);
  std::vector<int> ranks(n, -1), sizes(n, -1);
  RunRanks(n, [&](int rank) {
    EngineRank me(world, rank);
    ASSERT_OK(me.created);
    ranks[rank] = me.engine->topology().rank;
    sizes[rank] = me.engine->topology().size;
    Status submitted;
    std::vector<float> in{1.0f * rank, 1.0f};
    auto pending = me.Allreduce("all", 0, in, &all[rank], &submitted);
    ASSERT_OK(submitted);
    EXPECT_OK(EngineRank::Wait(pending));

    int id = -1;
    ASSERT_OK(me.engine->process_sets().Add({0, 2}, &id));
    if (rank == 1) {
      std::vector<float> out;
      me.Allreduce("evens", id, in, &out, &submitted);
      outsider[rank] = submitted.message();
    } else {
      auto set_pending = me.Allreduce("evens", id, in, &evens[rank], &submitted);
      ASSERT_OK(submitted);
      EXPECT_OK(EngineRank::Wait(set_pending));
    }
    std::vector<float> out;
    me.Allreduce("on.gpu", 0, in, &out, &submitted, /*device=*/0);
    gpu[rank] = submitted.message();

    std::vector<int> gone;
    ASSERT_OK(me.engine->process_sets().Remove(id, &gone));
    EXPECT_EQ(gone.size(), 1u);
    me.Allreduce("evens.late", id, in, &out, &submitted);
    removed[rank] = submitted.message();
    me.engine->Shutdown();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ranks[r], r);
    EXPECT_EQ(sizes[r], n);
    EXPECT_EQ(all[r][0], 3.0f);  // 0 + 1 + 2
    EXPECT_EQ(all[r][1], 3.0f);
    EXPECT_CONTAINS(gpu[r], "no GPU backend");
    EXPECT_CONTAINS(removed[r], "not registered");
  }
  EXPECT_EQ(evens[0][0], 2.0f);  // 0 + 2, on the set's own lane
  EXPECT_EQ(evens[2][1], 2.0f);
  EXPECT_CONTAINS(outsider[1], "rank 1 is not in process set 1");
}

TEST_F(EngineTest, EngineJoinCoversTheRanksProcessSets) {
  // 3 ranks, set {0, 1}. Rank 1 joins while rank 0 allreduces on the set: rank 1 contributes
  // zeros there too. Then all join; afterwards the set's allreduce needs both members again.
  const int n = 3;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<std::vector<float>> during(n), after(n);
  std::vector<int> last(n, -1);
  std::vector<std::string> errors(n);
  RunRanks(n, [&](int rank) {
    EngineRank me(world, rank);
    ASSERT_OK(me.created);
    int id = -1;
    ASSERT_OK(me.engine->process_sets().Add({0, 1}, &id));
    std::vector<float> in{1.0f + rank, 10.0f};
    Status submitted;
    if (rank == 0) {
      auto pending = me.Allreduce("set.during", id, in, &during[rank], &submitted);
      ASSERT_OK(submitted);
      EXPECT_OK(EngineRank::Wait(pending));
    }
    auto joined = me.Join(&submitted);
    ASSERT_OK(submitted);
    if (joined.wait_for(kWait) != std::future_status::ready) {
      errors[rank] = "join did not complete";
      return;
    }
    auto [status, last_rank] = joined.get();
    EXPECT_OK(status);
    last[rank] = last_rank;
    if (rank < 2) {
      auto pending = me.Allreduce("set.after", id, in, &after[rank], &submitted);
      ASSERT_OK(submitted);
      EXPECT_OK(EngineRank::Wait(pending));
    }
    me.engine->Shutdown();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "");
  ASSERT_EQ(during[0].size(), 2u);
  EXPECT_EQ(during[0][0], 1.0f);  // rank 0's own values: rank 1 joined, contributing zeros
  EXPECT_EQ(during[0][1], 10.0f);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(after[r].size(), 2u);
    EXPECT_EQ(after[r][0], 3.0f);  // 1 + 2: both members again
    EXPECT_EQ(after[r][1], 20.0f);
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(last[r], last[0]);
}

TEST_F(EngineTest, EngineShutdownFailsPendingWorkNamingTheRank) {
  auto world = std::make_shared<FakeWorld>(2);
  std::string message;
  RunRanks(2, [&](int rank) {
    EngineRank me(world, rank);
    ASSERT_OK(me.created);
    if (rank == 1) {
      me.engine->Shutdown();
      return;
    }
    Status submitted;
    std::vector<float> in{1.0f}, out;
    auto pending = me.Allreduce("never", 0, in, &out, &submitted);
    ASSERT_OK(submitted);
    Status status = EngineRank::Wait(pending);
    EXPECT_TRUE(status.code() == Status::Code::kAborted);
    message = status.message();
  });
  EXPECT_CONTAINS(message, "kerashvd was shut down by rank(s) 1");
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
