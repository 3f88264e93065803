// Autotune: rank 0 searches the world lane's fusion threshold and cycle time online, during the
// first steps of training, and every rank applies each choice in the same negotiation cycle.
//
// The protocol:
//   1. Trial 0 runs the configured settings from the first cycle on, on every rank.
//   2. Rank 0's Tuner measures each trial: after `warmup_samples` discarded samples it takes
//      kSamplesPerTrial samples of `steps_per_sample` cycles that carried work each; a sample's
//      score is the bytes those cycles moved over the wall time from the sample's start to the
//      end of its last cycle (compute between steps included, so it follows training
//      throughput). A trial's score is the median of its samples.
//   3. When a trial ends, the Tuner proposes the next candidate (a TuneDecision). Rank 0's
//      Controller sends it in the next cycle's ResponseList (controller.h, step 4), which every
//      rank receives in the same cycle; every rank's Lane applies it after that cycle's
//      negotiation and before fusing its work. The fusion plan, which must be identical on
//      every rank, therefore changes on all ranks at the same cycle, and no rank decides alone.
//   4. The search is coordinate-wise over a small grid: the fusion thresholds of
//      kFusionCandidates with the configured cycle time, then the cycle times of
//      kCycleCandidates with the best threshold. The configured values are always a candidate.
//      After the last trial the Tuner proposes the best one measured, marked final, and stops
//      measuring: the settings are frozen for the rest of the run.
//
// Why these settings only: both change how work is packed and when the engine wakes, never the
// arithmetic. Fusion packs whole tensors into one buffer that is reduced element-wise, so each
// element is summed over the same ranks in the same order as alone: results are bitwise
// identical for every threshold. Hierarchical allreduce stays as configured (auto by
// default): it changes the order in which ranks' values are summed, so trials would give
// results that differ in the last bits.
//
// Each trial is logged as a CSV row (AutotuneLog) by rank 0, or by every rank when the path
// contains "{rank}". The decision carries the ended trial's score, so every rank's rows are
// identical, including the cycle at which each trial started.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "status.h"

namespace kerashvd {

// One candidate of the search: the settings a trial runs with.
struct TunedSettings {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool operator==(const TunedSettings& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_ms == o.cycle_time_ms;
  }
};

// What rank 0 sends every rank when a trial ends (in the ResponseList, message.h).
struct TuneDecision {
  int32_t trial = 0;          // the trial that starts now (final: the best trial's number)
  TunedSettings settings;     // its settings, applied from this cycle on
  bool final = false;         // the search is over: `settings` stay for the rest of the run
  double ended_score = 0;     // bytes per second of the trial that just ended
};

class Tuner {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSamplesPerTrial = 3;
  static constexpr int64_t kFusionCandidates[] = {1LL << 20, 8LL << 20, 32LL << 20, 128LL << 20};
  static constexpr double kCycleCandidates[] = {5.0, 20.0};

  // Starts trial 0 with the configured settings at `start`.
  Tuner(const Config& config, Clock::time_point start);

  // A cycle that carried `bytes` of work ended at `now`. Returns the decision to send when
  // this cycle ended a trial; nothing is measured again until Applied() is called.
  std::optional<TuneDecision> Observe(int64_t bytes, Clock::time_point now);
  // The decision was applied on every rank at `now` (the cycle that carried it).
  void Applied(Clock::time_point now);
  bool frozen() const { return frozen_; }
  const std::vector<TunedSettings>& candidates() const { return candidates_; }

 private:
  TuneDecision Next(double ended_score);

  const int warmup_samples_;
  const int64_t steps_per_sample_;
  std::vector<TunedSettings> candidates_;  // grows when the cycle-time phase starts
  size_t fusion_trials_ = 0;               // how many candidates are of the first phase
  std::vector<double> scores_;             // per finished trial
  int32_t trial_ = 0;
  bool waiting_ = false;  // a decision is on its way
  bool frozen_ = false;
  // The sample being measured.
  int samples_seen_ = 0;
  std::vector<double> samples_;
  int64_t cycles_ = 0;
  int64_t bytes_ = 0;
  Clock::time_point sample_start_;
};

// The CSV log of the trials: a header, one row per ended trial, then the chosen settings.
//   trial,start_cycle,fusion_threshold_bytes,cycle_time_ms,bytes_per_second,chosen
// `start_cycle` counts the lane's negotiation cycles, which every rank runs alike. The final
// row repeats the best trial's number, settings and score with start_cycle = the cycle at which
// they were frozen and chosen = 1.
class AutotuneLog {
 public:
  // Opens `path` for this rank (only rank 0 writes unless the path contains "{rank}", which
  // becomes the rank's number); an empty path or another rank: a log that writes nothing.
  static Status Open(const std::string& path, int rank, AutotuneLog* out);
  // Trial `trial` with `settings`, started at `start_cycle`, ended with `score`.
  void Trial(int32_t trial, int64_t start_cycle, const TunedSettings& settings, double score,
             bool chosen);

 private:
  std::ofstream file_;
};

}  // namespace kerashvd
