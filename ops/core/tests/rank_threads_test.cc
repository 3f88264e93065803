#include "rank_threads_test.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kerashvd {
namespace testing {

void RunRanks(int size, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&body, r] {
      SCOPED_TRACE("rank " + std::to_string(r));  // per thread: names the rank of a failure
      try {
        body(r);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " threw: " << e.what();
      } catch (...) {
        ADD_FAILURE() << "rank " << r << " threw";
      }
    });
  for (std::thread& t : threads) t.join();
}

// A thread that waits for the test to end, and ends the process if it does not in time.
struct RankThreadsTest::Guard {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

void RankThreadsTest::SetUp() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(test->test_suite_name()) + "." + test->name();
  guard_ = std::make_shared<Guard>();
  guard_->thread = std::thread([guard = guard_, name] {
    std::unique_lock<std::mutex> lock(guard->mutex);
    const auto limit = std::chrono::seconds(kHangSeconds);
    if (guard->cv.wait_for(lock, limit, [guard] { return guard->done; })) return;
    std::fprintf(stderr,
                 "[  HANG    ] %s still runs after %d s: a rank waits for one that never comes?\n",
                 name.c_str(), kHangSeconds);
    std::fflush(stderr);
    std::_Exit(3);
  });
}

void RankThreadsTest::TearDown() {
  {
    std::lock_guard<std::mutex> lock(guard_->mutex);
    guard_->done = true;
  }
  guard_->cv.notify_all();
  guard_->thread.join();
  guard_.reset();
}

}  // namespace testing
}  // namespace kerashvd
