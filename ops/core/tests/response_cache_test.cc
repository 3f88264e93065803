// ResponseCache (response_cache.h): slots, signatures, the lowest free slot, trimming.
#include "../response_cache.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using ResponseCacheTest = RankThreadsTest;  // the suite of this file

TEST_F(ResponseCacheTest, CacheStartsEmpty) {
  ResponseCache cache(4);
  EXPECT_EQ(cache.num_slots(), 0);
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(cache.Find("a"), -1);
  EXPECT_EQ(cache.FreeSlot(), 0);
  EXPECT_TRUE(!cache.Occupied(0));
}

TEST_F(ResponseCacheTest, CacheInsertFindMatch) {
  ResponseCache cache(4);
  const Request a = MakeRequest("a", {2, 3});
  cache.Insert(0, a);
  EXPECT_EQ(cache.Find("a"), 0);
  EXPECT_TRUE(cache.Matches(0, a));
  EXPECT_EQ(cache.FreeSlot(), 1);
  // Same name, another signature: not a match (the rank then negotiates in full).
  EXPECT_TRUE(!cache.Matches(0, MakeRequest("a", {2, 4})));
  EXPECT_TRUE(!cache.Matches(0, MakeRequest("a", {2, 3}, DataType::kFloat64)));
  // Same signature, another name: not a match either.
  EXPECT_TRUE(!cache.Matches(0, MakeRequest("b", {2, 3})));
  EXPECT_TRUE(!cache.Matches(1, a));  // an empty slot matches nothing
  // Fields outside the signature do not matter.
  Request moved = a;
  moved.rank = 3;
  moved.out_of_place = true;
  EXPECT_TRUE(cache.Matches(0, moved));
}

TEST_F(ResponseCacheTest, CacheAllgatherFirstDimensionIsNotSignature) {
  ResponseCache cache(4);
  cache.Insert(0, MakeRequest("g", {5, 3}, DataType::kFloat32, OpType::kAllgather));
  EXPECT_TRUE(cache.Matches(0, MakeRequest("g", {7, 3}, DataType::kFloat32, OpType::kAllgather)));
  EXPECT_TRUE(!cache.Matches(0, MakeRequest("g", {7, 4}, DataType::kFloat32, OpType::kAllgather)));
}

TEST_F(ResponseCacheTest, CacheEvictFreesLowestSlotAndTrims) {
  ResponseCache cache(8);
  cache.Insert(0, MakeRequest("a", {1}));
  cache.Insert(1, MakeRequest("b", {1}));
  cache.Insert(2, MakeRequest("c", {1}));
  EXPECT_EQ(cache.num_slots(), 3);
  cache.Evict(1);
  EXPECT_EQ(cache.Find("b"), -1);
  EXPECT_EQ(cache.FreeSlot(), 1);
  EXPECT_EQ(cache.num_slots(), 3);  // a hole in the middle stays
  cache.Evict(2);
  EXPECT_EQ(cache.num_slots(), 1);  // free slots at the end are trimmed...
  EXPECT_EQ(cache.size(), 1);
  cache.Evict(7);                   // ...and evicting an empty slot is harmless
  EXPECT_EQ(cache.num_slots(), 1);
}

TEST_F(ResponseCacheTest, CacheInsertOverOccupiedSlotReplacesIt) {
  ResponseCache cache(2);
  cache.Insert(0, MakeRequest("a", {1}));
  cache.Insert(0, MakeRequest("b", {1}));
  EXPECT_EQ(cache.Find("a"), -1);
  EXPECT_EQ(cache.Find("b"), 0);
  EXPECT_EQ(cache.size(), 1);
}

TEST_F(ResponseCacheTest, CacheFullHasNoFreeSlot) {
  ResponseCache cache(2);
  cache.Insert(0, MakeRequest("a", {1}));
  cache.Insert(1, MakeRequest("b", {1}));
  EXPECT_EQ(cache.FreeSlot(), -1);
  ResponseCache disabled(0);
  EXPECT_EQ(disabled.FreeSlot(), -1);
}

TEST_F(ResponseCacheTest, CacheableRequests) {
  EXPECT_TRUE(MakeRequest("a", {1}).Cacheable());
  EXPECT_TRUE(!MakeRequest("b", {}, DataType::kFloat32, OpType::kBarrier).Cacheable());
  EXPECT_TRUE(!MakeRequest("j", {}, DataType::kFloat32, OpType::kJoin).Cacheable());
  Request failed = MakeRequest("f", {1});
  failed.error = "bad splits";
  EXPECT_TRUE(!failed.Cacheable());
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
