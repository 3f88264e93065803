// The test runner of harness.h.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "harness.h"

namespace kerashvd {
namespace testing {
namespace {

std::mutex failures_mutex;
int failures_in_test = 0;

}  // namespace

std::vector<TestCase>& Registry() {
  static std::vector<TestCase> tests;
  return tests;
}

void Fail(const char* file, int line, const std::string& what) {
  std::lock_guard<std::mutex> lock(failures_mutex);
  ++failures_in_test;
  std::printf("  %s:%d: failed: %s\n", file, line, what.c_str());
  std::fflush(stdout);
}

}  // namespace testing
}  // namespace kerashvd

int main(int argc, char** argv) {
  using namespace kerashvd::testing;
  const char* filter = argc > 1 ? argv[1] : "";
  int failed = 0, ran = 0;
  for (const TestCase& test : Registry()) {
    if (std::strstr(test.name, filter) == nullptr) continue;
    ++ran;
    {
      std::lock_guard<std::mutex> lock(failures_mutex);
      failures_in_test = 0;
    }
    std::printf("[ RUN  ] %s\n", test.name);
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    try {
      test.body();
    } catch (const AssertionFailed&) {
    } catch (const std::exception& e) {
      Fail(__FILE__, __LINE__, std::string("exception: ") + e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(failures_mutex);
    if (failures_in_test) ++failed;
    std::printf("[ %s ] %s (%.0f ms)\n", failures_in_test ? "FAIL" : " OK ", test.name, ms);
  }
  std::printf("%d of %d tests passed\n", ran - failed, ran);
  return failed;
}
