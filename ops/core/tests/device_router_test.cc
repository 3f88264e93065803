// DeviceRouter (device_router.h) and SetLanes (set_lanes.h) on FakeGroups: where the world
// lane's groups run (host groups on the host executor, GPU groups on a plane that the world's
// or the set's group creates), the refusal of GPU tensors in a build without a GPU plane, and
// a set's lane started over the set's group, found by id, and stopped with the set.
#include "../device_router.h"
#include "../set_lanes.h"
#include "fake_world.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using DeviceRouterTest = RankThreadsTest;  // the suite of this file

// An executor that is only compared by address, never run.
Executor* HostExecutor() { return reinterpret_cast<Executor*>(0x1000); }

Status Route(DeviceRouter* router, int device, int process_set, Executor** out) {
  WorkItem item = MakeWork(MakeRequest("t", {4}));
  item.response.request.device = device;
  item.response.request.process_set = process_set;
  std::vector<WorkItem*> group{&item};
  return router->ExecutorFor(group, HostExecutor(), out);
}

TEST_F(DeviceRouterTest, DeviceRouterRunsHostGroupsOnTheHostAndAsksGroupsForGpuPlanes) {
  FakeGroup world(std::make_shared<FakeWorld>(1), 0);
  Timeline timeline;
  DeviceRouter router(&world, &timeline);
  Executor* executor = nullptr;
  ASSERT_OK(Route(&router, -1, 0, &executor));
  EXPECT_TRUE(executor == HostExecutor());
  // This build has no GPU plane: GPU tensors are refused at submission...
  Request gpu = MakeRequest("on.gpu", {4});
  gpu.device = 0;
  EXPECT_CONTAINS(router.CheckDevice(gpu).message(), "no GPU backend");
  // ...and a GPU group reaching the router goes to the group that makes the plane.
  EXPECT_CONTAINS(Route(&router, 0, 0, &executor).message(), "the fake group has no GPU plane");
  EXPECT_CONTAINS(Route(&router, 0, 3, &executor).message(), "process set 3 has no GPU");
  router.AddSet(3, std::make_unique<FakeGroup>(std::make_shared<FakeWorld>(1), 0));
  EXPECT_CONTAINS(Route(&router, 0, 3, &executor).message(), "the fake group has no GPU plane");
  router.DropSets();
  EXPECT_CONTAINS(Route(&router, 0, 3, &executor).message(), "process set 3 has no GPU");
}

TEST_F(DeviceRouterTest, SetLanesStartFindAndStopASetsLane) {
  const int n = 2;
  auto world = std::make_shared<FakeWorld>(n);
  // char, not bool: the bits of a vector<bool> share words, written by several rank threads
  std::vector<char> found(n), gone(n);
  RunRanks(n, [&](int rank) {
    FakeGroup world_group(world, rank);
    AbortFlag abort;
    Timeline timeline;
    DeviceRouter router(&world_group, &timeline);
    SetLanes lanes(Config(), &abort, &timeline, &router);
    std::unique_ptr<Group> set_group;
    ASSERT_OK(world_group.Split(0, &set_group));
    ASSERT_OK(lanes.StartSet(4, {0, 1}, std::move(set_group)));
    std::shared_ptr<Lane> lane = lanes.Find(4);
    found[rank] = lane != nullptr && lane->id() == 4 && lanes.Find(5) == nullptr;
    lanes.StopSets({4});  // the members stop the lane together
    gone[rank] = lanes.Find(4) == nullptr;
    // A lane still held by a submitter stays usable: it refuses new work, naming the reason.
    TensorEntry entry = MakeEntry(MakeRequest("late", {1}));
    EXPECT_CONTAINS(lane->Submit(std::move(entry)).message(), "process set 4 was shut down");
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(found[r]);
    EXPECT_TRUE(gone[r]);
  }
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
