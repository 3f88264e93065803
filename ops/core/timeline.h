// Timeline: a Chrome-trace JSON file of where each collective's time goes, readable by
// Perfetto and chrome://tracing.
//
// Rows: one per tensor name (pid = rank, tid = tensor), plus row 0 for the engine's cycles.
// Phases per tensor: NEGOTIATE (submitted -> every rank ready), and within it LAST_CYCLE (the
// start of the cycle that found it ready -> ready: that cycle's negotiation round trip, with
// the wait for late peers), QUEUE (ready -> its group starts), MEMCPY_IN_FUSION_BUFFER, the
// backend collective (e.g. ALLREDUCE), MEMCPY_OUT_FUSION_BUFFER, COMPLETE (the group's
// collective done -> its ops completed). Row 0: CYCLE (a cycle's execution of its work) and
// NEGOTIATION (a cycle's negotiation, when this rank had work pending, with the control
// plane's polls and naps). Idle cycles are not recorded.
//
// Crash safety: the file is a JSON array that always ends with "]". A writer thread appends
// the events recorded since its last pass every 100 ms by overwriting that closing bracket
// with ",<events>]" in one pwrite, so the file is valid JSON between passes, also after
// Ctrl-C or SIGKILL (the last 100 ms of events may be missing). Once the file reaches
// max_bytes, recording stops and a final "TIMELINE_TRUNCATED" event says so.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "status.h"

namespace kerashvd {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  ~Timeline() { Stop(); }

  Status Start(const std::string& path, int rank, int64_t max_bytes);
  void Stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // A phase of one tensor; `args` is a JSON object body such as "\"bytes\": 4096" or "".
  void Phase(const std::string& tensor, const char* phase, Clock::time_point start,
             Clock::time_point end, const std::string& args = "");
  void Cycle(Clock::time_point start, Clock::time_point end, size_t tensors, int64_t bytes);
  // An event `name` on row 0 (the engine's); `args` as for Phase.
  void Engine(const char* name, Clock::time_point start, Clock::time_point end,
              const std::string& args);

 private:
  void Record(std::string event);
  int TensorRow(const std::string& tensor);  // call with mutex_ held
  int64_t Micros(Clock::time_point t) const;
  void WriterLoop();
  void Flush();

  std::atomic<bool> active_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> pending_;
  std::map<std::string, int> rows_;
  bool stop_ = false;
  bool truncated_ = false;
  int fd_ = -1;
  int rank_ = 0;
  int64_t max_bytes_ = 0;
  int64_t end_offset_ = 0;  // where the closing "]" starts
  bool first_event_ = true;
  Clock::time_point origin_;
  std::thread writer_;
};

}  // namespace kerashvd
