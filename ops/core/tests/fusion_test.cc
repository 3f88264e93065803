// PlanFusion's contract (fusion.h): a pure function of the work list; only executable
// allreduces fuse, with the same reduce op (Average as Sum), wire dtype (WireType: halves as
// float32 for Min and Max), device kind and process set; groups fill in work-list order up to
// the threshold; a request is never split.
#include "../fusion.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using FusionTest = RankThreadsTest;  // the suite of this file

using Groups = std::vector<std::vector<size_t>>;

std::string Str(const Groups& groups) {
  std::string out;
  for (const auto& g : groups) {
    out += "[";
    for (size_t i = 0; i < g.size(); ++i) out += (i ? "," : "") + std::to_string(g[i]);
    out += "]";
  }
  return out;
}

TEST_F(FusionTest, FusionEmptyWorkHasNoGroups) { EXPECT_TRUE(PlanFusion({}, 1024).empty()); }

TEST_F(FusionTest, FusionPacksAllreducesInOrderUpToThreshold) {
  // 4 float32 = 16 bytes each; a 40-byte threshold holds two of them.
  std::vector<WorkItem> work;
  for (int i = 0; i < 5; ++i) work.push_back(MakeWork(MakeRequest("t" + std::to_string(i), {4})));
  EXPECT_EQ(Str(PlanFusion(work, 40)), "[0,1][2,3][4]");
  EXPECT_EQ(Str(PlanFusion(work, 1 << 20)), "[0,1,2,3,4]");
  // Exactly at the threshold still fits.
  EXPECT_EQ(Str(PlanFusion(work, 32)), "[0,1][2,3][4]");
}

TEST_F(FusionTest, FusionNeverSplitsALargeRequest) {
  std::vector<WorkItem> work{MakeWork(MakeRequest("big", {1000})), MakeWork(MakeRequest("s", {1}))};
  EXPECT_EQ(Str(PlanFusion(work, 16)), "[0][1]");
  // A grouped allreduce (several shapes) stays one request even above the threshold.
  Request grouped = MakeRequest("g", {100});
  grouped.shapes.push_back({100});
  EXPECT_EQ(Str(PlanFusion({MakeWork(grouped)}, 16)), "[0]");
  EXPECT_EQ(FusedBytes(grouped), 800);
}

TEST_F(FusionTest, FusionGroupClosesAtFirstRequestThatDoesNotFit) {
  // 16 + 32 > 40: the group of t0 closes at t1, although t2 (16 bytes) would still fit in it.
  std::vector<WorkItem> work{MakeWork(MakeRequest("t0", {4})), MakeWork(MakeRequest("t1", {8})),
                             MakeWork(MakeRequest("t2", {4}))};
  EXPECT_EQ(Str(PlanFusion(work, 40)), "[0][1][2]");
  EXPECT_EQ(Str(PlanFusion(work, 48)), "[0,1][2]");
}

TEST_F(FusionTest, FusionZeroSizedTensorsFuseFreely) {
  std::vector<WorkItem> work{MakeWork(MakeRequest("a", {4})), MakeWork(MakeRequest("empty", {0, 7})),
                             MakeWork(MakeRequest("b", {4}))};
  EXPECT_EQ(FusedBytes(work[1].response.request), 0);
  EXPECT_EQ(Str(PlanFusion(work, 32)), "[0,1,2]");
  // A zero threshold still gives every request a group; zero-sized ones fuse with each other.
  EXPECT_EQ(Str(PlanFusion(work, 0)), "[0][1][2]");
  std::vector<WorkItem> empties{MakeWork(MakeRequest("e0", {0})), MakeWork(MakeRequest("e1", {3, 0})),
                                MakeWork(MakeRequest("scalar", {}))};
  EXPECT_EQ(FusedBytes(empties[2].response.request), 4);  // a scalar is one element
  EXPECT_EQ(Str(PlanFusion(empties, 0)), "[0,1][2]");
}

TEST_F(FusionTest, FusionSeparatesWireDtypes) {
  std::vector<WorkItem> work{MakeWork(MakeRequest("f32", {2})),
                             MakeWork(MakeRequest("f64", {2}, DataType::kFloat64)),
                             MakeWork(MakeRequest("f16", {2}, DataType::kFloat16)),
                             MakeWork(MakeRequest("bf16", {2}, DataType::kBfloat16)),
                             MakeWork(MakeRequest("i32", {2}, DataType::kInt32))};
  // Summed halves travel in their own type: each dtype is a group of its own.
  EXPECT_EQ(Str(PlanFusion(work, 1 << 20)), "[0][1][2][3][4]");
  EXPECT_EQ(FusedBytes(work[2].response.request), 4);  // 2 halves
  EXPECT_EQ(FusedBytes(work[3].response.request), 4);
  // Their Min and Max travel as float32 (WireType), so they join float32's group.
  for (WorkItem& item : work) item.response.request.reduce_op = ReduceOp::kMax;
  EXPECT_EQ(Str(PlanFusion(work, 1 << 20)), "[0,2,3][1][4]");
  EXPECT_EQ(FusedBytes(work[2].response.request), 8);  // 2 halves as 2 float32
}

TEST_F(FusionTest, WireTypeWidensHalvesOnlyForMinAndMax) {
  for (DataType half : {DataType::kFloat16, DataType::kBfloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kProduct})
      EXPECT_EQ(WireType(half, op), half) << ReduceOpName(op);
    EXPECT_EQ(WireType(half, ReduceOp::kMin), DataType::kFloat32);
    EXPECT_EQ(WireType(half, ReduceOp::kMax), DataType::kFloat32);
  }
  for (DataType other : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax})
      EXPECT_EQ(WireType(other, op), other);
}

TEST_F(FusionTest, FusionSeparatesReduceOpsDevicesAndProcessSets) {
  std::vector<WorkItem> work;
  auto add = [&](ReduceOp op, int device, int set) {
    Request r = MakeRequest("t" + std::to_string(work.size()), {2});
    r.reduce_op = op;
    r.device = device;
    r.process_set = set;
    work.push_back(MakeWork(r));
  };
  add(ReduceOp::kSum, -1, 0);      // 0
  add(ReduceOp::kAverage, -1, 0);  // 1: Average is a Sum on the wire
  add(ReduceOp::kMax, -1, 0);      // 2
  add(ReduceOp::kSum, 0, 0);       // 3: GPU
  add(ReduceOp::kSum, 1, 0);       // 4: another GPU ordinal is still "on a GPU"
  add(ReduceOp::kSum, 0, 2);       // 5: another process set
  add(ReduceOp::kMax, -1, 0);      // 6
  EXPECT_EQ(Str(PlanFusion(work, 1 << 20)), "[0,1][2,6][3,4][5]");
}

TEST_F(FusionTest, FusionOnlyExecutableAllreducesFuse) {
  std::vector<WorkItem> work{
      MakeWork(MakeRequest("ag0", {2}, DataType::kFloat32, OpType::kAllgather)),
      MakeWork(MakeRequest("ag1", {2}, DataType::kFloat32, OpType::kAllgather)),
      MakeWork(MakeRequest("bc", {2}, DataType::kFloat32, OpType::kBroadcast)),
      MakeWork(MakeRequest("ar0", {2})),
      MakeWork(MakeRequest("err", {2}), Response::Kind::kError),
      MakeWork(MakeRequest("ar1", {2}))};
  // The failed allreduce is a group of its own, and the allreduces around it still fuse.
  EXPECT_EQ(Str(PlanFusion(work, 1 << 20)), "[0][1][2][3,5][4]");
}

TEST_F(FusionTest, FusionIsDeterministic) {
  std::vector<WorkItem> work;
  for (int i = 0; i < 50; ++i) {
    Request r = MakeRequest("t" + std::to_string(i), {i % 7},
                            i % 3 ? DataType::kFloat32 : DataType::kFloat64);
    r.reduce_op = i % 5 ? ReduceOp::kSum : ReduceOp::kMin;
    work.push_back(MakeWork(r));
  }
  const Groups first = PlanFusion(work, 48);
  EXPECT_EQ(Str(PlanFusion(work, 48)), Str(first));
  // Every index appears exactly once, and each group is ascending.
  std::vector<int> seen(work.size(), 0);
  for (const auto& g : first)
    for (size_t k = 0; k < g.size(); ++k) {
      ++seen[g[k]];
      if (k) {
        EXPECT_TRUE(g[k - 1] < g[k]);
      }
    }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST_F(FusionTest, FusionBufferGrowsAndIsReused) {
  FusionBuffer buffer;
  void* small = buffer.Reserve(10);
  ASSERT_TRUE(small != nullptr);
  EXPECT_EQ(buffer.Reserve(64), small);  // within the 64-byte aligned capacity
  void* big = buffer.Reserve(1 << 20);
  ASSERT_TRUE(big != nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % 64, 0u);
  EXPECT_EQ(buffer.Reserve(100), big);
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
