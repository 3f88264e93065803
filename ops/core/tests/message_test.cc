// The negotiation's messages (message.h): round trips through the wire format, and a corrupt
// message is an error, never a crash.
#include "../message.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using MessageTest = RankThreadsTest;  // the suite of this file

TEST_F(MessageTest, MessageRequestsRoundTrip) {
  Request a = MakeRequest("grad/0", {3, 4}, DataType::kBfloat16);
  a.rank = 2;
  a.prescale = 0.5;
  a.device = 1;
  a.process_set = 3;
  a.out_of_place = true;
  a.shapes.push_back({});
  Request b = MakeRequest("bad", {1}, DataType::kInt64, OpType::kAlltoall);
  b.error = "splits do not add up";
  std::vector<Request> parsed;
  ASSERT_OK(ParseRequests(SerializeRequests({a, b}), &parsed));
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0].name, "grad/0");
  EXPECT_EQ(parsed[0].rank, 2);
  EXPECT_EQ(parsed[0].prescale, 0.5);
  EXPECT_EQ(parsed[0].device, 1);
  EXPECT_EQ(parsed[0].process_set, 3);
  EXPECT_TRUE(parsed[0].out_of_place);
  EXPECT_EQ(parsed[0].shapes.size(), 2u);
  EXPECT_EQ(SignatureDifference(parsed[0], a), "");
  EXPECT_EQ(parsed[1].error, "splits do not add up");
  EXPECT_EQ(SignatureDifference(parsed[1], b), "");
}

TEST_F(MessageTest, MessageResponsesRoundTrip) {
  ResponseList list;
  list.evict_slots = {3, 1};
  list.fatal_error = "stalled";
  Response r;
  r.kind = Response::Kind::kError;
  r.request = MakeRequest("x", {2});
  r.error = "mismatch";
  r.cache_slot = 5;
  r.any_joined = true;
  list.responses.push_back(r);
  ResponseList parsed;
  ASSERT_OK(ParseResponses(SerializeResponses(list), &parsed));
  EXPECT_EQ(parsed.evict_slots.size(), 2u);
  EXPECT_EQ(parsed.evict_slots[0], 3);
  EXPECT_EQ(parsed.fatal_error, "stalled");
  ASSERT_EQ(parsed.responses.size(), 1u);
  EXPECT_TRUE(parsed.responses[0].kind == Response::Kind::kError);
  EXPECT_EQ(parsed.responses[0].error, "mismatch");
  EXPECT_EQ(parsed.responses[0].cache_slot, 5);
  EXPECT_TRUE(parsed.responses[0].any_joined);
}

TEST_F(MessageTest, MessageCorruptBytesAreAnError) {
  const std::string bytes = SerializeRequests({MakeRequest("a", {1, 2})});
  std::vector<Request> parsed;
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_TRUE(!ParseRequests(bytes.substr(0, cut), &parsed).ok());
  EXPECT_TRUE(!ParseRequests(bytes + "x", &parsed).ok());
  ResponseList list;
  EXPECT_TRUE(!ParseResponses("garbage", &list).ok());
}

TEST_F(MessageTest, MessageSignatureFields) {
  const Request a = MakeRequest("t", {2, 3});
  EXPECT_EQ(SignatureDifference(a, MakeRequest("t", {2, 4})), "shape");
  EXPECT_EQ(SignatureDifference(a, MakeRequest("t", {2, 3}, DataType::kInt32)), "dtype");
  EXPECT_EQ(SignatureDifference(a, MakeRequest("t", {2, 3}, DataType::kFloat32, OpType::kBroadcast)),
            "collective");
  Request other_op = a;
  other_op.reduce_op = ReduceOp::kMax;
  EXPECT_EQ(SignatureDifference(a, other_op), "reduce op");
  Request gpu = a;
  gpu.device = 0;
  EXPECT_EQ(SignatureDifference(a, gpu), "device");
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
