// A tiny test harness for the engine's C++ unit tests: a registry of test functions and a few
// assertion macros. No dependency, so the tests build offline with the compiler alone.
//
//   TEST(FusionKeepsOrder) { EXPECT_EQ(PlanFusion(work, 64).size(), 2u); }
//
// EXPECT_* records a failure and goes on; ASSERT_* records it and leaves the test. The test
// binary runs every test (or those whose name contains argv[1]), prints each failure with its
// file and line, and exits with the number of failed tests (0: all passed).
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace kerashvd {
namespace testing {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

std::vector<TestCase>& Registry();
// Records one failed check of the running test (thread-safe: rank threads call it too).
void Fail(const char* file, int line, const std::string& what);

struct Registrar {
  Registrar(const char* name, std::function<void()> body) {
    Registry().push_back({name, std::move(body)});
  }
};

// Thrown by ASSERT_* to leave the test body; caught by the runner (and by RunRanks).
struct AssertionFailed {};

template <typename A, typename B>
std::string Describe(const char* a_text, const char* b_text, const A& a, const B& b) {
  std::ostringstream out;
  out << a_text << " == " << b_text << " (" << a << " vs " << b << ")";
  return out.str();
}

}  // namespace testing
}  // namespace kerashvd

#define KHVD_TEST_CONCAT2(a, b) a##b
#define KHVD_TEST_CONCAT(a, b) KHVD_TEST_CONCAT2(a, b)

#define TEST(name)                                                               \
  static void KhvdTest_##name();                                                 \
  static ::kerashvd::testing::Registrar KHVD_TEST_CONCAT(khvd_registrar_, name)( \
      #name, KhvdTest_##name);                                                   \
  static void KhvdTest_##name()

#define KHVD_CHECK(cond, text, on_fail)                                  \
  do {                                                                   \
    if (!(cond)) {                                                       \
      ::kerashvd::testing::Fail(__FILE__, __LINE__, text);               \
      on_fail;                                                           \
    }                                                                    \
  } while (0)

#define EXPECT_TRUE(cond) KHVD_CHECK((cond), #cond, (void)0)
#define ASSERT_TRUE(cond) KHVD_CHECK((cond), #cond, throw ::kerashvd::testing::AssertionFailed())
#define EXPECT_EQ(a, b) \
  KHVD_CHECK((a) == (b), ::kerashvd::testing::Describe(#a, #b, (a), (b)), (void)0)
#define ASSERT_EQ(a, b)                                                   \
  KHVD_CHECK((a) == (b), ::kerashvd::testing::Describe(#a, #b, (a), (b)), \
             throw ::kerashvd::testing::AssertionFailed())
// `haystack` (a std::string) contains `needle`.
#define EXPECT_CONTAINS(haystack, needle)                                              \
  KHVD_CHECK(std::string(haystack).find(needle) != std::string::npos,                 \
             std::string("'") + std::string(haystack) + "' contains '" + (needle) + "'", \
             (void)0)
#define EXPECT_OK(status) \
  KHVD_CHECK((status).ok(), std::string(#status " is ok: ") + (status).message(), (void)0)
#define ASSERT_OK(status)                                                          \
  KHVD_CHECK((status).ok(), std::string(#status " is ok: ") + (status).message(), \
             throw ::kerashvd::testing::AssertionFailed())
