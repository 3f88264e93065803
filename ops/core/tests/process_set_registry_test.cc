// ProcessSetRegistry (process_set_registry.h) with ranks as threads of a FakeWorld: agreement,
// disagreement as the same error on every rank, a rank that never calls, split sets, removal,
// and the membership check of submissions.
#include "../process_set_registry.h"

#include "fake_world.h"
#include "rank_threads_test.h"

namespace kerashvd {
namespace testing {
namespace {

using ProcessSetRegistryTest = RankThreadsTest;  // the suite of this file

// Records what the registry asks of its owner; checks that a new set's group works.
class RecordingHost : public ProcessSetRegistry::Host {
 public:
  Status StartSet(int id, const std::vector<int>& ranks, std::unique_ptr<Group> group) override {
    started.push_back(id);
    started_ranks = ranks;
    group_rank = group->rank();
    group_size = group->size();
    // The members' group is a working communicator of its own.
    std::vector<uint64_t> all;
    KERASHVD_RETURN_IF_ERROR(group->Allgather({static_cast<uint64_t>(group->rank())}, "test", &all));
    group_ok = all.size() == ranks.size();
    for (size_t i = 0; i < all.size(); ++i) group_ok = group_ok && all[i] == i;
    return Status::Ok();
  }
  void StopSets(const std::vector<int>& ids) override {
    stopped.insert(stopped.end(), ids.begin(), ids.end());
  }
  std::vector<int> started, stopped, started_ranks;
  int group_rank = -1, group_size = 0;
  bool group_ok = false;
};

struct RegistryRank {
  RegistryRank(std::shared_ptr<FakeWorld> world, int rank,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(5000))
      : registry(std::make_unique<FakeGroup>(world, rank, timeout), nullptr, &host) {}
  RecordingHost host;
  ProcessSetRegistry registry;
};

TEST_F(ProcessSetRegistryTest, RegistryAddAgreesAndStartsTheMembersSet) {
  const int n = 3;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<int> ids(n, -1), view_rank(n), started(n), group_size(n);
  // char, not bool: the bits of a vector<bool> share words, written by several rank threads
  std::vector<char> group_ok(n);
  std::vector<std::string> caller(n);
  RunRanks(n, [&](int rank) {
    RegistryRank me(world, rank);
    ASSERT_OK(me.registry.Add({0, 2}, &ids[rank]));
    ProcessSetView view;
    ASSERT_OK(me.registry.View(ids[rank], &view));
    view_rank[rank] = view.rank;
    EXPECT_EQ(view.size, 2);
    started[rank] = static_cast<int>(me.host.started.size());
    group_size[rank] = me.host.group_size;
    group_ok[rank] = me.host.group_ok;
    caller[rank] = me.registry.CheckCaller(ids[rank], "g").message();
    EXPECT_TRUE(me.registry.IsMember(ids[rank], 2));
    EXPECT_TRUE(!me.registry.IsMember(ids[rank], 1));
    EXPECT_EQ(me.registry.Ids().size(), 2u);
    EXPECT_CONTAINS(me.registry.CheckCaller(7, "g").message(), "not registered");
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(ids[r], 1);
  EXPECT_EQ(view_rank[0], 0);
  EXPECT_EQ(view_rank[1], -1);
  EXPECT_EQ(view_rank[2], 1);
  EXPECT_EQ(started[0], 1);
  EXPECT_EQ(started[1], 0);
  EXPECT_EQ(started[2], 1);
  EXPECT_EQ(group_size[2], 2);
  EXPECT_TRUE(group_ok[0] && group_ok[2]);
  // The one membership check: members may call, others are told why not.
  EXPECT_EQ(caller[0], "");
  EXPECT_CONTAINS(caller[1], "rank 1 is not in process set 1 with ranks [0, 2], so it cannot "
                             "call 'g'");
}

TEST_F(ProcessSetRegistryTest, RegistryDisagreementIsTheSameErrorOnEveryRank) {
  const int n = 3;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<Status> statuses(n);
  std::vector<int> after(n, -1);
  RunRanks(n, [&](int rank) {
    RegistryRank me(world, rank);
    int id = -1;
    statuses[rank] = me.registry.Add(rank == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1}, &id);
    EXPECT_TRUE(me.host.started.empty());
    // Nothing was registered, and the registry still works.
    ASSERT_OK(me.registry.Add({1, 2}, &after[rank]));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(statuses[r].code() == Status::Code::kInvalidArgument);
    EXPECT_EQ(statuses[r].message(), statuses[0].message());
    EXPECT_EQ(after[r], 1);
  }
  EXPECT_CONTAINS(statuses[0].message(), "rank 0 called add_process_set([0, 1]);");
  EXPECT_CONTAINS(statuses[0].message(), "rank 2 called add_process_set([0, 2]);");
}

TEST_F(ProcessSetRegistryTest, RegistryRankThatNeverCallsIsAnAbort) {
  auto world = std::make_shared<FakeWorld>(2);
  RegistryRank me(world, 0, std::chrono::milliseconds(100));
  int id = -1;
  Status status = me.registry.Add({0}, &id);
  EXPECT_TRUE(status.code() == Status::Code::kAborted);
  EXPECT_CONTAINS(status.message(), "add_process_set failed: every rank must call it");
  // The exchange may still be in flight: later registrations say why they cannot run.
  status = me.registry.Add({0}, &id);
  EXPECT_TRUE(status.code() == Status::Code::kFailedPrecondition);
  EXPECT_CONTAINS(status.message(), "cannot register or remove process sets any more");
}

TEST_F(ProcessSetRegistryTest, RegistryRefusesTheGlobalSetAndDuplicatesEverywhere) {
  const int n = 2;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<std::string> global(n), duplicate(n);
  RunRanks(n, [&](int rank) {
    RegistryRank me(world, rank);
    int id = -1;
    global[rank] = me.registry.Add({0, 1}, &id).message();
    ASSERT_OK(me.registry.Add({1}, &id));
    duplicate[rank] = me.registry.Add({1}, &id).message();
    EXPECT_CONTAINS(me.registry.Add({1, 0}, &id).message(), "ascending order");
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_CONTAINS(global[r], "is the global process set");
    EXPECT_CONTAINS(duplicate[r], "already exists (id 1)");
  }
}

TEST_F(ProcessSetRegistryTest, RegistrySplitSetsAndRemoveThemTogether) {
  const int n = 4;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<std::vector<int>> ids(n), removed(n), stopped(n);
  std::vector<int> my_index(n), group_rank(n);
  // char, not bool: the bits of a vector<bool> share words, written by several rank threads
  std::vector<char> still_member(n);
  RunRanks(n, [&](int rank) {
    RegistryRank me(world, rank);
    std::vector<std::vector<int>> lists;
    const std::vector<int> mine = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    ASSERT_OK(me.registry.AddSplit(mine, &ids[rank], &lists, &my_index[rank]));
    EXPECT_EQ(lists.size(), 2u);
    group_rank[rank] = me.host.group_rank;
    // Removing one set of a split call removes all of them.
    ASSERT_OK(me.registry.Remove(ids[rank][1], &removed[rank]));
    stopped[rank] = me.host.stopped;
    EXPECT_EQ(me.registry.Ids().size(), 1u);
    still_member[rank] = me.registry.IsMember(ids[rank][my_index[rank]], rank);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ids[r].size(), 2u);
    EXPECT_EQ(my_index[r], r < 2 ? 0 : 1);
    EXPECT_EQ(group_rank[r], r % 2);
    EXPECT_EQ(removed[r].size(), 2u);
    EXPECT_EQ(stopped[r].size(), 2u);
    EXPECT_TRUE(still_member[r]);  // removed sets keep answering IsMember
  }
}

TEST_F(ProcessSetRegistryTest, RegistrySplitThatIsNoPartitionFailsEverywhere) {
  const int n = 3;
  auto world = std::make_shared<FakeWorld>(n);
  std::vector<std::string> errors(n);
  RunRanks(n, [&](int rank) {
    RegistryRank me(world, rank);
    // Rank 0 names [0, 1], but rank 1 names only itself.
    const std::vector<int> mine = rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{rank};
    std::vector<int> ids;
    std::vector<std::vector<int>> lists;
    int my_index = -1;
    errors[rank] = me.registry.AddSplit(mine, &ids, &lists, &my_index).message();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], errors[0]);
  EXPECT_CONTAINS(errors[0], "each member of a communicator must pass that communicator");
  EXPECT_CONTAINS(errors[0], "rank 1 called ProcessSet(a communicator of ranks [1])");
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
