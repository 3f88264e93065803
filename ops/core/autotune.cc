#include "autotune.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cmath>

namespace kerashvd {

Tuner::Tuner(const Config& config, Clock::time_point start)
    : warmup_samples_(static_cast<int>(config.autotune_warmup_samples)),
      steps_per_sample_(std::max<int64_t>(1, config.autotune_steps_per_sample)),
      sample_start_(start) {
  const TunedSettings configured{config.fusion_threshold_bytes, config.cycle_time_ms};
  candidates_.push_back(configured);
  for (int64_t fusion : kFusionCandidates)
    if (fusion != configured.fusion_threshold_bytes)
      candidates_.push_back({fusion, configured.cycle_time_ms});
  fusion_trials_ = candidates_.size();
}

std::optional<TuneDecision> Tuner::Observe(int64_t bytes, Clock::time_point now) {
  if (frozen_ || waiting_ || bytes <= 0) return std::nullopt;
  bytes_ += bytes;
  if (++cycles_ < steps_per_sample_) return std::nullopt;
  const double seconds = std::chrono::duration<double>(now - sample_start_).count();
  const double score = seconds > 0 ? static_cast<double>(bytes_) / seconds : 0.0;
  cycles_ = 0;
  bytes_ = 0;
  sample_start_ = now;
  if (++samples_seen_ <= warmup_samples_) return std::nullopt;
  samples_.push_back(score);
  if (samples_.size() < static_cast<size_t>(kSamplesPerTrial)) return std::nullopt;
  std::sort(samples_.begin(), samples_.end());
  const double median = samples_[samples_.size() / 2];
  samples_.clear();
  samples_seen_ = 0;
  scores_.push_back(median);
  waiting_ = true;
  return Next(median);
}

void Tuner::Applied(Clock::time_point now) {
  waiting_ = false;
  cycles_ = 0;
  bytes_ = 0;
  sample_start_ = now;
}

TuneDecision Tuner::Next(double ended_score) {
  TuneDecision decision;
  decision.ended_score = ended_score;
  if (scores_.size() == fusion_trials_ && candidates_.size() == fusion_trials_) {
    // The threshold phase is over: try the other cycle times with its best threshold.
    const size_t best = std::max_element(scores_.begin(), scores_.end()) - scores_.begin();
    const TunedSettings base = candidates_[best];
    for (double cycle : kCycleCandidates)
      if (cycle != base.cycle_time_ms)
        candidates_.push_back({base.fusion_threshold_bytes, cycle});
  }
  if (scores_.size() < candidates_.size()) {
    trial_ = static_cast<int32_t>(scores_.size());
    decision.trial = trial_;
    decision.settings = candidates_[trial_];
    return decision;
  }
  // The first of equal scores wins, so the configured settings win a tie.
  const size_t best = std::max_element(scores_.begin(), scores_.end()) - scores_.begin();
  frozen_ = true;
  decision.trial = static_cast<int32_t>(best);
  decision.settings = candidates_[best];
  decision.final = true;
  return decision;
}

Status AutotuneLog::Open(const std::string& path, int rank, AutotuneLog* out) {
  if (path.empty()) return Status::Ok();
  std::string resolved = path;
  const std::string marker = "{rank}";
  const size_t at = resolved.find(marker);
  if (at == std::string::npos) {
    if (rank != 0) return Status::Ok();
  } else {
    resolved.replace(at, marker.size(), std::to_string(rank));
  }
  out->file_.open(resolved, std::ios::out | std::ios::trunc);
  if (!out->file_)
    return Status::InvalidArgument("cannot write the autotune log '" + resolved +
                                   "': " + std::strerror(errno) +
                                   ". Set autotune_log_file (KERASHVD_AUTOTUNE_LOG) to a "
                                   "writable path.");
  out->file_ << "trial,start_cycle,fusion_threshold_bytes,cycle_time_ms,bytes_per_second,chosen\n";
  out->file_.flush();
  return Status::Ok();
}

void AutotuneLog::Trial(int32_t trial, int64_t start_cycle, const TunedSettings& settings,
                        double score, bool chosen) {
  if (!file_.is_open()) return;
  file_ << trial << ',' << start_cycle << ',' << settings.fusion_threshold_bytes << ','
        << settings.cycle_time_ms << ',' << std::llround(score) << ',' << (chosen ? 1 : 0)
        << '\n';
  file_.flush();
}

}  // namespace kerashvd
