// Lane: one communicator's share of the engine. It owns the communicator's queue, negotiation
// (Controller), host executor and background thread. The engine runs one lane for the whole
// world (process set 0) and one for each other process set this rank belongs to.
//
// Why a thread per lane: a lane's cycle is a collective over its members only, so the lanes of
// disjoint (or overlapping) process sets make progress independently. Run on one thread in
// turn, every cycle would have to meet all ranks, and a collective of ranks {0, 1} would wait
// for rank 2's next cycle, up to the idle cycle time when rank 2 is busy computing. Each lane
// calls MPI only on its own communicator, which MPI_THREAD_MULTIPLE allows concurrently, and
// each collective waits only for members of its lane, which run the lane's cycles in the same
// order: lanes cannot deadlock each other.
//
// The loop: sleep until something is submitted, run one negotiation cycle, plan fusion over
// the cycle's work, execute each group, repeat. Entries submitted while a cycle runs are
// picked up by the next one, which is how tensors arriving together get fused.
//
// How long to sleep between cycles:
// - With work of its own waiting for late peers: kPendingNap, so that the cycle that finds
//   the work ready everywhere follows the last rank's submission closely.
// - With nothing pending here: the cycle time (KERASHVD_CYCLE_TIME, default 50 ms), whatever
//   the other ranks have pending. They can only be waiting for a submission of this rank,
//   and a submission wakes the loop at once, so no collective ever waits for this sleep; it
//   only bounds how soon stalls and a peer's shutdown are noticed. The exception is the
//   world's lane while a GPU collective of a process set is pending on some rank (see
//   device_router.h): that collective needs a cycle of every rank, so all ranks nap kPendingNap.
//   Otherwise a rank that is computing its next gradients is woken only ~20 times a second
//   by its engine: with 2 ranks sharing 2 cores, every wake-up preempts a compute thread, and
//   a cycle of about 1 ms slowed every training step by ~2%.
//
// Lingering (KERASHVD_LINGER_TIME, off by default): after a cycle that ran collectives, the
// loop polls its queue for up to that long, yielding the core between polls, before it
// sleeps. Collectives often come in runs (the next op of a graph is submitted microseconds
// after the previous one completes), and a thread asleep on a condition variable takes tens
// of microseconds to run again once woken: across two namespace nodes on one busy 2-core
// machine (python -m kerashvd.bench latency) the median time from a submission to the start
// of its negotiation was 46-244 us at 1 rank a node, 5 us at 2. Off by default because the
// poll spends CPU time that ranks sharing their cores need, and on that machine no gain could
// be told from its load; where every rank has a core to spare, 0.05 ms is a start.
//
// Carried allreduces (carry.h) are the world lane's only: their results come out of the
// negotiation, and the lane hands them to the executor before it plans fusion over the rest.
//
// Shutdown is negotiated like a collective: the lane stops on every member in the same cycle,
// the first one in which any member asks for it (RequestShutdown), and fails what is pending.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "abort_flag.h"
#include "autotune.h"
#include "backend/backend.h"
#include "config.h"
#include "control_plane.h"
#include "controller.h"
#include "device_router.h"
#include "executor.h"
#include "host_memory_ops.h"
#include "huge_pages.h"
#include "lane_transport.h"
#include "process_set_registry.h"
#include "straggler_stats.h"
#include "tensor_queue.h"
#include "timed_backend.h"
#include "timeline.h"

namespace kerashvd {

class Lane {
 public:
  // Longest nap while waiting for the other ranks in a negotiation with work pending here.
  static constexpr std::chrono::microseconds kPendingNap{50};
  // The engine's owners that only the world's lane uses, since it also negotiates and runs
  // the GPU collectives of process sets (device_router.h); a set's lane has neither. They
  // outlive the lane.
  struct WorldParts {
    // Asked whether a rank is a member of the set of a GPU collective (see Controller).
    const ProcessSetRegistry* sets;
    // Chooses the executor of each group: the host's, or a GPU plane's.
    DeviceRouter* router;
  };

  // `transport`: this lane's communicator, as a control plane and a host backend (made by the
  // group the lane runs over, Group::MakeLaneTransport). `world_ranks[i]` is the world rank of
  // its rank i (used in error messages). `abort` and `timeline` are the engine's and outlive
  // the lane.
  Lane(int id, LaneTransport transport, std::vector<int> world_ranks, const Config& config,
       AbortFlag* abort, Timeline* timeline, WorldParts world = {});
  ~Lane();

  ControlPlane* control() { return control_.get(); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  int id() const { return id_; }

  // Before Start(), world lane only: tune the fusion threshold and cycle time (autotune.h);
  // rank 0 searches, every rank applies its decisions and logs the trials to `log_path` (see
  // AutotuneLog::Open for which ranks write). Fails when the log cannot be written.
  Status EnableAutotune(const std::string& log_path);
  void Start();
  // On error (lane stopped) `entry.done` is not called; the caller reports the Status itself.
  Status Submit(TensorEntry entry);
  // Asks the members to stop this lane at their next cycle; Join waits for it.
  void RequestShutdown();
  void Join();
  // Ends a wait of the loop early (a peer failed: the loop then stops with the abort status).
  void Wake() { queue_.Wake(); }
  // The straggler report's numbers of this lane (straggler_stats.h); `reset` starts anew.
  StragglerCounters StragglerSnapshot(bool reset) { return stats_.Snapshot(reset); }

 private:
  void Loop();
  // First thing on the lane's thread, collective over its members: rank 0's fusion threshold
  // and carry limit hold on every rank (fusion groups and carried messages must match), and a
  // rank set otherwise says so.
  Status AgreeSettings();
  // Runs the cycle's work: carried allreduces, then the fusion groups. Returns the first error
  // of the control plane (ReduceAlone), after which the lane stops.
  Status Execute(CycleResult& cycle, int64_t* bytes);
  // Runs a group on `executor` and records its collectives for the straggler report.
  void RunTimed(Executor* executor, std::vector<WorkItem*>& group);
  void Stop(const Status& reason);
  // Applies autotune's decision of this cycle (every rank, same cycle) and logs the trial.
  void ApplyTune(const TuneDecision& decision);
  std::string ShutdownMessage(const std::vector<int>& ranks) const;

  const int id_;
  const std::vector<int> world_ranks_;
  const Config config_;
  AbortFlag* abort_;
  Timeline* timeline_;
  std::unique_ptr<HugePages> huge_pages_;  // the backend's (LaneTransport::huge_pages)
  std::unique_ptr<ControlPlane> control_;
  StragglerStats stats_;
  TimedBackend* timed_backend_ = nullptr;  // backend_, which times the host collectives
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Controller> controller_;
  HostMemoryOps host_memory_;
  std::unique_ptr<Executor> executor_;
  DeviceRouter* router_;
  TensorQueue queue_;
  uint64_t seen_submissions_ = 0;  // lane thread only
  bool pending_work_ = false;      // lane thread only: this cycle carries work
  // Lane thread only: the settings the cycles run with (autotune changes them), and the
  // cycles run so far, which every member counts alike.
  int64_t fusion_threshold_;
  std::chrono::microseconds idle_;
  int64_t cycles_ = 0;
  // Autotune (world lane only): the search (rank 0), the trial running and its log.
  std::unique_ptr<Tuner> tuner_;
  bool autotune_ = false;
  AutotuneLog tune_log_;
  int32_t trial_ = 0;
  int64_t trial_start_cycle_ = 0;
  TunedSettings trial_settings_;
  std::vector<double> trial_scores_;
  std::thread thread_;
  std::atomic<bool> shutdown_requested_{false};
  std::mutex state_mutex_;
  bool stopped_ = false;
  Status stop_reason_;
};

}  // namespace kerashvd
