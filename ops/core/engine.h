// Engine: one per process. Owns MPI, the backends, the queue, the controller and the
// background thread that runs every collective (DESIGN.md section 2).
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
//   only bounds how soon stalls and a peer's shutdown are noticed. A rank that is computing
//   its next gradients is then woken ~20 times a second by its engine, where a 1 ms idle
//   cycle (with backoff to 20 ms, reset by every peer's activity) preempted its compute
//   thread ~150 times a second on 2 ranks sharing 2 cores and slowed every step by ~2%.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "abort_flag.h"
#include "backend/backend.h"
#include "backend/gpu_plane.h"
#include "backend/mpi/mpi_context.h"
#include "config.h"
#include "control_plane.h"
#include "controller.h"
#include "executor.h"
#include "host_memory_ops.h"
#include "huge_pages.h"
#include "peer_monitor.h"
#include "tensor_queue.h"
#include "timeline.h"

namespace kerashvd {

class Engine {
 public:
  // Longest nap while waiting for the other ranks in a negotiation with work pending here.
  static constexpr std::chrono::microseconds kPendingNap{50};

  static Status Create(const Config& config, std::unique_ptr<Engine>* out);
  ~Engine();

  // Hands a collective to the background thread. On error (engine stopped) `entry.done` is
  // not called; the caller reports the returned Status itself.
  Status Submit(TensorEntry entry);
  // Stops the background thread on every rank: the first rank to call it stops all ranks'
  // engines at the next cycle; anything still pending fails with Aborted.
  void Shutdown();

  // Starts (or restarts) writing a timeline; only rank 0 writes unless `path` contains
  // "{rank}", which is replaced by each rank's number.
  Status StartTimeline(const std::string& path, int64_t max_bytes);
  void StopTimeline() { timeline_.Stop(); }

  const Config& config() const { return config_; }
  const MpiContext& mpi() const { return *mpi_; }

 private:
  explicit Engine(const Config& config) : config_(config) {}
  void Loop();
  void Stop(const Status& reason);

  void OnPeerFailure(int rank, const std::string& what);
  // A GPU tensor must be on the GPU of this process's earlier GPU tensors (checked locally,
  // before negotiation, so that a misplaced tensor never leaves the other ranks waiting).
  Status CheckDevice(const Request& request);
  // The executor for a group: host or GPU, by where its tensors live. The first GPU group
  // creates the GPU plane, collectively (see backend/gpu_plane.h).
  Status ExecutorFor(const std::vector<WorkItem*>& group, Executor** out);

  Config config_;
  AbortFlag abort_;  // set when a peer fails; every wait in a collective checks it
  std::unique_ptr<MpiContext> mpi_;
  std::unique_ptr<ControlPlane> control_;
  HugePages huge_pages_{true};  // replaced from the config in Create
  std::unique_ptr<Backend> cpu_backend_;
  std::unique_ptr<Controller> controller_;
  HostMemoryOps host_memory_;
  std::unique_ptr<Executor> executor_;  // host tensors
  std::unique_ptr<GpuPlane> gpu_;       // GPU tensors; created by the first GPU group
  std::atomic<int> gpu_device_{-1};     // the GPU of the first GPU tensor submitted
  std::unique_ptr<PeerMonitor> monitor_;
  TensorQueue queue_;
  Timeline timeline_;
  uint64_t seen_submissions_ = 0;  // background thread only
  bool pending_work_ = false;      // background thread only: this cycle carries work
  std::thread thread_;
  std::atomic<bool> shutdown_requested_{false};
  std::mutex state_mutex_;
  bool stopped_ = false;
  Status stop_reason_;
};

}  // namespace kerashvd
