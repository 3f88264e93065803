// LinkModel (backend/mpi/link_model.h): the link time of MPICH's allreduce algorithms for each
// placement of ranks on nodes, and the choice of hierarchical_allreduce=auto made from it.
// The figures of docs/benchmarks.md's "Hierarchical allreduce" table: at 2 nodes x 2 ranks,
// MPICH's reduce-scatter + allgather sends as much per node as node by node with ranks in blocks
// and twice as much with ranks alternating between nodes; recursive doubling twice as much in
// both; ring 1.5 times.
#include <cmath>

#include "../backend/mpi/link_model.h"
#include "rank_threads_test.h"

namespace kerashvd {
namespace testing {
namespace {

using LinkModelTest = RankThreadsTest;  // the suite of this file

const std::vector<int> kBlocks2x2{0, 0, 1, 1}, kCyclic2x2{0, 1, 0, 1};
const std::vector<int> kBlocks3x2{0, 0, 1, 1, 2, 2}, kCyclic3x2{0, 1, 2, 0, 1, 2};
constexpr int64_t kLarge = int64_t{16} << 20;  // bytes of a large float32 allreduce
constexpr int64_t kLargeCount = kLarge / 4;

int Id(FlatAlgorithm a) { return static_cast<int>(a); }

int Read(const char* name, int recexch_k = 2, bool tuning_file = false) {
  return Id(FlatAlgorithmFromMpich(name, recexch_k, tuning_file));
}

bool Near(double a, double b) { return std::fabs(a - b) < 1e-9; }

LinkModel Model(std::vector<int> node_of, FlatAlgorithm algorithm,
                Hierarchical mode = Hierarchical::kAuto) {
  LinkModelInputs in;
  in.mode = mode;
  in.algorithm = algorithm;
  in.node_of = std::move(node_of);
  return LinkModel(in);
}

bool AutoLarge(std::vector<int> node_of, FlatAlgorithm algorithm) {
  return Model(std::move(node_of), algorithm).UseHierarchical(kLarge, kLargeCount, true);
}

TEST_F(LinkModelTest, NodeByNodeMovesTheLeast) {
  EXPECT_TRUE(Near(HierarchicalLinkTime(1), 0.0));
  EXPECT_TRUE(Near(HierarchicalLinkTime(2), 1.0));
  EXPECT_TRUE(Near(HierarchicalLinkTime(3), 4.0 / 3));
  EXPECT_TRUE(Near(HierarchicalLinkTime(4), 1.5));
}

TEST_F(LinkModelTest, FlatAlgorithmsAtTwoByTwo) {
  const auto rsag = FlatAlgorithm::kReduceScatterAllgather;
  EXPECT_TRUE(Near(FlatLinkTime(rsag, kBlocks2x2), 1.0));  // halves within, quarters across
  EXPECT_TRUE(Near(FlatLinkTime(rsag, kCyclic2x2), 2.0));  // halves across
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kRecursiveDoubling, kBlocks2x2), 2.0));
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kRecursiveDoubling, kCyclic2x2), 2.0));
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kRing, kBlocks2x2), 1.5));  // 6 rounds of S/4
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kRing, kCyclic2x2), 3.0));
  // One rank a node: two ranks, one exchange of halves each way.
  EXPECT_TRUE(Near(FlatLinkTime(rsag, {0, 1}), 1.0));
  // Node-aware: the leaders' allreduce only.
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kSmp, kCyclic2x2), 1.0));
  EXPECT_TRUE(FlatLinkTime(FlatAlgorithm::kUnknown, kBlocks2x2) < 0);
}

TEST_F(LinkModelTest, FlatAlgorithmsOnThreeNodes) {
  // 6 ranks: ranks 0 and 2 first hand their data to 1 and 3 (within the node in blocks), the
  // 4 others run reduce-scatter + allgather: 1 <-> 3 across nodes 0-1 (S/2 both ways), 1 <-> 4
  // and 3 <-> 5 through node 2's link (S/4 twice).
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kReduceScatterAllgather, kBlocks3x2), 2.0));
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kReduceScatterAllgather, kCyclic3x2), 4.5));
  // One rank a node: 0 -> 1 (S), 1 <-> 2 (S/2, S/2), 1 -> 0 (S).
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kReduceScatterAllgather, {0, 1, 2}), 3.0));
}

TEST_F(LinkModelTest, AutoAtTwoByTwoWithMpichDefault) {
  const auto mpich = FlatAlgorithm::kMpichDefault;
  EXPECT_TRUE(!AutoLarge(kBlocks2x2, mpich));  // flat already moves the least
  EXPECT_TRUE(AutoLarge(kCyclic2x2, mpich));
  // Below kAutoMinBytes: flat, whatever the layout.
  EXPECT_TRUE(!Model(kCyclic2x2, mpich).UseHierarchical(LinkModel::kAutoMinBytes - 4,
                                                        LinkModel::kAutoMinBytes / 4 - 1, true));
  EXPECT_TRUE(Model(kCyclic2x2, mpich).UseHierarchical(LinkModel::kAutoMinBytes,
                                                       LinkModel::kAutoMinBytes / 4, true));
  // MPICH takes recursive doubling for user-defined reductions (kerashvd's float Min/Max):
  // twice the bytes across, in blocks too.
  EXPECT_TRUE(Model(kBlocks2x2, mpich).UseHierarchical(kLarge, kLargeCount, false));
  EXPECT_TRUE(Near(Model(kBlocks2x2, mpich).FlatTime(kLarge, kLargeCount, false), 2.0));
}

TEST_F(LinkModelTest, AutoFollowsMpisAlgorithm) {
  EXPECT_TRUE(AutoLarge(kBlocks2x2, FlatAlgorithm::kRecursiveDoubling));
  EXPECT_TRUE(AutoLarge(kBlocks2x2, FlatAlgorithm::kRing));
  EXPECT_TRUE(AutoLarge(kBlocks2x2, FlatAlgorithm::kTree));
  EXPECT_TRUE(!AutoLarge(kBlocks2x2, FlatAlgorithm::kReduceScatterAllgather));
  EXPECT_TRUE(!AutoLarge(kCyclic2x2, FlatAlgorithm::kSmp));  // MPICH's node-aware algorithm
  // Not known (another MPI, a tuning file): node by node wherever a node runs several ranks.
  EXPECT_TRUE(AutoLarge(kBlocks2x2, FlatAlgorithm::kUnknown));
  EXPECT_TRUE(!AutoLarge({0, 1}, FlatAlgorithm::kUnknown));
}

TEST_F(LinkModelTest, AutoOnThreeNodesAndUnevenNodes) {
  const auto mpich = FlatAlgorithm::kMpichDefault;
  EXPECT_TRUE(AutoLarge(kBlocks3x2, mpich));
  EXPECT_TRUE(AutoLarge(kCyclic3x2, mpich));
  EXPECT_TRUE(AutoLarge({0, 1, 2}, mpich));  // 3 x 1: flat's first and last steps cross nodes
  EXPECT_TRUE(!AutoLarge({0, 1}, mpich));    // 2 x 1: the same exchange either way
  // 2 + 1 in blocks: 0 -> 1 and back within node 0, halves between 1 and 2: as node by node.
  EXPECT_TRUE(!AutoLarge({0, 0, 1}, mpich));
  // 2 + 1 with the single rank in the middle: every step crosses.
  EXPECT_TRUE(AutoLarge({0, 1, 0}, mpich));
  EXPECT_TRUE(Near(FlatLinkTime(FlatAlgorithm::kReduceScatterAllgather, {0, 1, 0}), 3.0));
}

TEST_F(LinkModelTest, ModesOnAndOff) {
  for (auto layout : {kBlocks2x2, kCyclic2x2, kBlocks3x2, std::vector<int>{0, 0, 1}}) {
    EXPECT_TRUE(Model(layout, FlatAlgorithm::kMpichDefault, Hierarchical::kOn)
                    .UseHierarchical(4, 1, true));
    EXPECT_TRUE(!Model(layout, FlatAlgorithm::kRing, Hierarchical::kOff)
                     .UseHierarchical(kLarge, kLargeCount, true));
  }
  // One node: nothing to do node by node, whatever the mode.
  EXPECT_TRUE(!Model({0, 0, 0}, FlatAlgorithm::kRing, Hierarchical::kOn)
                   .UseHierarchical(kLarge, kLargeCount, true));
}

TEST_F(LinkModelTest, ReadsMpichNames) {
  EXPECT_EQ(Read("auto"), Id(FlatAlgorithm::kMpichDefault));
  EXPECT_EQ(Read("auto", 2, true), Id(FlatAlgorithm::kUnknown));
  EXPECT_EQ(Read("sched_recursive_doubling"), Id(FlatAlgorithm::kRecursiveDoubling));
  EXPECT_EQ(Read("tsp_recexch_single_buffer"), Id(FlatAlgorithm::kRecursiveDoubling));
  EXPECT_EQ(Read("tsp_recexch_single_buffer", 4), Id(FlatAlgorithm::kUnknown));
  EXPECT_EQ(Read("sched_reduce_scatter_allgather"), Id(FlatAlgorithm::kReduceScatterAllgather));
  EXPECT_EQ(Read("tsp_ring"), Id(FlatAlgorithm::kRing));
  EXPECT_EQ(Read("sched_smp"), Id(FlatAlgorithm::kSmp));
  EXPECT_EQ(Read(""), Id(FlatAlgorithm::kUnknown));
}

TEST_F(LinkModelTest, DescribesItsChoice) {
  const std::string text = Model(kCyclic2x2, FlatAlgorithm::kMpichDefault).Describe();
  EXPECT_CONTAINS(text, "2 nodes (2+2 ranks, not in node order)");
  EXPECT_CONTAINS(text, "flat 2.00, node by node 1.00");
  EXPECT_CONTAINS(text, "runs node by node");
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
