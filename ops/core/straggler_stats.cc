#include "straggler_stats.h"

#include <algorithm>

namespace kerashvd {

void StragglerStats::Completed(float wait_seconds, float entry_lag_seconds,
                               float completion_lag_seconds, Clock::time_point done) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t at = next_seq_ % kRecent;
  wait_[at] = wait_seconds;
  lag_[at] = entry_lag_seconds;
  completion_[at] = completion_lag_seconds;
  done_[at] = Seconds(done);
  ++next_seq_;
}

void StragglerStats::AddTransfer(Clock::duration d) {
  std::lock_guard<std::mutex> lock(mutex_);
  transfer_seconds_ += std::chrono::duration<double>(d).count();
  ++transfer_calls_;
}

StragglerCounters StragglerStats::Snapshot(bool reset) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  StragglerCounters out;
  out.elapsed_seconds = std::chrono::duration<double>(now - since_).count();
  out.now_seconds = Seconds(now);
  out.transfer_seconds = transfer_seconds_;
  out.transfer_calls = transfer_calls_;
  out.first_seq = std::max(reset_seq_, next_seq_ > kRecent ? next_seq_ - kRecent : 0);
  out.dropped = out.first_seq - reset_seq_;
  for (uint64_t seq = out.first_seq; seq < next_seq_; ++seq) {
    out.wait_seconds.push_back(wait_[seq % kRecent]);
    out.entry_lag_seconds.push_back(lag_[seq % kRecent]);
    out.completion_lag_seconds.push_back(completion_[seq % kRecent]);
    out.done_seconds.push_back(done_[seq % kRecent]);
  }
  if (reset) {
    since_ = now;
    transfer_seconds_ = 0;
    transfer_calls_ = 0;
    reset_seq_ = next_seq_;
  }
  return out;
}

}  // namespace kerashvd
