// ShmPair's contract (backend/shm/shm_pair.h): two ranks (threads here, each with its own
// mapping of a real POSIX segment) get the same bits, equal to one `a op b` per element, for
// every dtype and op it accepts, in place and out of place, for counts around its chunking
// (several chunks reuse both sets of boxes); a wait ends with the abort status; the segment's
// name is gone once the creator unlinks it.
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "../backend/shm/pair_reduce.h"
#include "../buffer_ops.h"
#include "../half_reduce.h"
#include "../backend/shm/shm_pair.h"
#include "rank_threads_test.h"

namespace kerashvd {
namespace testing {
namespace {

using ShmPairTest = RankThreadsTest;  // the suite of this file

// Both ranks' pairs over one segment; the name is unlinked as MakeShmPair does.
struct Pairs {
  std::unique_ptr<ShmPair> rank[2];
};

Pairs MakePairs(const AbortFlag* abort) {
  std::unique_ptr<ShmSegment> a, b;
  Status created = ShmSegment::Create(ShmPair::kSegmentBytes, &a);
  if (!created.ok()) Fail(__FILE__, __LINE__, created.message());
  Status opened = ShmSegment::Open(a->name(), ShmPair::kSegmentBytes, &b);
  if (!opened.ok()) Fail(__FILE__, __LINE__, opened.message());
  a->Unlink();
  Pairs p;
  p.rank[0] = std::make_unique<ShmPair>(std::move(a), 0, abort);
  p.rank[1] = std::make_unique<ShmPair>(std::move(b), 1, abort);
  return p;
}

// Runs fn(rank) on two threads and returns both statuses.
template <typename Fn>
std::vector<Status> OnBoth(Fn fn) {
  std::vector<Status> out(2);
  std::thread t([&] { out[1] = fn(1); });
  out[0] = fn(0);
  t.join();
  return out;
}

// Deterministic values of each rank, with NaN, infinities and signed zeros among floats.
template <typename T>
std::vector<T> Values(int rank, int64_t count) {
  std::vector<T> v(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = (i * 7919 + rank * 104729) % 2003;
    if constexpr (std::is_floating_point_v<T>) {
      switch ((i + rank) % 11) {
        case 3: v[i] = std::numeric_limits<T>::quiet_NaN(); break;
        case 5: v[i] = rank ? -0.0 : 0.0; break;
        case 7: v[i] = (rank ? -1 : 1) * std::numeric_limits<T>::infinity(); break;
        default: v[i] = static_cast<T>(k) / 7 - 140;
      }
    } else {
      v[i] = static_cast<T>(k * 977 + rank);  // wraps in narrow types: overflow is exercised
    }
  }
  return v;
}

template <typename T>
void CheckOne(DataType dtype, ReduceOp op, int64_t count, bool in_place, const char* what) {
  AbortFlag abort;
  Pairs pairs = MakePairs(&abort);
  std::vector<T> in[2] = {Values<T>(0, count), Values<T>(1, count)};
  std::vector<T> expected(count), scratch(count);
  PairReduce(in[0].data(), in[1].data(), expected.data(), scratch.data(), count, dtype, op);
  std::vector<T> out[2] = {std::vector<T>(count), std::vector<T>(count)};
  // Twice, so that the second call starts on the other set of boxes than the first.
  for (int round = 0; round < 2; ++round) {
    std::vector<T> work[2] = {in[0], in[1]};
    auto statuses = OnBoth([&](int r) {
      void* recv = in_place ? static_cast<void*>(work[r].data()) : out[r].data();
      return pairs.rank[r]->Allreduce(work[r].data(), recv, count, dtype, op);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_OK(statuses[r]);
      const std::vector<T>& got = in_place ? work[r] : out[r];
      if (!in_place && std::memcmp(work[r].data(), in[r].data(), count * sizeof(T)) != 0) Fail(__FILE__, __LINE__, std::string(what) + ": input changed");
      if (std::memcmp(got.data(), expected.data(), count * sizeof(T)) != 0)
        Fail(__FILE__, __LINE__, std::string(what) + " count " + std::to_string(count) +
                                     (in_place ? " in place" : " out of place") + ": rank " +
                                     std::to_string(r) + " differs from a op b");
    }
  }
}

template <typename T>
void CheckType(DataType dtype, const char* name) {
  const int64_t chunk = ShmPair::kChunkBytes / sizeof(T);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct})
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, chunk - 1, chunk + 1, 3 * chunk + 5})
      for (bool in_place : {true, false}) CheckOne<T>(dtype, op, count, in_place, name);
}

TEST_F(ShmPairTest, ShmPairMatchesOneOperationPerElementForEveryTypeAndOp) {
  CheckType<uint8_t>(DataType::kUint8, "uint8");
  CheckType<int8_t>(DataType::kInt8, "int8");
  CheckType<int32_t>(DataType::kInt32, "int32");
  CheckType<int64_t>(DataType::kInt64, "int64");
  CheckType<float>(DataType::kFloat32, "float32");
  CheckType<double>(DataType::kFloat64, "float64");
}

// float16/bfloat16 Sum and Product through the pair give ReduceHalves's bits (the MPI
// backend's arithmetic), with NaN, infinities and subnormals among the values.
TEST_F(ShmPairTest, ShmPairReducesHalvesAsTheMpiBackendDoes) {
  AbortFlag abort;
  Pairs pairs = MakePairs(&abort);
  const int64_t chunk = ShmPair::kChunkBytes / 2;
  for (DataType dtype : {DataType::kFloat16, DataType::kBfloat16})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct})
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{9}, chunk + 3, 2 * chunk + 17})
        for (bool in_place : {true, false}) {
          std::vector<uint16_t> in[2];
          for (int r = 0; r < 2; ++r) {
            in[r].resize(count);
            for (int64_t i = 0; i < count; ++i)
              in[r][i] = static_cast<uint16_t>((i * 40503 + r * 9973 + 17) & 0xFFFF);
          }
          std::vector<uint16_t> expected = in[1];
          ReduceHalves(in[0].data(), expected.data(), count, dtype, op);
          std::vector<uint16_t> work[2] = {in[0], in[1]}, out[2] = {std::vector<uint16_t>(count),
                                                                      std::vector<uint16_t>(count)};
          auto statuses = OnBoth([&](int r) {
            void* recv = in_place ? static_cast<void*>(work[r].data()) : out[r].data();
            return pairs.rank[r]->Allreduce(work[r].data(), recv, count, dtype, op);
          });
          for (int r = 0; r < 2; ++r) {
            EXPECT_OK(statuses[r]);
            EXPECT_TRUE((in_place ? work[r] : out[r]) == expected)
                << DataTypeName(dtype) << " " << ReduceOpName(op) << " count " << count
                << (in_place ? " in place" : " out of place") << ": rank " << r;
          }
        }
}

// Spans (a fused group without its buffer) give each tensor what the fused path gives: the
// pair's a op b over the concatenation, then ScaleCopy by the tensor's postscale.
TEST_F(ShmPairTest, ShmPairSpansMatchTheFusedBufferScaledAfterwards) {
  AbortFlag abort;
  Pairs pairs = MakePairs(&abort);
  const int64_t chunk = ShmPair::kChunkBytes / sizeof(float);
  const std::vector<int64_t> counts = {3, 0, chunk - 2, 1, 0, chunk + 7, 5};
  const std::vector<double> posts = {0.5, 1.0, 1.0, 0.25, 2.0, 1.0 / 3, 0.5};
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<float> in[2] = {Values<float>(0, total), Values<float>(1, total)};
  std::vector<float> fused(total), scratch(total);
  PairReduce(in[0].data(), in[1].data(), fused.data(), scratch.data(), total, DataType::kFloat32,
             ReduceOp::kSum);
  std::vector<float> expected(total);
  for (size_t k = 0, at = 0; k < counts.size(); at += counts[k], ++k)
    ScaleCopy(fused.data() + at, expected.data() + at, counts[k], DataType::kFloat32, posts[k]);
  for (bool in_place : {true, false}) {
    std::vector<float> work[2] = {in[0], in[1]}, out[2] = {std::vector<float>(total), std::vector<float>(total)};
    auto statuses = OnBoth([&](int r) {
      std::vector<AllreduceSpan> spans;
      for (size_t k = 0, at = 0; k < counts.size(); at += counts[k], ++k) {
        float* recv = (in_place ? work[r].data() : out[r].data()) + at;
        spans.push_back({work[r].data() + at, recv, counts[k], posts[k]});
      }
      return pairs.rank[r]->Allreduce(spans, DataType::kFloat32, ReduceOp::kSum);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_OK(statuses[r]);
      const std::vector<float>& got = in_place ? work[r] : out[r];
      EXPECT_TRUE(std::memcmp(got.data(), expected.data(), total * sizeof(float)) == 0);
    }
  }
}

TEST_F(ShmPairTest, ShmPairReduceFollowsNumpysNanRuleAndWraps) {
  float a[] = {1.0f, std::nanf(""), 0.0f, -0.0f, 2.0f}, b[] = {std::nanf(""), 3.0f, -0.0f, 0.0f, 1.0f};
  float out[5], copy[5];
  PairReduce(a, b, out, copy, 5, DataType::kFloat32, ReduceOp::kMax);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_TRUE(out[2] == 0.0f && !std::signbit(out[2]) && !std::signbit(out[3]));
  EXPECT_EQ(out[4], 2.0f);
  EXPECT_TRUE(std::memcmp(out, copy, sizeof(out)) == 0);
  PairReduce(a, b, out, copy, 5, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_TRUE(std::signbit(out[2]) && std::signbit(out[3]));
  uint32_t quiet;
  std::memcpy(&quiet, &out[0], 4);
  const float canonical = std::numeric_limits<float>::quiet_NaN();
  uint32_t want;
  std::memcpy(&want, &canonical, 4);
  EXPECT_EQ(quiet, want);
  int8_t x[] = {127, -128}, y[] = {1, -1}, s[2], c[2];
  PairReduce(x, y, s, c, 2, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(int(s[0]), -128);
  EXPECT_EQ(int(s[1]), 127);
  EXPECT_TRUE(PairReducible(DataType::kFloat16, ReduceOp::kSum));
  EXPECT_TRUE(!PairReducible(DataType::kBfloat16, ReduceOp::kMax));  // taken in float32
  EXPECT_TRUE(!PairReducible(DataType::kFloat32, ReduceOp::kAverage));
}

TEST_F(ShmPairTest, ShmPairWaitEndsWithTheAbortStatus) {
  AbortFlag abort;
  Pairs pairs = MakePairs(&abort);
  std::vector<float> v(1000, 1.0f);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    abort.Set(Status::Aborted("rank 1 stopped responding"));
  });
  // Rank 1 never calls: rank 0 waits until the flag is set, then fails with its status.
  Status s = pairs.rank[0]->Allreduce(v.data(), v.data(), 1000, DataType::kFloat32, ReduceOp::kSum);
  setter.join();
  EXPECT_TRUE(s.code() == Status::Code::kAborted);
  EXPECT_CONTAINS(s.message(), "rank 1 stopped responding");
}

TEST_F(ShmPairTest, ShmSegmentNameIsGoneOnceUnlinked) {
  std::unique_ptr<ShmSegment> a, b, c;
  ASSERT_OK(ShmSegment::Create(4096, &a));
  ASSERT_OK(ShmSegment::Open(a->name(), 4096, &b));
  EXPECT_TRUE(!ShmSegment::Open(a->name(), 8192, &c).ok());  // wrong size is refused
  a->Unlink();
  EXPECT_TRUE(!ShmSegment::Open(a->name(), 4096, &c).ok());
  a->data()[0] = 42;  // the mappings stay shared
  EXPECT_EQ(int(b->data()[0]), 42);
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
