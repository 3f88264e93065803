// The fixture and checks of the engine's unit tests: GoogleTest, with ranks as threads of one
// process (in the manner of Gloo's test/base_test.h). A test body calls RunRanks(n, body),
// which runs body(rank) on n threads and waits for them; the ranks talk through a FakeWorld
// (fake_world.h). GoogleTest's assertions work on the rank threads: a failure there fails the
// test and names its rank (each thread holds a SCOPED_TRACE), and an ASSERT_* there ends that
// rank's body only.
//
// Every test is a TEST_F of RankThreadsTest, under the suite of its file (e.g.
// `using ControllerTest = RankThreadsTest;`). The fixture guards against hangs: a test that
// runs longer than kHangSeconds (a rank waiting for one that never comes) ends the binary
// with a line naming the test, instead of leaving it to an outer timeout that names nothing.
//
// A test written for a registry harness in the style of `TEST(Name) { ... }` (one name, a
// function registered at static initialization) converts mechanically:
//   #include "harness.h"        ->  #include "rank_threads_test.h"
//   TEST(ControllerFoo) {       ->  TEST_F(ControllerTest, ControllerFoo) {
//                                   (the name is kept; the suite is the file's)
//   EXPECT_TRUE/EQ, ASSERT_TRUE/EQ, EXPECT_OK, ASSERT_OK, EXPECT_CONTAINS, RunRanks and
//   Fail(__FILE__, __LINE__, what): unchanged (defined here for GoogleTest).
// The one difference in meaning: GoogleTest's ASSERT_* returns from the function it is in,
// where such a harness throws out of the test. An ASSERT_* is therefore only allowed in a
// function returning void, and a caller that must stop when its helper's ASSERT_* fails
// checks HasFatalFailure() after the call. And an EXPECT_* as the body of an `if` without
// braces draws g++'s -Wdangling-else: add the braces.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "../status.h"

namespace kerashvd {
namespace testing {

// Runs body(rank) on `size` threads, one per rank, and waits for all of them. A failed
// assertion on a rank thread names the rank; an exception leaving body fails the test.
void RunRanks(int size, const std::function<void(int rank)>& body);

// The base of every test: a hang guard around each test.
class RankThreadsTest : public ::testing::Test {
 public:
  static constexpr int kHangSeconds = 60;

 protected:
  void SetUp() override;
  void TearDown() override;

 private:
  struct Guard;
  std::shared_ptr<Guard> guard_;
};

// A failure at `file`:`line` of the running test (thread-safe).
inline void Fail(const char* file, int line, const std::string& what) {
  ADD_FAILURE_AT(file, line) << what;
}

// For EXPECT_OK / ASSERT_OK: `status` is ok, else its message.
inline ::testing::AssertionResult IsOk(const char* expression, const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expression << " is not ok: " << status.message();
}

// For EXPECT_CONTAINS: `haystack` contains `needle`.
inline ::testing::AssertionResult Contains(const char* haystack_expression,
                                           const char* needle_expression,
                                           const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << haystack_expression << " ('" << haystack
                                       << "') does not contain " << needle_expression << " ('"
                                       << needle << "')";
}

}  // namespace testing
}  // namespace kerashvd

// Each evaluates its arguments once.
#define EXPECT_OK(status) EXPECT_PRED_FORMAT1(::kerashvd::testing::IsOk, status)
#define ASSERT_OK(status) ASSERT_PRED_FORMAT1(::kerashvd::testing::IsOk, status)
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::kerashvd::testing::Contains, haystack, needle)
