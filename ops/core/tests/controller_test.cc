// The negotiation cycle (controller.h, coordinator.h) with ranks as threads of a FakeWorld:
// agreement, the response cache's steady state, mismatches becoming errors on every rank,
// failed requests, shutdown and a dead or aborted peer.
#include <atomic>
#include <thread>

#include "../controller.h"
#include "fake_world.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using ControllerTest = RankThreadsTest;  // the suite of this file

std::vector<int> Ranks(int n) {
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  return ranks;
}

// One rank's controller over a FakeWorld, counting full negotiations.
struct RankUnderTest {
  RankUnderTest(FakeWorld* world, int rank, const Config& config,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                const AbortFlag* abort = nullptr)
      : control(world, rank, timeout, abort),
        controller(&control, config, Ranks(world->size())) {}
  // Runs one cycle with these new entries.
  Status Cycle(std::vector<Request> requests, CycleResult* out, bool shutdown = false) {
    std::deque<TensorEntry> incoming;
    for (Request& r : requests) incoming.push_back(MakeEntry(std::move(r), &completions));
    return controller.RunCycle(std::move(incoming), shutdown, out);
  }
  FakeControlPlane control;
  Controller controller;
  Completions completions;
};

std::string Names(const CycleResult& result) {
  std::string out;
  for (const WorkItem& item : result.work) out += item.response.request.name + ";";
  return out;
}

TEST_F(ControllerTest, ControllerAgreesAndThenServesFromCache) {
  const int n = 3;
  FakeWorld world(n);
  std::vector<std::string> first(n), second(n);
  // char, not bool: the bits of a vector<bool> share words, written by several rank threads
  std::vector<char> owned(n), cached(n);
  RunRanks(n, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    CycleResult out;
    ASSERT_OK(me.Cycle({MakeRequest("a", {4}), MakeRequest("b", {2})}, &out));
    first[rank] = Names(out);
    owned[rank] = out.work.size() == 2 && out.work[0].entry && out.work[1].entry &&
                  out.work[0].response.kind == Response::Kind::kExecute;
    // The same tensors again: the cache serves them, by bits alone.
    CycleResult again;
    ASSERT_OK(me.Cycle({MakeRequest("b", {2}), MakeRequest("a", {4})}, &again));
    second[rank] = Names(again);
    cached[rank] = me.controller.cache().Find("a") >= 0 && me.controller.cache().Find("b") >= 0;
    EXPECT_TRUE(!me.controller.has_pending());
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(first[r], first[0]);
    EXPECT_EQ(second[r], second[0]);
    EXPECT_TRUE(owned[r]);
    EXPECT_TRUE(cached[r]);
  }
  EXPECT_EQ(first[0].size(), 4u);   // "a;b;" in some order
  EXPECT_EQ(second[0], "a;b;");     // cached work comes in slot order
}

TEST_F(ControllerTest, ControllerWaitsForTheLastRank) {
  FakeWorld world(2);
  std::vector<std::string> cycle1(2), cycle2(2);
  RunRanks(2, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    CycleResult out;
    // Rank 1 submits one cycle late: nothing runs until it does.
    ASSERT_OK(me.Cycle(rank == 0 ? std::vector<Request>{MakeRequest("a", {4})}
                                 : std::vector<Request>{}, &out));
    cycle1[rank] = Names(out);
    if (rank == 0) {
      EXPECT_TRUE(me.controller.has_pending());
    }
    CycleResult later;
    ASSERT_OK(me.Cycle(rank == 1 ? std::vector<Request>{MakeRequest("a", {4})}
                                 : std::vector<Request>{}, &later));
    cycle2[rank] = Names(later);
  });
  EXPECT_EQ(cycle1[0], "");
  EXPECT_EQ(cycle1[1], "");
  EXPECT_EQ(cycle2[0], "a;");
  EXPECT_EQ(cycle2[1], "a;");
}

// Every rank gets the same error for tensor "t", naming the field and each rank's value.
void ExpectMismatch(const Request& on_rank0, const Request& on_rank1, const std::string& field,
                    const std::string& value0, const std::string& value1) {
  FakeWorld world(2);
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    CycleResult out;
    ASSERT_OK(me.Cycle({rank == 0 ? on_rank0 : on_rank1}, &out));
    ASSERT_EQ(out.work.size(), 1u);
    EXPECT_TRUE(out.work[0].response.kind == Response::Kind::kError);
    EXPECT_TRUE(out.work[0].entry.has_value());  // so the engine can fail this rank's op
    errors[rank] = out.work[0].response.error;
  });
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_CONTAINS(errors[0], "'t'");
  EXPECT_CONTAINS(errors[0], "disagree on " + field);
  EXPECT_CONTAINS(errors[0], "rank 0 " + value0);
  EXPECT_CONTAINS(errors[0], "rank 1 " + value1);
}

TEST_F(ControllerTest, ControllerShapeMismatchIsAnErrorOnEveryRank) {
  ExpectMismatch(MakeRequest("t", {2, 3}), MakeRequest("t", {3, 2}), "shape", "[2, 3]", "[3, 2]");
}

TEST_F(ControllerTest, ControllerDtypeMismatchIsAnErrorOnEveryRank) {
  ExpectMismatch(MakeRequest("t", {2}), MakeRequest("t", {2}, DataType::kInt32), "dtype",
                 "float32", "int32");
}

TEST_F(ControllerTest, ControllerOpMismatchIsAnErrorOnEveryRank) {
  ExpectMismatch(MakeRequest("t", {2}),
                 MakeRequest("t", {2}, DataType::kFloat32, OpType::kAllgather), "collective",
                 "allreduce", "allgather");
}

TEST_F(ControllerTest, ControllerMismatchAfterCachingIsStillCaught) {
  // A signature that changes on one rank after it was cached: that rank sends it in full,
  // the slot is evicted everywhere, and the ranks are compared again.
  FakeWorld world(2);
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int rank) {
    Config config;
    config.stall_check_seconds = 0.05;  // partial cached slots are evicted after this long
    RankUnderTest me(&world, rank, config);
    CycleResult out;
    ASSERT_OK(me.Cycle({MakeRequest("t", {4})}, &out));
    ASSERT_EQ(out.work.size(), 1u);
    const Request changed = MakeRequest("t", rank == 1 ? Shape{5} : Shape{4});
    std::vector<Request> submit{changed};
    for (int cycle = 0; cycle < 200 && errors[rank].empty(); ++cycle) {
      CycleResult next;
      ASSERT_OK(me.Cycle(submit, &next));
      submit.clear();
      for (const WorkItem& item : next.work)
        if (item.response.kind == Response::Kind::kError) errors[rank] = item.response.error;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_CONTAINS(errors[0], "disagree on shape");
}

TEST_F(ControllerTest, ControllerFailedRequestFailsEveryRank) {
  FakeWorld world(2);
  std::vector<Response::Kind> kinds(2);
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    Request r = MakeRequest("x", {3}, DataType::kFloat32, OpType::kAlltoall);
    if (rank == 1) r.error = "splits must add up to 3";
    CycleResult out;
    ASSERT_OK(me.Cycle({r}, &out));
    ASSERT_EQ(out.work.size(), 1u);
    kinds[rank] = out.work[0].response.kind;
    errors[rank] = out.work[0].response.error;
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(kinds[r] == Response::Kind::kArgumentError);
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_CONTAINS(errors[0], "'x' failed on rank 1: splits must add up to 3.");
}

TEST_F(ControllerTest, ControllerOverlappingCallsFailOnTheirRank) {
  FakeWorld world(1);
  RankUnderTest me(&world, 0, Config());
  // Two entries with one name in one cycle, on a world of one: both fail, nothing runs.
  CycleResult out;
  ASSERT_OK(me.Cycle({MakeRequest("a", {1}), MakeRequest("a", {1})}, &out));
  auto done = me.completions.All();
  ASSERT_EQ(done.size(), 2u);
  for (const auto& [name, status] : done) {
    EXPECT_TRUE(status.code() == Status::Code::kInvalidArgument);
    EXPECT_CONTAINS(status.message(), "allreduce 'a' was called again while an earlier call");
    EXPECT_CONTAINS(status.message(), "rank 0 (2)");
  }
  EXPECT_EQ(Names(out), "");
  EXPECT_TRUE(!me.controller.has_pending());
  // The name works again afterwards.
  ASSERT_OK(me.Cycle({MakeRequest("a", {1})}, &out));
  EXPECT_EQ(Names(out), "a;");
}

// Runs cycles in which rank r submits submits[cycle][r] calls of "t"; returns per rank the
// statuses of its calls in completion order ("ok" or the error) and the work it ran.
struct OverlapRun {
  std::vector<std::vector<std::string>> statuses;
  std::vector<std::string> work;
};
OverlapRun RunOverlap(int n, const std::vector<std::vector<int>>& submits, bool cache_first) {
  FakeWorld world(n);
  OverlapRun run;
  run.statuses.resize(n);
  run.work.resize(n);
  RunRanks(n, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    CycleResult out;
    size_t skip = 0;
    if (cache_first) {  // "t" runs once together first, so its signature is cached
      ASSERT_OK(me.Cycle({MakeRequest("t", {2})}, &out));
      ASSERT_EQ(Names(out), "t;");
      out.work[0].entry->done(Status::Ok(), CollectiveResult());
      skip = 1;
    }
    for (size_t cycle = 0; cycle < submits.size(); ++cycle) {
      std::vector<Request> now(submits[cycle][rank], MakeRequest("t", {2}));
      CycleResult result;
      ASSERT_OK(me.Cycle(now, &result));
      run.work[rank] += Names(result);
      for (WorkItem& item : result.work)
        if (item.entry) item.entry->done(Status::Ok(), CollectiveResult());  // as the executor
    }
    const auto all = me.completions.All();
    for (size_t i = skip; i < all.size(); ++i)
      run.statuses[rank].push_back(all[i].second.ok() ? "ok" : all[i].second.message());
    EXPECT_TRUE(!me.controller.has_pending());
  });
  return run;
}

TEST_F(ControllerTest, ControllerOverlapFailsEveryCallOnEveryRank) {
  // Rank 0's two calls of "t" are in flight together before rank 1 submits any: nobody can
  // tell which of rank 1's calls belongs with which, so all four fail, rank 1's two as they
  // arrive (one pending at the overlap, one a cycle later). Then "t" pairs again.
  for (bool cached : {false, true}) {
    OverlapRun run = RunOverlap(2, {{2, 0}, {0, 1}, {0, 1}, {1, 1}}, cached);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(run.statuses[r].size(), 3u);
      EXPECT_CONTAINS(run.statuses[r][0], "allreduce 't' was called again");
      EXPECT_CONTAINS(run.statuses[r][1], "allreduce 't' was called again");
      EXPECT_EQ(run.statuses[r][2], "ok");
      EXPECT_EQ(run.work[r], "t;");
    }
  }
}

TEST_F(ControllerTest, ControllerOverlapCountsTheMostCallsInFlight) {
  // 3 ranks: rank 0 has 2 calls in flight, rank 1 has 3 at the same time, rank 2 none yet:
  // every rank fails 3 calls (rank 2 all three on arrival, rank 0 its third on arrival).
  OverlapRun run = RunOverlap(3, {{1, 3, 0}, {1, 0, 0}, {1, 0, 2}, {0, 0, 1}, {1, 1, 1}},
                              /*cache_first=*/false);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(run.statuses[r].size(), 4u);
    for (int i = 0; i < 3; ++i) EXPECT_CONTAINS(run.statuses[r][i], "allreduce 't' was called");
    EXPECT_EQ(run.statuses[r][3], "ok");
    EXPECT_EQ(run.work[r], "t;");
  }
}

TEST_F(ControllerTest, ControllerOverlapBeatsAPartnerArrivingInTheSameCycle) {
  // Rank 0's first call waits (announced in full); its second arrives in the very cycle that
  // brings rank 1's first: the coordinator must not pair rank 0's first with it.
  OverlapRun run = RunOverlap(2, {{1, 0}, {1, 1}, {0, 1}, {1, 1}}, /*cache_first=*/false);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(run.statuses[r].size(), 3u);
    EXPECT_CONTAINS(run.statuses[r][0], "was called again");
    EXPECT_CONTAINS(run.statuses[r][1], "was called again");
    EXPECT_EQ(run.statuses[r][2], "ok");
  }
}

TEST_F(ControllerTest, ControllerWorkOrderIsTheSameOnEveryRank) {
  // Ranks submit the same tensors in different orders and cycles; every rank still runs them
  // in one order (what fusion and the backend calls rely on).
  const int n = 3;
  FakeWorld world(n);
  std::vector<std::string> order(n);
  RunRanks(n, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    std::vector<Request> mine;
    for (int i = 0; i < 6; ++i) mine.push_back(MakeRequest("t" + std::to_string((i + rank * 2) % 6), {i}));
    // Shapes must agree per name: build them from the name.
    for (Request& r : mine) r.shapes = {{static_cast<int64_t>(r.name[1] - '0')}};
    for (int cycle = 0; cycle < 4; ++cycle) {
      std::vector<Request> now;
      if (cycle == rank) now = mine;
      CycleResult out;
      ASSERT_OK(me.Cycle(now, &out));
      order[rank] += Names(out);
    }
  });
  EXPECT_EQ(order[1], order[0]);
  EXPECT_EQ(order[2], order[0]);
  EXPECT_EQ(order[0].size(), 18u);
}

TEST_F(ControllerTest, ControllerShutdownStopsEveryRankAndNamesWhoAsked) {
  const int n = 3;
  FakeWorld world(n);
  std::vector<CycleResult> results(n);
  std::vector<size_t> pending(n);
  RunRanks(n, [&](int rank) {
    RankUnderTest me(&world, rank, Config());
    // Rank 2 never submits "a"; rank 1 asks to shut down while "a" waits on ranks 0 and 1.
    std::vector<Request> submit;
    if (rank < 2) submit.push_back(MakeRequest("a", {1}));
    ASSERT_OK(me.Cycle(submit, &results[rank], /*shutdown=*/rank == 1));
    pending[rank] = me.controller.TakePending().size();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(results[r].shutdown);
    EXPECT_EQ(results[r].shutdown_ranks.size(), 1u);
    if (!results[r].shutdown_ranks.empty()) {
      EXPECT_EQ(results[r].shutdown_ranks[0], 1);
    }
    EXPECT_TRUE(results[r].work.empty());
  }
  // The entries still pending are handed back, to be failed by the caller.
  EXPECT_EQ(pending[0], 1u);
  EXPECT_EQ(pending[1], 1u);
  EXPECT_EQ(pending[2], 0u);
}

TEST_F(ControllerTest, ControllerDeadPeerIsAnAbortNotAHang) {
  FakeWorld world(2);
  Status status;
  // Only rank 0 runs a cycle; rank 1 never comes.
  RankUnderTest me(&world, 0, Config(), std::chrono::milliseconds(100));
  CycleResult out;
  const auto start = std::chrono::steady_clock::now();
  status = me.Cycle({MakeRequest("a", {1})}, &out);
  EXPECT_TRUE(status.code() == Status::Code::kAborted);
  EXPECT_CONTAINS(status.message(), "negotiation");
  EXPECT_TRUE(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  // The world is broken from now on: the next cycle fails at once.
  EXPECT_TRUE(!me.Cycle({}, &out).ok());
  EXPECT_EQ(me.controller.TakePending().size(), 1u);
}

TEST_F(ControllerTest, ControllerAbortFlagEndsTheWait) {
  FakeWorld world(2);
  AbortFlag abort;
  RankUnderTest me(&world, 0, Config(), std::chrono::milliseconds(60000), &abort);
  std::thread monitor([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    abort.Set(Status::Aborted("rank 1 stopped answering heartbeats"));
  });
  CycleResult out;
  const auto start = std::chrono::steady_clock::now();
  Status status = me.Cycle({MakeRequest("a", {1})}, &out);
  monitor.join();
  EXPECT_TRUE(status.code() == Status::Code::kAborted);
  EXPECT_CONTAINS(status.message(), "rank 1 stopped answering");
  EXPECT_TRUE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_F(ControllerTest, ControllerStallShutdownIsFatalOnEveryRank) {
  FakeWorld world(2);
  std::vector<std::string> fatal(2);
  RunRanks(2, [&](int rank) {
    Config config;
    config.stall_check_seconds = 0;
    config.stall_shutdown_seconds = 0.05;
    RankUnderTest me(&world, rank, config);
    std::vector<Request> submit;
    if (rank == 0) submit.push_back(MakeRequest("lonely", {1}));
    for (int cycle = 0; cycle < 500 && fatal[rank].empty(); ++cycle) {
      CycleResult out;
      ASSERT_OK(me.Cycle(submit, &out));
      submit.clear();
      fatal[rank] = out.fatal_error;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_EQ(fatal[0], fatal[1]);
  EXPECT_CONTAINS(fatal[0], "'lonely'");
  EXPECT_CONTAINS(fatal[0], "still missing on ranks [1]");
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
