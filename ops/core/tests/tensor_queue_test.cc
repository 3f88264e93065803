// TensorQueue's waits (tensor_queue.h): SpinForWork, the lane's linger after a working cycle,
// ends as soon as something is submitted or Wake() is called, including what came before it
// started (no lost wake-up), and leaves the entry for TakeAll; WaitForWork then returns at
// once. The timeouts here are bounds that a correct queue never reaches, not timings.
#include <thread>

#include "../tensor_queue.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using TensorQueueTest = RankThreadsTest;  // the suite of this file

constexpr auto kNever = std::chrono::microseconds(std::chrono::seconds(20));

TensorEntry Entry(const std::string& name) {
  TensorEntry entry;
  entry.request = MakeRequest(name, {1});
  return entry;
}

TEST_F(TensorQueueTest, SpinSeesASubmissionMadeBeforeIt) {
  TensorQueue queue;
  queue.Submit(Entry("early"));
  EXPECT_TRUE(queue.SpinForWork(kNever));
  EXPECT_EQ(queue.TakeAll().size(), 1u);
}

TEST_F(TensorQueueTest, SpinEndsOnASubmissionFromAnotherThread) {
  TensorQueue queue;
  std::thread submitter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.Submit(Entry("late"));
  });
  const auto start = std::chrono::steady_clock::now();
  const bool seen = queue.SpinForWork(kNever);
  const auto spun = std::chrono::steady_clock::now() - start;
  submitter.join();
  EXPECT_TRUE(seen);
  EXPECT_TRUE(spun < kNever);
  queue.WaitForWork(kNever);  // returns at once: the entry is still queued
  EXPECT_EQ(queue.TakeAll().size(), 1u);
}

TEST_F(TensorQueueTest, SpinEndsOnWake) {
  TensorQueue queue;
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.Wake();
  });
  EXPECT_TRUE(queue.SpinForWork(kNever));
  waker.join();
}

TEST_F(TensorQueueTest, SpinTimesOutWhenNothingCame) {
  TensorQueue queue;
  queue.Submit(Entry("taken"));
  EXPECT_EQ(queue.TakeAll().size(), 1u);
  // What TakeAll took no longer counts as pending.
  EXPECT_FALSE(queue.SpinForWork(std::chrono::microseconds(500)));
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
