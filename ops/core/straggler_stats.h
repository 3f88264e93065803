// StragglerStats: what one rank records, in its lane's hot path, for the straggler report
// (kerashvd.straggler_report gathers every rank's records and compares them collective by
// collective; the analysis and its rules live in kerashvd/straggler.py).
//
// Per collective that finishes here, four numbers go into a ring of the last kRecent:
//   - wait: from this rank's submission to the end of its data transfer. An allreduce,
//     allgather, alltoall, reducescatter or barrier ends on every rank with the last rank's
//     data, so where two ranks' waits for the same collective differ, the one with the
//     shorter wait submitted later by that much: the others waited for it. Delays in the
//     network end everyone's wait alike and cancel out.
//   - entry lag: from the cycle that found the collective ready everywhere to the start of
//     its group's first data-plane call (fusion copies, scaling, waiting for GPU inputs, an
//     engine thread starved of CPU). A rank that enters later than the others keeps them
//     waiting inside the call.
//   - completion lag: from the end of the transfer to the end of the group's local work
//     (copying out, completing the ops). A rank slow here submits its next collective late.
//   The two lags are recorded for the first collective of each fused group only (the group
//   enters once), NaN for the others and for GPU groups (not timed).
//   - done: when it ended, in seconds on this rank's steady clock, so that the report can
//     merge the waits of collectives that overlap in time instead of adding them up.
// Every rank numbers these collectives alike, because every rank's work list is the same
// (controller.h): the report lines up the k-th record of every rank. A rank without an entry
// for a collective (inside join()) records a NaN wait. Broadcasts (the root may finish before
// the others), join, and another set's GPU collectives on the world's lane (only members run
// them) are not recorded (CountsForStragglers).
// Besides the ring, the time inside the data plane's calls and their number are summed.
//
// Cost: per collective one mutex and four stores; nothing communicates. Any thread may take
// a snapshot (Snapshot), the lane thread records, just after the group's ops completed: a
// snapshot taken right after a collective returned may miss it, so the report compares only
// the collectives that every rank's snapshot holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "message.h"

namespace kerashvd {

// Whether a collective goes into the straggler records (see above).
inline bool CountsForStragglers(const Request& request) {
  return request.op_type != OpType::kBroadcast && request.op_type != OpType::kJoin &&
         request.process_set == 0;
}

struct StragglerCounters {
  double elapsed_seconds = 0;  // since the last reset (or the engine's start)
  double now_seconds = 0;      // this rank's steady clock at the snapshot
  double transfer_seconds = 0; // inside data-plane calls
  int64_t transfer_calls = 0;
  // The recorded collectives since the reset (at most the last kRecent), numbered
  // first_seq, first_seq + 1, ... alike on every rank; `dropped` more ran since the reset
  // but left the ring.
  uint64_t first_seq = 0;
  uint64_t dropped = 0;
  std::vector<float> wait_seconds;
  std::vector<float> entry_lag_seconds;
  std::vector<float> completion_lag_seconds;
  std::vector<double> done_seconds;
};

class StragglerStats {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kRecent = 4096;

  StragglerStats()
      : since_(Clock::now()), wait_(kRecent), lag_(kRecent), completion_(kRecent),
        done_(kRecent) {}

  // The next recorded collective's transfer ended at `done` (NaN: no value, see above).
  void Completed(float wait_seconds, float entry_lag_seconds, float completion_lag_seconds,
                 Clock::time_point done);
  void AddTransfer(Clock::duration d);
  // The records since the last reset; `reset` starts a new interval.
  StragglerCounters Snapshot(bool reset);

  static double Seconds(Clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  }

 private:
  std::mutex mutex_;
  Clock::time_point since_;
  double transfer_seconds_ = 0;
  int64_t transfer_calls_ = 0;
  std::vector<float> wait_;  // ring: collective `seq` is at seq % kRecent
  std::vector<float> lag_;
  std::vector<float> completion_;
  std::vector<double> done_;
  uint64_t next_seq_ = 0;   // the next collective's number
  uint64_t reset_seq_ = 0;  // the first collective since the last reset
};

}  // namespace kerashvd
