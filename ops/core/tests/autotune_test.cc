// Autotune (autotune.h): the Tuner's search on a synthetic clock, and whole lanes on a
// FakeWorld where rank 0 searches and every rank applies each trial in the same cycle.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "../autotune.h"
#include "lane_rank.h"
#include "rank_threads_test.h"
#include "test_util.h"

namespace kerashvd {
namespace testing {
namespace {

using AutotuneTest = RankThreadsTest;  // the suite of this file
using Clock = Tuner::Clock;

Config TunedConfig(int64_t warmup, int64_t steps) {
  Config config;
  config.autotune = true;
  config.autotune_warmup_samples = warmup;
  config.autotune_steps_per_sample = steps;
  return config;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(AutotuneTest, TunerTriesEachCandidateThenFreezesOnTheFastest) {
  const Config config = TunedConfig(/*warmup=*/1, /*steps=*/2);
  Clock::time_point now = Clock::now();
  Tuner tuner(config, now);
  // The configured settings first, then the other thresholds with the configured cycle time.
  ASSERT_EQ(tuner.candidates().size(), 4u);
  EXPECT_EQ(tuner.candidates()[0].fusion_threshold_bytes, config.fusion_threshold_bytes);
  EXPECT_EQ(tuner.candidates()[0].cycle_time_ms, config.cycle_time_ms);
  // Trial k moves bytes at a speed of its own: 8 MiB (trial 2) is the fastest threshold, and
  // with it a 5 ms cycle time (trial 4) is faster still.
  const std::vector<int64_t> ms_per_cycle{4, 3, 2, 3};
  std::vector<TuneDecision> decisions;
  int cycles = 0;
  while (!tuner.frozen() && cycles < 1000) {
    const size_t trial = decisions.empty() ? 0 : decisions.back().trial;
    const int64_t ms = trial < ms_per_cycle.size() ? ms_per_cycle[trial]
                       : tuner.candidates()[trial].cycle_time_ms == 5.0 ? 1 : 5;
    now += std::chrono::milliseconds(ms);
    ++cycles;
    std::optional<TuneDecision> d = tuner.Observe(1000, now);
    if (!d) continue;
    // While a decision travels, nothing is measured (the count of 8 below holds it too).
    for (int i = 0; i < 20; ++i) EXPECT_FALSE(tuner.Observe(1000, now).has_value());
    decisions.push_back(*d);
    // Each trial: 1 warm-up sample and 3 measured ones, 2 cycles each.
    EXPECT_EQ(cycles, 8);
    cycles = 0;
    tuner.Applied(now);
  }
  // 4 thresholds, then 2 more cycle times with the best one; the 6th decision is the final one.
  ASSERT_EQ(decisions.size(), 6u);
  for (int t = 1; t <= 5; ++t) EXPECT_EQ(decisions[t - 1].trial, t);
  EXPECT_EQ(decisions[3].settings.fusion_threshold_bytes, 8LL << 20);  // the best threshold
  EXPECT_EQ(decisions[3].settings.cycle_time_ms, 5.0);
  EXPECT_EQ(decisions[4].settings.cycle_time_ms, 20.0);
  EXPECT_NEAR(decisions[0].ended_score, 1000 / 0.004, 1.0);  // bytes per second of trial 0
  const TuneDecision& last = decisions.back();
  EXPECT_TRUE(last.final);
  EXPECT_EQ(last.trial, 4);  // 8 MiB at 5 ms: 1 ms a cycle
  EXPECT_EQ(last.settings.fusion_threshold_bytes, 8LL << 20);
  EXPECT_EQ(last.settings.cycle_time_ms, 5.0);
  EXPECT_FALSE(tuner.Observe(1000, now + std::chrono::seconds(1)).has_value());
}

TEST_F(AutotuneTest, EveryRankAppliesEachTrialInTheSameCycle) {
  const int n = 3, steps = 150;
  FakeWorld world(n);
  char dir[] = "/tmp/kerashvd-autotune-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir) != nullptr);
  const std::string log = std::string(dir) + "/trials.{rank}.csv";
  const Config config = TunedConfig(/*warmup=*/0, /*steps=*/1);
  RunRanks(n, [&](int rank) {
    Status enabled;
    LaneRank me(&world, rank, config, [&](Lane* lane) { enabled = lane->EnableAutotune(log); });
    ASSERT_OK(enabled);
    // Steps of two tensors each, as a small model's gradients; every result is checked.
    for (int step = 0; step < steps; ++step) {
      std::vector<float> a{1.0f * rank + step, 2.0f}, b{0.5f * rank}, out_a, out_b;
      Status sa, sb;
      auto fa = me.Allreduce("a", a, &out_a, &sa);
      auto fb = me.Allreduce("b", b, &out_b, &sb);
      ASSERT_OK(sa);
      ASSERT_OK(sb);
      ASSERT_OK(fa.get());
      ASSERT_OK(fb.get());
      EXPECT_EQ(out_a[0], 3.0f * step + 3.0f);  // (0 + 1 + 2) + 3 * step
      EXPECT_EQ(out_a[1], 6.0f);
      EXPECT_EQ(out_b[0], 1.5f);
    }
  });
  std::vector<std::string> logs;
  for (int r = 0; r < n; ++r) logs.push_back(ReadFile(std::string(dir) + "/trials." +
                                                     std::to_string(r) + ".csv"));
  // Rows: header, 6 trials, the chosen one; identical on every rank, cycle numbers included.
  std::vector<std::string> rows;
  std::stringstream lines(logs[0]);
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 8u) << logs[0];
  EXPECT_EQ(rows[0], "trial,start_cycle,fusion_threshold_bytes,cycle_time_ms,bytes_per_second,chosen");
  EXPECT_CONTAINS(rows[1], "0,0,134217728,50,");
  for (int t = 1; t <= 6; ++t) EXPECT_EQ(rows[t].back(), '0') << rows[t];
  // The cycle-time trials, written as numbers read back: 5, not 5e+00.
  auto cycle_time = [](const std::string& row) {
    std::stringstream fields(row);
    std::string field;
    for (int i = 0; i < 4; ++i) std::getline(fields, field, ',');
    return field;
  };
  EXPECT_EQ(cycle_time(rows[5]), "5");
  EXPECT_EQ(cycle_time(rows[6]), "20");
  EXPECT_EQ(rows[7].back(), '1');
  for (int r = 1; r < n; ++r) EXPECT_EQ(logs[r], logs[0]) << "rank " << r;
  for (int r = 0; r < n; ++r) std::remove((std::string(dir) + "/trials." + std::to_string(r) + ".csv").c_str());
  rmdir(dir);
}

TEST_F(AutotuneTest, AnUnwritableLogIsAnErrorNamingThePath) {
  FakeWorld world(1);
  Status enabled;
  LaneRank me(&world, 0, TunedConfig(0, 1), [&](Lane* lane) {
    enabled = lane->EnableAutotune("/nonexistent-dir/trials.csv");
  });
  EXPECT_TRUE(enabled.code() == Status::Code::kInvalidArgument);
  EXPECT_CONTAINS(enabled.message(), "/nonexistent-dir/trials.csv");
  EXPECT_CONTAINS(enabled.message(), "KERASHVD_AUTOTUNE_LOG");
}

}  // namespace
}  // namespace testing
}  // namespace kerashvd
